#!/usr/bin/env bash
# The world experiment of docs/results.md on one GPU: SSP self-play against the Search-R1 baseline
# (the solver alone, GRPO on the world's labeled train questions) at equal steps and equal solver
# rollouts per step, and against no training, on a generated world (docs/world.md).
#
#   bash launch/world_experiment_h200.sh MODEL.gguf OUT
#
# Stages (a stage whose output exists is skipped, so running the same command again resumes):
#   1. the world (seed SEED, SIZE entities) and a BM25 index over its corpus (OUT/bm25), and one
#      over the shipped Wikipedia sample for the 141 real questions (OUT/bm25_wiki)
#   2. the warm start, once (configs/ssp_world.py; cached under $SSP_JAX_CACHE; the Search-R1
#      config has the same cache key, so both runs start from the same weights)
#   3. ssp and search_r1 side by side (MEM_EACH of the GPU each), STEPS steps, checkpoints at
#      STEPS/2 and STEPS, every proposal of every step in samples/ (for the cross-play sets)
#   4. cross-play sets: the valid questions the ssp proposer wrote early, in the middle and late
#      (python -m ssp_jax.world.crossplay)
#   5. evaluations (three processes at a time): the whole held-out set and the cross-play sets
#      for the warm-started policy (no training), the ssp run and the search_r1 run, the ssp
#      run's STEPS/2 checkpoint on the cross-play sets, the 141 real questions (BM25 over the
#      shipped Wikipedia sample) for the three policies, closed-book (no search) for the base
#      model
#   6. OUT/report.md (ssp_jax.eval.compare: EM by hop with 95% intervals, paired tests) and
#      OUT/results.tar.gz (no checkpoints)
# Environment: VARIANT (0.5b | 1.5b; default 0.5b), STEPS (8), SEED (0), SIZE (5000),
# TRAIN_S (wall-clock limit of stage 3, default 1200; then SIGINT: the step in flight ends and
# is checkpointed), MEM_EACH (0.44), PYTHON (python3).
set -uo pipefail
MODEL=${1:?usage: world_experiment_h200.sh MODEL.gguf OUT}
OUT=${2:?usage: world_experiment_h200.sh MODEL.gguf OUT}
PY=${PYTHON:-python3}
VARIANT=${VARIANT:-0.5b}
STEPS=${STEPS:-8}
SEED=${SEED:-0}
SIZE=${SIZE:-5000}
TRAIN_S=${TRAIN_S:-1200}
MEM_EACH=${MEM_EACH:-0.44}
case "$VARIANT" in 0.5b|1.5b) ;; *) echo "VARIANT=$VARIANT: use 0.5b or 1.5b" >&2; exit 2 ;; esac
case "$STEPS" in ''|*[!0-9]*|0) echo "STEPS=$STEPS: use a positive integer" >&2; exit 2 ;; esac
[ -f "$MODEL" ] || { echo "MODEL: no file $MODEL" >&2; exit 2; }
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export SSP_JAX_CACHE=${SSP_JAX_CACHE:-$OUT/cache}
export PYTHONUNBUFFERED=1
HALF=$(( (STEPS + 1) / 2 ))
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/progress.txt" >&2; }

# 1. world and indexes
WORLD=$($PY -c "from ssp_jax.world import ensure_world; print(ensure_world(seed=$SEED, size=$SIZE))") \
  || { log "world build failed"; exit 1; }
log "world $WORLD"
[ -f "$OUT/bm25/meta.json" ] || $PY -m ssp_jax index build --corpus "$WORLD/corpus.jsonl" \
  --encoder bm25 --out "$OUT/bm25" >> "$OUT/index.log" 2>&1 || { log "index failed"; exit 1; }
[ -f "$OUT/bm25_wiki/meta.json" ] || $PY -m ssp_jax index build \
  --corpus retrieval/data/wiki_sample.jsonl.gz --encoder bm25 --out "$OUT/bm25_wiki" \
  >> "$OUT/index.log" 2>&1 || { log "wiki index failed"; exit 1; }
common=(--config.model.path="$MODEL" --config.world.seed="$SEED" --config.world.size="$SIZE"
        --config.retrieval.index_dir="$OUT/bm25" --config.progress=false)
SSP_CFG=configs/ssp_world.py:$VARIANT
SR1_CFG=configs/search_r1_world.py:$VARIANT

# 2. the warm start, once
if [ ! -f "$OUT/warm.done" ]; then
  log "warm start"
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 $PY -m ssp_jax train --config "$SSP_CFG" "${common[@]}" \
    --config.workdir="$OUT/warm" --config.total_steps=0 --config.eval.at_start=false \
    > "$OUT/warm.log" 2>&1 \
    && touch "$OUT/warm.done" || { log "warm start failed"; exit 1; }
fi
WARM=$(ls -d "$SSP_JAX_CACHE"/warmstart/*/ 2>/dev/null | head -n 1)
log "warm-started policy: $WARM"

# 3. the two runs side by side (no in-training evaluation: stage 5 evaluates the checkpoints)
train_args=(--config.total_steps="$STEPS" --config.eval.at_start=false
            --config.eval.every_steps=0 --config.checkpoint.every="$HALF"
            --config.checkpoint.keep=3 --config.checkpoint.async_save=false
            --config.ssp.samples_per_step=1000)
run_game() {   # name config
  mkdir -p "$OUT/$1"
  XLA_PYTHON_CLIENT_MEM_FRACTION=$MEM_EACH timeout -s INT "$TRAIN_S" $PY -m ssp_jax train \
    --config "$2" "${common[@]}" "${train_args[@]}" --config.workdir="$OUT/$1/run" \
    > "$OUT/$1/log.txt" 2>&1
  echo "train exit code $?" >> "$OUT/$1/log.txt"
}
if [ ! -f "$OUT/train.done" ]; then
  log "training ssp and search_r1, $STEPS steps each"
  run_game ssp "$SSP_CFG" &
  run_game search_r1 "$SR1_CFG" &
  wait
  touch "$OUT/train.done"
  log "training done"
fi

# 4. cross-play sets: the valid questions the ssp proposer wrote early, in the middle and late
$PY -m ssp_jax.world.crossplay --samples "$OUT/ssp/run/samples" --steps "$STEPS" \
  --out "$OUT/crossplay" >> "$OUT/progress.txt" 2>&1
cross=()
for set in early middle late; do
  q="$OUT/crossplay/questions_$set.jsonl"
  [ -s "$q" ] && cross+=(--data "$set=$q")
done

# 5. evaluations, three processes at a time (each loads and compiles once for all its sets)
mkdir -p "$OUT/eval"
ev() {   # name checkpoint extra-args...
  local name=$1 ckpt=$2; shift 2
  [ -f "$OUT/eval/$name/results.json" ] && return 0
  log "eval $name"
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.28 $PY -m ssp_jax eval --config "$SSP_CFG" "${common[@]}" \
    --checkpoint "$ckpt" --limit 0 --out "$OUT/eval/$name" "$@" > "$OUT/eval/$name.log" 2>&1 \
    || log "eval $name failed (see eval/$name.log)"
}
world=(--data world_heldout=world:qa_heldout "${cross[@]}")
wiki=(--config.retrieval.index_dir="$OUT/bm25_wiki" --data wiki_sample=builtin:wiki_sample)
ev world_warm "$WARM" "${world[@]}" &
ev world_ssp "$OUT/ssp/run" "${world[@]}" &
ev world_search_r1 "$OUT/search_r1/run" "${world[@]}" &
wait
[ ${#cross[@]} -gt 0 ] && ev cross_ssp_half "$OUT/ssp/run/checkpoints/$HALF" "${cross[@]}" &
ev closed_base "$MODEL" --closed-book --data world_heldout=world:qa_heldout &
ev wiki_warm "$WARM" "${wiki[@]}" &
wait
ev wiki_ssp "$OUT/ssp/run" "${wiki[@]}" &
ev wiki_search_r1 "$OUT/search_r1/run" "${wiki[@]}" &
wait

# 6. report and archive
{
  echo "# world experiment: $VARIANT, $STEPS steps, world seed $SEED size $SIZE"
  for ds in world_heldout wiki_sample early middle late; do
    pre=world; [ "$ds" = wiki_sample ] && pre=wiki
    args=()
    for r in warm ssp search_r1; do
      p="$OUT/eval/${pre}_$r/predictions_$ds.jsonl"
      [ -f "$p" ] && args+=(--run "$r=$p")
      h="$OUT/eval/cross_ssp_half/predictions_$ds.jsonl"
      [ "$r" = warm ] && [ -f "$h" ] && args+=(--run "ssp_step$HALF=$h")
    done
    q=()
    [ "$ds" = world_heldout ] && q=(--questions "$WORLD/qa_heldout.jsonl")
    echo; echo "## $ds"; echo
    [ ${#args[@]} -gt 0 ] && $PY -m ssp_jax.eval.compare "${q[@]}" "${args[@]}" \
      --out "$OUT/compare_$ds.json"
  done
} > "$OUT/report.md" 2>> "$OUT/progress.txt"
log "report written"
cd "$OUT" && tar czf results.tar.gz --exclude='checkpoints' --exclude='bm25' \
  --exclude='bm25_wiki' --exclude='cache' --exclude='tb' --exclude='results.tar.gz' . \
  && log "archive $(du -h results.tar.gz | cut -f1)"
