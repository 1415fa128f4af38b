#!/usr/bin/env bash
# The decode-step and update measurements of issue 26 on one H200, in stages that each fit one
# device call (10 minutes). Every line is JSON (bench/sampler.py's lines, trace summaries).
#
#   STAGES="d" bash bench/issue26_h200.sh OUT_DIR
#
# Stages:
#   d   0.5B, 256 slots, single turn: separate vs fused q/k/v + gate/up decode weights, JAX's
#       default PRNG vs rbg, XLA command buffers over while loops; a profile of the fused step
#   d7  7B, 256 slots, single turn: separate vs fused weights
#   m   0.5B, 256 slots, multi-turn (1 prompt a slot, 1,024-token responses, 512-token
#       observations): dense and paged
#   l   0.5B, 256 slots, multi-turn with 8,192-token responses, paged, cold (compiles counted)
#   s   the next-token choice alone (bench/sample_step.py), then dp's step without a profile
#   s7  7B single turn with the Pallas attention and the tunix peer (TUNIX: its source)
#   mp  m's paged run alone (Pallas), with a warm-up: cold and warm walls
#   a   l's capped run (--kv-max-tokens 1000000) with a warm-up, so cold and warm walls, with
#       rollout.compile_ahead auto (4 threads on a GPU) and off (AHEAD: the settings, "-1 0")
#   dp  0.5B single turn with the fused Pallas decode attention: a profile, and XLA's Triton
#       GEMMs on (bench/sampler.py turns them off unless XLA_FLAGS names them)
#   u   0.5B update on the length mix of one configs/ssp_small_h200.py step (64 proposer + 320
#       solver trajectories, bench/length_mix_ssp_small.json): packed vs padded
#   f   1.5B packed update on the paper's length mix (128 trajectories), the real-token MFU of
#       a few remat / micro-batch / row-length / log-prob-chunk settings (target 60%)
#   m7  m's multi-turn shape at 7B: paged and dense (Pallas), warm
#   w   the whole configs/ssp_small_h200.py step on a real model (MODEL: its GGUF): phase
#       times a step from metrics.jsonl (bench/step_phases.py)
#   p   the packed updates of u (rows of 4,096) and f (dots, micro-batch 8) with the output
#       projection at the loss tokens only against every position (rl.logprob_positions)
#   pa  the paged prefill alone (bench/prefill_mfu.py): error of each rollout.prefill_attention
#       against fp32 at 0.5B, then the 7B program's FLOP rate against the measured GEMM rate;
#       then m7's paged run with each prefill attention (PA: the list, default "cudnn xla")
#   pk  the paged decode attention kernels (PK: the list, default "pallas pallas_jax"): one
#       layer's attention alone (bench/paged_attention.py, with gather), then m's paged run at
#       0.5B with each (single turn paged too: the ratio's denominator), then a profile of the
#       first's multi-turn run
#   pk7 m7's paged run with each kernel in PK (7B, warm)
#   rk  RoPE in the decode kernels (rollout.decode_attention "pallas_rope") against XLA's RoPE
#       before them ("pallas"): bench/decode_rope_check.py on the device, then 0.5B single turn
#       (paged and dense) and m's paged multi-turn run with each, in both orders; a profile
#   rk7 the same comparison at 7B (paged single turn and m7's multi-turn run)
#   fp  f's packed update (1.5B, paper mix) with remat "dots" and "dots_flash" (cuDNN attention's
#       forward kept for the backward pass), micro-batch FPM (default 4: fits an H100), each with
#       a profile of one step and its trace summary (kernel time by class)
#   fg  fp's update (micro-batch FPM, remat dots) with the head's backward in bf16 (the default)
#       and fp32 (--logits-grad-dtype float32, the earlier GEMMs), then with XLA's dynamic-slice
#       fusion (the layer scan's weight slices read in place), then a profile of the default,
#       its memcpy and broadcast kernels traced to their XLA instructions (trace_summary --by-op)
#   fq  bench/cudnn_grad_check.py (cuDNN's packed gradients against XLA's; with grouped-query
#       K/V unrepeated where the JAX wrapper allows it), then, where it does, the 1.5B update
#       (micro-batch FPM) and the 0.5B ssp_small update with rl.attn_impl cudnn and cudnn_gqa
#   fu  the 1.5B (micro-batch FPM) and 0.5B updates with each rl.layer_loop in LOOPS (default
#       "scan unrolled scan:4"; compile_and_first_s gives the compile, device_peak_gb the
#       allocator's peak), then a profile of the unrolled
#   ac  a's shape with the pool capped near what the call holds (CAPS, default "800000 700000"
#       tokens): the peak against weights + KV in use, the cold (warm-up) and warm walls
#   la  l's capped run (8,192-token responses, --kv-max-tokens 1000000), cold, each in its own
#       process, with each prefill attention in PA: wall and peak memory against weights + KV
#       (stage a gives the cold and warm walls with the default prefill attention)
#   hd  the decode step's head and loop (2026-12-07): the fused head alone over its row tiles
#       (bench/head_draw.py, 0.5B and 7B widths), the draw's two mass forms
#       (bench/sample_step.py), the dense attention kernel's knobs (bench/dense_attention.py),
#       then 0.5B single turn (dense, pallas_rope) with rollout.decode_head xla / pallas x
#       rollout.decode_unroll 1 / 4, and a profile of each
#   hdm m's paged multi-turn run (0.5B) with decode_head xla / pallas x decode_unroll 1 / 2
#   hd7 7B single turn (dense, pallas_rope) with decode_head xla / pallas
#   hdk the dense kernel's knobs in the loop (2026-12-07, fifth session): 0.5B single turn
#       (decode_head xla / pallas) and m's shape on the dense layout, each with
#       dense_pallas.default_knobs and with the earlier fixed settings (--dense-knobs 4,2,128)
#   hdp the paged kernel's knobs alone (bench/paged_attention.py --sweep: 2 / 4 / 8 warps,
#       2 / 3 stages, 64 / 128 / 256-slot blocks; 0.5B and 7B heads, 256 rows)
#   hpk the paged kernel's knobs in the loop (2026-12-07, sixth session): m's paged multi-turn
#       run (pallas_rope) with paged_pallas.default_knobs and with 2 warps, 2 stages, 64-slot
#       blocks (--paged-knobs 2,2,64, the sweep's best overall), in both orders
#   hdo the decode kernels writing [B, N, H] directly (--direct-out on) against the padded tile
#       XLA slices (off), each in its own process and in both orders: 0.5B single turn (dense,
#       pallas_rope, both heads) and m's paged multi-turn run (pallas_rope)
#   gm  the decode step's layer GEMMs (2026-12-07, seventh session, bench/decode_gemm.py): the
#       step's layers without attention with rollout.decode_matmul xla / pallas (--mode layers),
#       then each GEMM alone, XLA's norm / SiLU kernels around cuBLAS against the Pallas kernel
#       (sampling/gemm_pallas.py) over its tiles, K shares and warps; 0.5B then 7B, 256 rows
#       (GM_MODELS, default "0.5b 7b")
#   gml the Pallas GEMMs in the loop (rollout.decode_matmul, --decode-matmul): 0.5B single turn
#       (dense, pallas_rope) xla / GML_MM (default pallas_residual: "pallas" was 1.66x slower on
#       an H100, 2026-12-08) in both orders, each order its own process, then m's paged
#       multi-turn run and 7B single turn with each
# Environment: PYTHON (python3), EXTRA_PYTHONPATH (wheels, e.g. /tmp/site), PROF (profile
# directory, default /tmp/issue26_prof: traces are many files, so not under OUT), T (seconds a
# run may take, default 240).
set -uo pipefail
if [ $# -lt 1 ]; then
  echo 'usage: STAGES="d d7 m" bash bench/issue26_h200.sh OUT_DIR' >&2
  exit 2
fi
OUT=$1
STAGES=${STAGES:-d}
PY=${PYTHON:-python3}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
export PYTHONPATH="${EXTRA_PYTHONPATH:+$EXTRA_PYTHONPATH:}$PWD"
export PYTHONUNBUFFERED=1
B="$PY bench/sampler.py --batches 256 --repeats 2 --peer none"
run() {   # name, then the command; its lines are appended to OUT/name.jsonl and go to stdout
  local name=$1; shift
  echo "== $name: $*" >&2
  timeout "${T:-240}" "$@" 2> >(tail -5 >&2) | tee -a "$OUT/$name.jsonl"
}
PROF=${PROF:-/tmp/issue26_prof}
CB="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL"
for s in $STAGES; do
  case $s in
    d)
      run d_separate $B --presets qwen2.5-0.5b --no-fuse
      run d_fused $B --presets qwen2.5-0.5b --profile "$PROF/d"
      run d_fused_rbg $B --presets qwen2.5-0.5b --prng rbg
      XLA_FLAGS="$CB" run d_fused_rbg_cmdbuf $B --presets qwen2.5-0.5b --prng rbg
      $PY bench/trace_summary.py "$PROF/d" --top 40 > "$OUT/d_trace.jsonl" ;;
    d7)
      run d7_separate $B --presets qwen2.5-7b --no-fuse --repeats 1
      run d7_fused $B --presets qwen2.5-7b --repeats 1 ;;
    m)
      run m_dense $B --presets qwen2.5-0.5b --kv-layout dense --multiturn \
        --mt-prompts-per-slot 1 --mt-max-new 1024 --mt-max-obs 512 --repeats 1
      run m_paged $B --presets qwen2.5-0.5b --kv-layout paged --multiturn \
        --mt-prompts-per-slot 1 --mt-max-new 1024 --mt-max-obs 512 --repeats 1 ;;
    l)
      T=${T:-420} run l_paged_8192 $B --presets qwen2.5-0.5b --kv-layout paged --no-single \
        --multiturn --mt-prompts-per-slot 1 --mt-max-new 8192 --mt-max-obs 512 --no-warmup \
        --repeats 1
      T=${T:-420} run l_paged_8192_cap1m $B --presets qwen2.5-0.5b --kv-layout paged --no-single \
        --multiturn --mt-prompts-per-slot 1 --mt-max-new 8192 --mt-max-obs 512 --no-warmup \
        --repeats 1 --kv-max-tokens 1000000 ;;
    s)
      $PY bench/sample_step.py --hlo-dir "$PROF/hlo" | tee "$OUT/s_sample_step.jsonl"
      run s_dp_pallas $B --presets qwen2.5-0.5b --decode-attention pallas ;;
    s7)   # 7B single turn, Pallas attention, with the tunix peer when TUNIX names its source
      PYTHONPATH="${TUNIX:+$TUNIX:}$PYTHONPATH" T=${T:-300} run s7_pallas \
        $PY bench/sampler.py --batches 256 --repeats 1 --peer auto --presets qwen2.5-7b \
        --decode-attention pallas ;;
    mp)   # multi-turn at the shape of m, paged + Pallas only, with a warm-up (cold and warm),
          # for each rollout.compile_ahead setting in AHEAD (default: auto only)
      for ca in ${AHEAD:--1}; do
        run mp_paged_ahead$ca $B --presets qwen2.5-0.5b --kv-layout paged --multiturn \
          --mt-prompts-per-slot 1 --mt-max-new 1024 --mt-max-obs 512 --repeats 1 \
          --decode-attention pallas --compile-ahead $ca ${MP_SINGLE:---single}
      done ;;
    a)
      for ca in ${AHEAD:--1 0}; do
        T=${T:-330} run a_paged_8192_cap1m_ahead$ca $B --presets qwen2.5-0.5b --kv-layout paged \
          --no-single --multiturn --mt-prompts-per-slot 1 --mt-max-new 8192 --mt-max-obs 512 \
          --repeats 1 --kv-max-tokens 1000000 --compile-ahead $ca
      done ;;
    ac)
      for cap in ${CAPS:-800000 700000}; do
        T=${T:-200} run ac_cap$cap $B --presets qwen2.5-0.5b --kv-layout paged --no-single \
          --multiturn --mt-prompts-per-slot 1 --mt-max-new 8192 --mt-max-obs 512 --repeats 1 \
          --kv-max-tokens $cap
      done ;;
    dp)
      run dp_pallas $B --presets qwen2.5-0.5b --decode-attention pallas --profile "$PROF/dp"
      $PY bench/trace_summary.py "$PROF/dp" --top 60 > "$OUT/dp_trace.jsonl"
      XLA_FLAGS="--xla_gpu_enable_triton_gemm=true" run dp_pallas_triton $B \
        --presets qwen2.5-0.5b --decode-attention pallas ;;
    u)
      XLA_PYTHON_CLIENT_MEM_FRACTION=0.95 run u_small $PY bench/train_step.py \
        --length-mix ssp_small --preset qwen2.5-0.5b --seq 4096 --remat none --attn-impl auto \
        --micro-batch 8 --traj 384 --steps 2 ;;
    f)
      F="$PY bench/train_step.py --length-mix paper --preset qwen2.5-1.5b --seq 8192 --traj 128 \
        --steps 2 --attn-impl auto"
      export XLA_PYTHON_CLIENT_MEM_FRACTION=0.95
      T=${T:-150} run f_dots_m8 $F --remat dots --micro-batch 8
      T=${T:-150} run f_none_m2 $F --remat none --micro-batch 2
      T=${T:-150} run f_none_m4_p8192 $F --remat none --micro-batch 4 --pack-len 8192
      T=${T:-150} run f_attn_m4 $F --remat save_attn_out --micro-batch 4
      T=${T:-150} run f_dots_m8_lp2048 $F --remat dots --micro-batch 8 --logprob-chunk 2048
      T=${T:-150} run f_dots_m4_p11008 $F --remat dots --micro-batch 4 --pack-len 11008 ;;
    fp)
      export XLA_PYTHON_CLIENT_MEM_FRACTION=0.95
      for r in ${FPR:-dots dots_flash}; do
        T=${T:-200} run fp_${r}_m${FPM:-4} $PY bench/train_step.py --length-mix paper \
          --preset qwen2.5-1.5b --seq 8192 --traj 128 --steps 2 --attn-impl auto --remat "$r" \
          --micro-batch "${FPM:-4}" --layouts packed --profile "$PROF/fp_$r"
        $PY bench/trace_summary.py "$PROF/fp_$r" --top 40 > "$OUT/fp_${r}_trace.jsonl"
      done ;;
    fg)
      export XLA_PYTHON_CLIENT_MEM_FRACTION=0.95
      G="$PY bench/train_step.py --length-mix paper --preset qwen2.5-1.5b --seq 8192 --traj 128 \
        --steps 2 --attn-impl auto --remat dots --micro-batch ${FPM:-4} --layouts packed"
      T=${T:-120} run fg_compute $G
      T=${T:-120} run fg_float32 $G --logits-grad-dtype float32
      XLA_FLAGS=--xla_gpu_enable_dynamic_slice_fusion=true T=${T:-120} run fg_dsf $G
      T=${T:-160} run fg_prof $G --profile "$PROF/fg"
      $PY bench/trace_summary.py "$PROF/fg" --top 40 --by-op 'memcpy|broadcast' \
        --hlo "$PROF/fg/packed.hlo.txt" > "$OUT/fg_trace.jsonl" ;;
    fq)   # packed cuDNN attention with grouped-query K/V unrepeated (rl.attn_impl cudnn_gqa)
      export XLA_PYTHON_CLIENT_MEM_FRACTION=0.95
      $PY bench/cudnn_grad_check.py | tee "$OUT/fq_cudnn_grad_check.jsonl"
      if grep -q '"cudnn_packed_gqa_ok": true' "$OUT/fq_cudnn_grad_check.jsonl"; then
        for impl in cudnn cudnn_gqa; do
          T=${T:-120} run fq_${impl}_1.5b $PY bench/train_step.py --length-mix paper \
            --preset qwen2.5-1.5b --seq 8192 --traj 128 --steps 3 --attn-impl $impl \
            --remat dots_flash --micro-batch "${FPM:-4}" --layouts packed
          T=${T:-120} run fq_${impl}_0.5b $PY bench/train_step.py --length-mix ssp_small \
            --preset qwen2.5-0.5b --seq 4096 --traj 384 --steps 3 --attn-impl $impl \
            --remat dots_flash --micro-batch 8 --pack-len 4096 --layouts packed
        done
      fi ;;
    fu)   # the learner's layers unrolled (rl.layer_loop) against the scan, then a profile
      export XLA_PYTHON_CLIENT_MEM_FRACTION=0.95
      for loop in ${LOOPS:-scan unrolled scan:4}; do
        T=${T:-150} run fu_${loop/:/}_1.5b $PY bench/train_step.py --length-mix paper \
          --preset qwen2.5-1.5b --seq 8192 --traj 128 --steps 3 --attn-impl auto \
          --remat dots_flash --micro-batch "${FPM:-4}" --layouts packed --layer-loop $loop
        T=${T:-150} run fu_${loop/:/}_0.5b $PY bench/train_step.py --length-mix ssp_small \
          --preset qwen2.5-0.5b --seq 4096 --traj 384 --steps 3 --attn-impl auto \
          --remat dots_flash --micro-batch 8 --pack-len 4096 --layouts packed --layer-loop $loop
      done
      T=${T:-200} run fu_prof $PY bench/train_step.py --length-mix paper --preset qwen2.5-1.5b \
        --seq 8192 --traj 128 --steps 2 --attn-impl auto --remat dots_flash \
        --micro-batch "${FPM:-4}" --layouts packed --layer-loop unrolled --profile "$PROF/fu"
      $PY bench/trace_summary.py "$PROF/fu" --top 40 --by-op 'memcpy|broadcast' \
        --hlo "$PROF/fu/packed.hlo.txt" > "$OUT/fu_trace.jsonl" ;;
    p)
      export XLA_PYTHON_CLIENT_MEM_FRACTION=0.95
      for pos in loss all; do
        T=${T:-100} run p_small_$pos $PY bench/train_step.py --length-mix ssp_small \
          --preset qwen2.5-0.5b --seq 4096 --remat none --attn-impl auto --micro-batch 8 \
          --traj 384 --steps 2 --pack-len 4096 --layouts packed --logprob-positions $pos
      done
      for pos in loss all; do
        T=${T:-150} run p_1p5b_$pos $PY bench/train_step.py --length-mix paper \
          --preset qwen2.5-1.5b --seq 8192 --traj 128 --steps 2 --attn-impl auto --remat dots \
          --micro-batch 8 --layouts packed --logprob-positions $pos
      done ;;
    m7)   # m's shape at 7B, paged then dense (both Pallas), warm (a warm-up run first)
      for kv in paged dense; do
        T=${T:-270} run m7_$kv $B --presets qwen2.5-7b --kv-layout $kv --no-single --multiturn \
          --mt-prompts-per-slot 1 --mt-max-new 1024 --mt-max-obs 512 --repeats 1 \
          --decode-attention pallas
      done ;;
    w)    # the whole configs/ssp_small_h200.py step: MODEL (its GGUF), STEPS (default 6), a
          # BM25 index over the shipped sample, the warm start, then the steps; the run stops on
          # SIGINT after T seconds (default 480; the step in flight ends and is checkpointed).
          # EXTRA: more --config flags (e.g. --config.rl.attn_impl=xla); TAG names the outputs
          # (w${TAG}_*) and, with ROOT unset, the run folder, so two variants do not resume each other
      R=${ROOT:-/tmp/issue26_w${TAG:-}}
      W="w${TAG:-}"
      mkdir -p "$R"
      [ -f "$R/bm25/meta.json" ] || $PY -m ssp_jax index build --encoder bm25 \
        --corpus retrieval/data/wiki_sample.jsonl.gz --out "$R/bm25" > "$OUT/${W}_index.log" 2>&1
      # shellcheck disable=SC2086  # EXTRA is a list of flags
      SSP_JAX_CACHE=${SSP_JAX_CACHE:-$R/cache} timeout -s INT -k 60 "${T:-480}" \
        $PY -m ssp_jax train --config "configs/ssp_small_h200.py:root=$R" \
        --config.model.path="${MODEL:?stage w needs MODEL, the GGUF}" \
        --config.total_steps="${STEPS:-6}" --config.checkpoint.every=1000 \
        --config.progress=false ${EXTRA:-} > "$OUT/${W}_train.log" 2>&1
      echo "train ($W) exit code $?" >&2
      cp "$R/run/metrics.jsonl" "$OUT/${W}_metrics.jsonl"
      $PY bench/step_phases.py "$R/run/metrics.jsonl" | tee "$OUT/${W}_phases.jsonl" ;;
    pa)
      T=${T:-150} run pa_check_0p5b $PY bench/prefill_mfu.py --preset qwen2.5-0.5b --columns 32 \
        --check --repeats 5
      T=${T:-200} run pa_mfu_7b $PY bench/prefill_mfu.py --preset qwen2.5-7b --columns 32
      for pa in ${PA:-cudnn xla}; do
        T=${T:-270} run pa_m7_paged_$pa $B --presets qwen2.5-7b --kv-layout paged --no-single \
          --multiturn --mt-prompts-per-slot 1 --mt-max-new 1024 --mt-max-obs 512 --repeats 1 \
          --decode-attention pallas --prefill-attention $pa
      done ;;
    la)
      for pa in ${PA:-cudnn xla}; do
        T=${T:-330} run la_paged_8192_cap1m_$pa $B --presets qwen2.5-0.5b --kv-layout paged \
          --no-single --multiturn --mt-prompts-per-slot 1 --mt-max-new 8192 --mt-max-obs 512 \
          --repeats 1 --kv-max-tokens 1000000 --no-warmup --prefill-attention $pa
      done ;;
    pk)
      T=${T:-240} run pk_layer $PY bench/paged_attention.py
      [ -n "${SWEEP:-}" ] && T=${T:-240} run pk_sweep $PY bench/paged_attention.py --sweep \
        --shapes 0.5b --batches 256,16 --lengths multi,single --repeats 5
      for pk in ${PK:-pallas pallas_jax}; do
        T=${T:-150} run pk_mp_$pk $B --presets qwen2.5-0.5b --kv-layout paged --multiturn \
          --mt-prompts-per-slot 1 --mt-max-new 1024 --mt-max-obs 512 --repeats 1 \
          --paged-attention $pk
      done
      pk=${PK:-pallas}; pk=${pk%% *}
      T=${T:-150} run pk_mp_${pk}_prof $B --presets qwen2.5-0.5b --kv-layout paged --multiturn \
        --no-single --mt-prompts-per-slot 1 --mt-max-new 1024 --mt-max-obs 512 --repeats 1 \
        --paged-attention "$pk" --profile "$PROF/pk"
      timeout 120 $PY bench/trace_summary.py "$PROF/pk" --top 40 > "$OUT/pk_trace.jsonl" ;;
    pk7)
      for pk in ${PK:-pallas pallas_jax}; do
        T=${T:-270} run pk7_m7_paged_$pk $B --presets qwen2.5-7b --kv-layout paged --no-single \
          --multiturn --mt-prompts-per-slot 1 --mt-max-new 1024 --mt-max-obs 512 --repeats 1 \
          --paged-attention $pk
      done ;;
    rk)   # RoPE in the decode kernels ("pallas_rope") against XLA's RoPE first ("pallas"):
          # the device check, then 0.5B single turn and m's paged multi-turn run with both,
          # in one process and again in the other order, then a profile of the single turn
      T=${T:-200} run rk_check $PY bench/decode_rope_check.py
      T=${T:-240} run rk_ab $B --presets qwen2.5-0.5b --kv-layout paged --multiturn \
        --mt-prompts-per-slot 1 --mt-max-new 1024 --mt-max-obs 512 --repeats 3 \
        --paged-attention pallas_rope,pallas
      T=${T:-240} run rk_ba $B --presets qwen2.5-0.5b --kv-layout paged --multiturn \
        --mt-prompts-per-slot 1 --mt-max-new 1024 --mt-max-obs 512 --repeats 3 \
        --paged-attention pallas,pallas_rope
      T=${T:-150} run rk_dense $B --presets qwen2.5-0.5b --kv-layout dense --repeats 3 \
        --decode-attention pallas_rope,pallas,pallas_rope
      T=${T:-150} run rk_prof $B --presets qwen2.5-0.5b --kv-layout paged --repeats 1 \
        --paged-attention pallas_rope --profile "$PROF/rk"
      timeout 120 $PY bench/trace_summary.py "$PROF/rk" --top 40 > "$OUT/rk_trace.jsonl" ;;
    rk7)  # rk at 7B: paged single turn and m7's paged multi-turn run, both kernels
      T=${T:-420} run rk7_ab $B --presets qwen2.5-7b --kv-layout paged --multiturn \
        --mt-prompts-per-slot 1 --mt-max-new 1024 --mt-max-obs 512 --repeats 1 \
        --paged-attention pallas_rope,pallas ;;
    hd)   # the head and the loop: the pieces alone, then the 0.5B single-turn step
      T=${T:-90} run hd_head $PY bench/head_draw.py --widths 896,3584 --grid rows --sampling t1
      T=${T:-60} run hd_draw $PY bench/sample_step.py --iters 30
      T=${T:-150} run hd_att $PY bench/dense_attention.py --shapes 0.5b --lengths single,multi
      T=${T:-200} run hd_dense $B --presets qwen2.5-0.5b --kv-layout dense --repeats 3 \
        --decode-attention pallas_rope --decode-unroll 1,4 --decode-head xla,pallas \
        --profile "$PROF/hd"
      timeout 120 $PY bench/trace_summary.py "$PROF/hd" --top 30 > "$OUT/hd_trace.jsonl" ;;
    hdm)
      T=${T:-360} run hdm_paged $B --presets qwen2.5-0.5b --kv-layout paged --no-single \
        --multiturn --mt-prompts-per-slot 1 --mt-max-new 1024 --mt-max-obs 512 \
        --paged-attention pallas --decode-unroll 1,2 --decode-head xla,pallas ;;
    hd7)
      T=${T:-300} run hd7_dense $B --presets qwen2.5-7b --kv-layout dense --repeats 1 \
        --decode-attention pallas_rope --decode-head xla,pallas ;;
    hdk)
      for kn in default 4,2,128; do
        T=${T:-120} run "hdk_single_${kn//,/_}" $B --presets qwen2.5-0.5b --kv-layout dense --repeats 3 \
          --decode-attention pallas_rope --decode-head xla,pallas --dense-knobs $kn
      done
      for kn in default 4,2,128; do
        T=${T:-240} run "hdk_mdense_${kn//,/_}" $B --presets qwen2.5-0.5b --kv-layout dense --no-single \
          --multiturn --mt-prompts-per-slot 1 --mt-max-new 1024 --mt-max-obs 512 --repeats 1 \
          --decode-attention pallas_rope --dense-knobs $kn
      done ;;
    hdp)
      T=${T:-300} run hdp_sweep $PY bench/paged_attention.py --sweep --shapes 0.5b,7b \
        --batches 256 --lengths single,multi --programs 1024 --repeats 5 ;;
    hpk)
      for kn in default 2,2,64 2,2,64 default; do
        T=${T:-240} run "hpk_mpaged_${kn//,/_}" $B --presets qwen2.5-0.5b --kv-layout paged \
          --no-single --multiturn --mt-prompts-per-slot 1 --mt-max-new 1024 --mt-max-obs 512 \
          --repeats 1 --paged-attention pallas_rope --paged-knobs $kn
      done ;;
    hdo)
      for d in off on on off; do
        T=${T:-120} run hdo_single_$d $B --presets qwen2.5-0.5b --kv-layout dense --repeats 3 \
          --decode-attention pallas_rope --decode-head xla,pallas --direct-out $d
      done
      for d in off on; do
        T=${T:-240} run hdo_mpaged_$d $B --presets qwen2.5-0.5b --kv-layout paged --no-single \
          --multiturn --mt-prompts-per-slot 1 --mt-max-new 1024 --mt-max-obs 512 --repeats 1 \
          --paged-attention pallas_rope --direct-out $d
      done ;;
    gm)
      T=${T:-120} run gm_layers $PY bench/decode_gemm.py --mode layers \
        --models "$(echo ${GM_MODELS:-0.5b 7b} | tr ' ' ,)" --rows 256
      for m in ${GM_MODELS:-0.5b 7b}; do
        T=${T:-300} run gm_$m $PY bench/decode_gemm.py --models $m --rows 256
      done ;;
    gml)
      P=${GML_MM:-pallas_residual}
      for mm in xla,$P $P,xla; do
        T=${T:-150} run "gml_single_${mm//,/_}" $B --presets qwen2.5-0.5b --kv-layout dense \
          --repeats 3 --decode-attention pallas_rope --decode-matmul $mm
      done
      for mm in xla $P; do
        T=${T:-240} run gml_mpaged_$mm $B --presets qwen2.5-0.5b --kv-layout paged --no-single \
          --multiturn --mt-prompts-per-slot 1 --mt-max-new 1024 --mt-max-obs 512 --repeats 1 \
          --paged-attention pallas_rope --decode-matmul $mm
      done
      T=${T:-240} run gml_7b $B --presets qwen2.5-7b --kv-layout dense --repeats 1 \
        --decode-attention pallas_rope --decode-matmul xla,$P ;;
    *) echo "unknown stage $s" >&2; exit 2 ;;
  esac
done
