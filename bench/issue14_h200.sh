#!/usr/bin/env bash
# The rollout measurements issue 14 still needs on one H200, in stages that each fit one device
# call (10 minutes), with JAX profiles of the multi-turn engine summarised by
# bench/trace_summary.py. Every line is JSON (bench/sampler.py's lines, then trace summaries).
#
#   STAGES="a b" bash bench/issue14_h200.sh OUT_DIR
#
# Stages (minutes on an H200, compiles included, estimated from the runs of 2026-12-01):
#   a (~4)  0.5B, 256 slots: single turn dense + paged (Pallas); multi-turn 1 and 4 prompts a
#           slot, the batch shrinking in the tail (default) and not (--tail-min-batch 0); a profile
#           of the dense multi-turn engine and of single-turn decode
#   b (~3)  0.5B, 256 slots: multi-turn with 8,192-token responses (paged, Pallas), 1 prompt a slot
#   c (~4)  7B, 256 slots: single turn with the tunix peer (tunix's source at $TUNIX, default
#           /tmp/tunix), then multi-turn dense without warm-up (its compile reported apart)
#   d (~8)  7B paper-shaped step at a quarter of the trajectories (64 proposer + 320 solver on
#           256 slots, paged): one call cannot hold the full 1,536 (~2.9M tokens at ~5k tok/s);
#           bench/RESULTS.md scales it with its assumptions stated
# Environment: PYTHON (python3), EXTRA_PYTHONPATH (wheels, e.g. /tmp/site), TUNIX.
set -uo pipefail
if [ $# -lt 1 ]; then
  echo 'usage: STAGES="a b c d" bash bench/issue14_h200.sh OUT_DIR' >&2
  exit 2
fi
OUT=$1
STAGES=${STAGES:-a}
PY=${PYTHON:-python3}
TUNIX=${TUNIX:-/tmp/tunix}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
export PYTHONPATH="${EXTRA_PYTHONPATH:+$EXTRA_PYTHONPATH:}$PWD"
export PYTHONUNBUFFERED=1
B="$PY bench/sampler.py --batches 256 --repeats 1 --mt-max-obs 512"
run() {   # name, then the command; its lines go to OUT/name.jsonl and stdout
  local name=$1; shift
  echo "== $name: $*" >&2
  "$@" 2> >(tail -5 >&2) | tee "$OUT/$name.jsonl"
}
for s in $STAGES; do
  case $s in
    a)
      run a_single $B --presets qwen2.5-0.5b --kv-layout dense,paged --peer none \
        --profile "$OUT/prof_a"
      for pps in 1 4; do for tmb in 16 0; do
        run "a_mt_pps${pps}_tmb${tmb}" $B --presets qwen2.5-0.5b --kv-layout dense --no-single \
          --multiturn --mt-prompts-per-slot $pps --mt-max-new 1024 --peer none \
          --tail-min-batch $tmb
      done; done
      run a_mt_paged $B --presets qwen2.5-0.5b --kv-layout paged --no-single --multiturn \
        --mt-prompts-per-slot 4 --mt-max-new 1024 --peer none --kv-max-tokens 600000 \
        --profile "$OUT/prof_a_paged"
      $PY bench/trace_summary.py "$OUT/prof_a" --top 30 > "$OUT/a_trace.jsonl"
      $PY bench/trace_summary.py "$OUT/prof_a_paged" --top 30 > "$OUT/a_trace_paged.jsonl" ;;
    b)
      run b_mt_8192 $B --presets qwen2.5-0.5b --kv-layout paged --no-single --multiturn \
        --mt-prompts-per-slot 1 --mt-max-new 8192 --peer none --no-warmup ;;
    c)
      PYTHONPATH="$TUNIX:$PYTHONPATH" run c_single_7b $B --presets qwen2.5-7b --kv-layout dense \
        --peer auto
      XLA_PYTHON_CLIENT_MEM_FRACTION=0.92 run c_mt_7b $B --presets qwen2.5-7b --kv-layout dense \
        --no-single --multiturn --mt-prompts-per-slot 1 --mt-max-new 1024 --no-warmup --peer none ;;
    d)
      run d_paper_7b $PY bench/sampler.py --presets qwen2.5-7b --no-single --paper-step \
        --kv-layout paged --no-warmup --kv-max-tokens 1000000 --peer none \
        --step-proposers 64 --step-solvers 320 ;;
    *) echo "issue14_h200.sh: unknown stage '$s' (use a, b, c, d)" >&2; exit 2 ;;
  esac
done
