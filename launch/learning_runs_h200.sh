#!/usr/bin/env bash
# The one-GPU learning runs of docs/results.md, side by side on one GPU (each model is small):
#   math: GRPO (the SvS paper's RLVR baseline) on generated grade-school math
#         (configs/svs_gsm_h200.py:rlvr);
#   svs:  SvS with problem synthesis on the same problems (configs/svs_gsm_h200.py);
#   ssp:  SSP self-play on the shipped corpus with the format warm start
#         (configs/ssp_small_h200.py, BM25 index over the shipped corpus).
# Every run evaluates in training: the starting policy as step 0 (`eval.at_start`; for ssp that
# is the warm-started policy), then every EVERY steps (math/svs: held-out pass@1/pass@8 on the
# 256 generated problems; ssp: greedy EM/F1 on the 141 shipped questions, `val/...` keys in
# metrics.jsonl and tables under run/eval/step_N). A run stopped by its wall-clock limit
# (SIGINT: the step finishes and is checkpointed) is evaluated once more from its last
# checkpoint (eval_after/). ssp also evaluates the base model (eval_base/).
#
#   bash launch/learning_runs_h200.sh MODEL.gguf OUT [MATH_TRAIN_S] [SSP_TRAIN_S]
#   (then, anywhere: ssp-jax plot OUT/ssp/run --out plots/ssp --keys ...)
# Environment: RUNS="math ssp" (any of math, svs, ssp), MATH_STEPS=30, MATH_EVERY=10 (math and
# svs), SSP_STEPS=15, SSP_EVERY=5, MEM_SSP / MEM_MATH (XLA_PYTHON_CLIENT_MEM_FRACTION of each
# process; with ssp beside others: 0.55 for ssp, 0.38 shared by the others; else 0.9 shared).
# Wall time: the SSP run needs about its steps x 25-40 s (more when it shares the GPU) plus
# ~90 s of warm start and ~30 s an evaluation; the limits are backstops.
# Outputs: OUT/{math,svs,ssp}/{run,log.txt,eval_*} and OUT/results.tar.gz (metrics, samples,
# eval tables; no checkpoints).
set -uo pipefail
MODEL=${1:?usage: learning_runs_h200.sh MODEL.gguf OUT [MATH_TRAIN_S] [SSP_TRAIN_S]}
OUT=${2:?output directory}
TM=${3:-600}
TS=${4:-900}
PY=${PYTHON:-python3}
RUNS=${RUNS:-math ssp}
MATH_STEPS=${MATH_STEPS:-30}
MATH_EVERY=${MATH_EVERY:-10}
SSP_STEPS=${SSP_STEPS:-15}
SSP_EVERY=${SSP_EVERY:-5}
n_runs=$(wc -w <<<"$RUNS")
case " $RUNS " in   # ssp takes the most memory (4,096-token rows); the others share the rest
  *" ssp "*) d_ssp=0.9; [ "$n_runs" -gt 1 ] && d_ssp=0.55
             d_math=$(awk -v n="$n_runs" 'BEGIN { print (n > 1 ? 0.38 / (n - 1) : 0.9) }') ;;
  *) d_ssp=0.9; d_math=$(awk -v n="$n_runs" 'BEGIN { print 0.9 / n }') ;;
esac
MEM_SSP=${MEM_SSP:-$d_ssp}
MEM_MATH=${MEM_MATH:-$d_math}
export SSP_JAX_CACHE=${SSP_JAX_CACHE:-$OUT/cache}
for r in $RUNS; do
  case $r in math|svs|ssp) ;; *) echo "RUNS: unknown run '$r' (math, svs, ssp)" >&2; exit 2 ;; esac
done
[ -f "$MODEL" ] || { echo "MODEL: no file $MODEL" >&2; exit 2; }

# train WORKDIR CONFIG LIMIT_S STEPS EVERY [overrides...]: trains with in-training evaluation;
# if the limit stopped it before its last evaluation, evaluates the last checkpoint.
train_eval() {
  local dir=$1 cfg=$2 limit=$3 steps=$4 every=$5; shift 5
  timeout -s INT "$limit" $PY -m ssp_jax train --config "$cfg" --config.model.path="$MODEL" \
    --config.workdir="$dir/run" --config.total_steps="$steps" --config.eval.at_start=true \
    --config.eval.every_steps="$every" --config.checkpoint.every="$every" \
    --config.checkpoint.async_save=false --config.progress=false "$@"
  echo "train exit code $?"
  if ! tail -n 1 "$dir/run/metrics.jsonl" 2>/dev/null | grep -q '"val/'; then
    $PY -m ssp_jax eval --config "$cfg" --config.model.path="$MODEL" "$@" \
      --checkpoint "$dir/run" --out "$dir/eval_after"
  fi
}

math_run() {   # $1: math (GRPO) or svs (with synthesis)
  local cfg=configs/svs_gsm_h200.py
  [ "$1" = math ] && cfg=configs/svs_gsm_h200.py:rlvr
  XLA_PYTHON_CLIENT_MEM_FRACTION=$MEM_MATH train_eval "$OUT/$1" "$cfg" "$TM" "$MATH_STEPS" \
    "$MATH_EVERY"
}

ssp_run() {
  local c="configs/ssp_small_h200.py:root=$OUT/ssp"
  export XLA_PYTHON_CLIENT_MEM_FRACTION=$MEM_SSP
  $PY -m ssp_jax index build --corpus retrieval/data/wiki_sample.jsonl.gz --encoder bm25 \
    --out "$OUT/ssp/bm25"
  train_eval "$OUT/ssp" "$c" "$TS" "$SSP_STEPS" "$SSP_EVERY"
  $PY -m ssp_jax eval --config "$c" --config.model.path="$MODEL" --checkpoint "$MODEL" \
    --out "$OUT/ssp/eval_base"
}

for r in $RUNS; do
  mkdir -p "$OUT/$r"
  case $r in
    math|svs) math_run "$r" > "$OUT/$r/log.txt" 2>&1 & ;;
    ssp) ssp_run > "$OUT/ssp/log.txt" 2>&1 & ;;
  esac
done
wait
cd "$OUT" && tar czf results.tar.gz --exclude='checkpoints' --exclude='bm25' --exclude='cache' \
  --exclude='tb' $RUNS && ls -la results.tar.gz
