#!/usr/bin/env bash
# The two short learning runs of docs/results.md, side by side on one GPU (each model is small):
#   math: GRPO (the SvS paper's RLVR baseline) on generated grade-school math, held-out
#         pass@1/pass@8 before and after (configs/svs_gsm_h200.py:rlvr);
#   ssp:  SSP self-play on the shipped corpus with the format warm start, held-out EM/F1 on the
#         141 shipped questions for the base model, the warm-started one and the trained one
#         (configs/ssp_small_h200.py, BM25 index over the shipped corpus).
# Each training run is cut by a wall-clock limit (checkpoints every 2 steps; the last one is
# evaluated). Outputs: OUT/{math,ssp}/... and OUT/results.tar.gz (metrics, samples, eval tables).
#
#   bash launch/learning_runs_h200.sh MODEL.gguf OUT [MATH_TRAIN_S] [SSP_TRAIN_S]
#   (then, anywhere: ssp-jax plot OUT/math/run --out plots/math; ssp-jax plot OUT/ssp/run ...)
# Wall time: the SSP run needs about SSP_TRAIN_S + 250 s (index, warm start ~90 s on first use,
# three evaluations ~50 s each); on 2026-12-01 a 390 s limit in a 600 s call left no time for
# the last evaluation.
# Environment: RUNS="math ssp" (either or both), MATH_CONFIG (default configs/svs_gsm_h200.py:rlvr;
# configs/svs_gsm_h200.py is SvS with synthesis).
set -uo pipefail
MODEL=${1:?usage: learning_runs_h200.sh MODEL.gguf OUT [MATH_TRAIN_S] [SSP_TRAIN_S]}
OUT=${2:?output directory}
TM=${3:-300}
TS=${4:-300}
PY=${PYTHON:-python3}
RUNS=${RUNS:-math ssp}
MATH_CONFIG=${MATH_CONFIG:-configs/svs_gsm_h200.py:rlvr}
mkdir -p "$OUT/math" "$OUT/ssp"
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.45}
export SSP_JAX_CACHE=${SSP_JAX_CACHE:-$OUT/cache}

math_run() {
  local c="$MATH_CONFIG" m="--config.model.path=$MODEL"
  $PY -m ssp_jax eval --config $c $m --out "$OUT/math/eval_before"
  timeout -s INT "$TM" $PY -m ssp_jax train --config $c $m --config.workdir="$OUT/math/run" \
    --config.total_steps=200 --config.checkpoint.every=2 --config.checkpoint.async_save=false \
    --config.progress=false
  $PY -m ssp_jax eval --config $c $m --checkpoint "$OUT/math/run" --out "$OUT/math/eval_after"
}

ssp_run() {
  local c="configs/ssp_small_h200.py:root=$OUT/ssp" m="--config.model.path=$MODEL"
  $PY -m ssp_jax index build --corpus retrieval/data/wiki_sample.jsonl.gz --encoder bm25 \
    --out "$OUT/ssp/bm25"
  timeout -s INT "$TS" $PY -m ssp_jax train --config $c $m --config.total_steps=200 \
    --config.checkpoint.every=2 --config.checkpoint.async_save=false --config.progress=false
  local warm
  warm=$(ls -d "$SSP_JAX_CACHE"/warmstart/*/ | head -n 1)
  $PY -m ssp_jax eval --config $c $m --checkpoint "$MODEL" --out "$OUT/ssp/eval_base"
  $PY -m ssp_jax eval --config $c $m --checkpoint "$warm" --out "$OUT/ssp/eval_warm"
  $PY -m ssp_jax eval --config $c $m --checkpoint "$OUT/ssp/run" --out "$OUT/ssp/eval_after"
}

for r in $RUNS; do
  case $r in
    math) math_run > "$OUT/math/log.txt" 2>&1 & ;;
    ssp) ssp_run > "$OUT/ssp/log.txt" 2>&1 & ;;
    *) echo "RUNS: unknown run '$r' (math, ssp)" >&2; exit 2 ;;
  esac
done
wait
cd "$OUT" && tar czf results.tar.gz --exclude='checkpoints' --exclude='bm25' --exclude='cache' \
  --exclude='tb' math ssp && ls -la results.tar.gz
