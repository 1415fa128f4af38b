"""Throughput and model-FLOPs utilisation of the fused RL train step; prints one JSON line.

The step is the learner's (`ssp_jax.rl.learner.make_train_step`): policy forward + backward
with chunked log-probs, reference forward (when --kl-coef > 0), loss, gradient accumulation
over micro-batches (`lax.scan`) and the AdamW update, params fp32 master + fp32 optimizer
state, compute in --compute-dtype, random weights, every token a loss token.

GPU (the issue's setting; flash attention through cuDNN):
  python bench/train_step.py --preset qwen2.5-1.5b --seq 4096 --attn-impl cudnn
CPU smoke test (seconds):
  python bench/train_step.py --tiny --seq 64 --micro-batch 2 --steps 2

Packed vs padded on SSP-shaped lengths (`--length-mix paper`: bench/length_mix_paper.json, a
stated model of proposer and solver lengths with observations): the same sampled trajectories
run through the padded step (one row each, rows as long as the longest, rounded to 128) and the
packed step (`ssp_jax.rl.pack`, rows of the same length), and the packed step once more on
full-length rows (the uniform-length yardstick). Per layout: `fill_rate` (real tokens / token
positions computed), `real_tok_s` (real tokens per second), `mfu_real` (model FLOPs of the real
tokens only, each trajectory's causal attention over its own length, reference forward included
when --kl-coef > 0, against 797 TFLOP/s), and the pre-update `loss` (packed and padded must
agree: `loss_rel_diff`). The keys without a suffix are the packed layout's.
  python bench/train_step.py --length-mix paper --preset qwen2.5-1.5b --remat dots \
      --micro-batch 8 --traj 96 --steps 2
  python bench/train_step.py --length-mix paper --tiny --traj 12 --micro-batch 2 --steps 1

`--logprob-positions loss` (the default, as rl's) runs the lm_head at the loss tokens only;
MFU still counts it on every token (model FLOPs of the tokens, not FLOPs executed), so compare
`real_tok_s` or step times against `--logprob-positions all`.
MFU counts 6N FLOPs per token (N: every matmul parameter, lm_head included) plus causal
attention 6 * L * T * N_heads * H, against --peak-tflops per device (989 dense bf16 H100/H200
datasheet) and also against 797 (the bf16 matmul rate measured on the H200). `mfu_incl_ref`
also counts the reference forward (2N + attention / 3) that the fused step runs for the KL.
Without --micro-batch, the largest micro-batch that fits is searched: XLA's memory analysis
of two compiles (1 and 2 rows) gives a linear model, the largest power of two under it is
compiled and checked, halving until it fits.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import models  # noqa: E402
from ssp_jax.rl import config as rl_config  # noqa: E402
from ssp_jax.rl import learner as learner_lib  # noqa: E402
from ssp_jax.rl import step as step_lib  # noqa: E402
from ssp_jax.rl import train_state as ts  # noqa: E402

TINY = models.ModelConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2,
                          num_heads=4, num_kv_heads=2, head_dim=16)


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--preset", default="qwen2.5-1.5b", help="models.presets name")
  p.add_argument("--tiny", action="store_true", help="a tiny model (CPU smoke test)")
  p.add_argument("--layers", type=int, default=0, help="override the number of layers")
  p.add_argument("--seq", type=int, default=4096, help="tokens per sequence (T)")
  p.add_argument("--micro-batch", type=int, default=0, help="rows per micro-batch; 0 searches")
  p.add_argument("--tokens-per-step", type=int, default=65536,
                 help="tokens per optimizer update (micro-batches accumulated to reach it)")
  p.add_argument("--num-micro", type=int, default=0, help="micro-batches per update (overrides)")
  p.add_argument("--steps", type=int, default=5, help="timed updates (after one warm-up)")
  p.add_argument("--remat", default="full", help="models.decoder.REMAT_POLICIES key")
  p.add_argument("--compute-dtype", default="bfloat16")
  p.add_argument("--param-dtype", default="float32", help="master params and optimizer state")
  p.add_argument("--kl-coef", type=float, default=0.01, help="0 drops the reference forward")
  p.add_argument("--attn-impl", default="auto",
                 help="xla | cudnn | cudnn_gqa | auto (cudnn on GPU)")
  p.add_argument("--logprob-chunk", type=int, default=1024)
  p.add_argument("--logprob-positions", default="loss", choices=("loss", "all"),
                 help="rl.logprob_positions: the lm_head at the loss tokens only, or everywhere")
  p.add_argument("--logits-grad-dtype", default="compute", choices=("compute", "float32"),
                 help="rl.logits_grad_dtype: the logits' cotangent in the head's backward GEMMs")
  p.add_argument("--layer-loop", default="scan",
                 help="rl.layer_loop: scan (a layer an iteration), scan:N (N layers an "
                      "iteration) or unrolled")
  p.add_argument("--data", type=int, default=-1, help="mesh data axis (-1: all devices)")
  p.add_argument("--tensor", type=int, default=1, help="mesh tensor axis")
  p.add_argument("--peak-tflops", type=float, default=989.0, help="per-device dense peak")
  p.add_argument("--mem-fraction", type=float, default=0.92, help="of bytes_limit to allow")
  p.add_argument("--max-micro-batch", type=int, default=64)
  p.add_argument("--length-mix", default="", help="packed vs padded on a length mix: a name "
                 "(bench/length_mix_<name>.json, e.g. paper) or a path")
  p.add_argument("--traj", type=int, default=96, help="trajectories per update (--length-mix)")
  p.add_argument("--length-scale", type=float, default=0.0,
                 help="multiplies the mix's lengths (default 1, 1/16 with --tiny)")
  p.add_argument("--profile", default="", metavar="DIR",
                 help="--length-mix: run each layout's step once more under the JAX profiler "
                      "(a perfetto trace under DIR/<layout>, for bench/trace_summary.py; the "
                      "compiled HLO, whose metadata maps op names to source, in "
                      "DIR/<layout>.hlo.txt)")
  p.add_argument("--layouts", default="padded,packed,uniform",
                 help="--length-mix: the layouts to time (comma-separated)")
  p.add_argument("--pack-max-segments", type=int, default=64)
  p.add_argument("--pack-len", type=int, default=0,
                 help="tokens per packed row (rl.pack_len; 0: the padded rows' length)")
  a = p.parse_args(argv)
  from ssp_jax.rl.step import layer_unroll
  try:
    layer_unroll(a.layer_loop)
  except ValueError as e:
    p.error(f"--{str(e).replace('_', '-')}")
  return a


def model_config(a) -> models.ModelConfig:
  import dataclasses
  cfg = TINY if a.tiny else models.get_preset(a.preset)
  if a.layers:
    cfg = dataclasses.replace(cfg, num_layers=a.layers)
  return cfg


def flops_per_token(cfg: models.ModelConfig, T: int) -> tuple[float, float]:
  """(train FLOPs/token: 6N + causal attention, reference forward FLOPs/token)."""
  n = cfg.num_params(include_embedding=False) + (
      cfg.vocab_size * cfg.hidden_size if cfg.tie_embeddings else 0)
  attn = 6.0 * cfg.num_layers * T * cfg.num_heads * cfg.head_dim
  return 6.0 * n + attn, 2.0 * n + attn / 3.0


def build(a, cfg):
  rl = rl_config.get_rl_config()
  rl.update(kl_coef=a.kl_coef, remat=a.remat, compute_dtype=a.compute_dtype,
            param_dtype=a.param_dtype, ref_dtype=a.compute_dtype, logprob_chunk=a.logprob_chunk,
            logprob_positions=a.logprob_positions, logits_grad_dtype=a.logits_grad_dtype,
            layer_loop=a.layer_loop)
  on_gpu = jax.devices()[0].platform == "gpu"
  rl.attn_impl = ("cudnn" if on_gpu else "xla") if a.attn_impl == "auto" else a.attn_impl
  if rl.attn_impl == "cudnn_gqa" and not models.layers.cudnn_packed_gqa_ok():
    sys.exit(f"train_step.py: --attn-impl cudnn_gqa refused: {models.layers.CUDNN_GQA_REFUSED}")
  sharder = models.Sharder(models.make_mesh((("data", a.data), ("tensor", a.tensor))))
  tx = ts.make_optimizer(rl)
  _, state_sh = ts.state_shardings(cfg, tx, sharder, ts.dtype_of(a.param_dtype))
  return rl, sharder, tx, state_sh


def check_micro_batch(m: int, sharder) -> None:
  """Exits 2 with the fix when m rows do not split over the mesh's batch devices (the learner
  refuses the same setting; jit would raise an IndivisibleError naming no flag)."""
  rows = sharder.axis_size("act_batch")
  if m % rows:
    sys.exit(f"train_step.py: --micro-batch {m} is not a multiple of the {rows} devices the batch "
             f"is sharded over; pass a multiple of {rows}, or --data with fewer devices")


def fake_mask(K, m, T):
  mask = np.ones((K, m, T), np.float32)
  mask[..., : T // 8] = 0  # a prompt
  return mask


def fake_batch(cfg, K, m, T, sharder, scored, seed=0):
  rng = np.random.default_rng(seed)
  mask = fake_mask(K, m, T)
  b = {"tokens": rng.integers(0, cfg.vocab_size, (K, m, T), dtype=np.int32),
       "loss_mask": mask, "old_logp": np.full((K, m, T), -8.0, np.float32),
       "advantages": rng.normal(size=(K, m)).astype(np.float32),
       "loss_weight": np.ones((K, m), np.float32),
       "role": (rng.random((K, m)) < 0.2).astype(np.int32), "prompt": np.zeros((K, m), np.int32)}
  if scored:
    b["score_idx"] = step_lib.score_positions(mask)
  sh = learner_lib.batch_shardings(sharder, False, scored)
  return {k: jax.device_put(v, sh[k]) for k, v in b.items()}


def compile_step(a, cfg, rl, sharder, tx, state_sh, K, m):
  sc = learner_lib.StepConfig.from_config(rl)
  sc = learner_lib.StepConfig(**{**sc.__dict__, "micro_batch_size": m})
  step = learner_lib.make_train_step(cfg, sc, tx, sharder, state_sh, with_ref=a.kl_coef != 0)
  abstract, _ = ts.state_shardings(cfg, tx, sharder, ts.dtype_of(a.param_dtype))
  st = ts.with_shardings(abstract, state_sh)
  ref = None
  if a.kl_coef != 0:
    ref = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, ts.dtype_of(a.compute_dtype),
                                                          sharding=sh),
                       abstract["params"], state_sh["params"])
  t0 = time.perf_counter()
  scored = sc.score_loss_tokens
  inputs = step_lib.abstract_inputs(sharder, False, K, m, a.seq, scored)
  if scored:   # the fake batch's loss tokens
    n = step_lib.score_positions(fake_mask(1, 1, a.seq)).shape[-1]
    inputs["score_idx"] = jax.ShapeDtypeStruct((K, m, n), np.int32,
                                               sharding=inputs["score_idx"].sharding)
  compiled = step.lower(st, ref, inputs).compile()
  return step, compiled, time.perf_counter() - t0


def peak_bytes(compiled) -> int:
  ma = compiled.memory_analysis()
  if ma is None:
    return 0
  return int(ma.temp_size_in_bytes + ma.argument_size_in_bytes + ma.output_size_in_bytes
             - ma.alias_size_in_bytes)


def bytes_limit() -> int:
  stats = jax.devices()[0].memory_stats() or {}
  return int(stats.get("bytes_limit", 0))


def search_micro_batch(a, cfg, rl, sharder, tx, state_sh) -> tuple[int, dict]:
  """Largest power-of-two micro-batch whose compiled step fits in memory."""
  limit = bytes_limit() * a.mem_fraction
  rows = sharder.axis_size("act_batch")
  m1, m2 = rows, 2 * rows
  p1 = peak_bytes(compile_step(a, cfg, rl, sharder, tx, state_sh, 1, m1)[1])
  p2 = peak_bytes(compile_step(a, cfg, rl, sharder, tx, state_sh, 1, m2)[1])
  info = {"bytes_limit": bytes_limit(), "peak_bytes_m1": p1, "peak_bytes_m2": p2}
  if not limit or p2 <= p1:
    return m2, info
  per_row = (p2 - p1) / (m2 - m1)
  guess = int((limit - p1) / per_row) + m1
  m = rows * 2 ** int(math.floor(math.log2(max(guess // rows, 1))))
  m = min(m, a.max_micro_batch)
  while m > rows:
    peak = peak_bytes(compile_step(a, cfg, rl, sharder, tx, state_sh, 1, m)[1])
    if peak <= limit:
      info["peak_bytes_chosen"] = peak
      break
    m //= 2
  return max(m, rows), info


# --------------------------------------------------------------------------------------------
# --length-mix: the same trajectories padded and packed
# --------------------------------------------------------------------------------------------
def _put(batch, m, sharder, scored):
  sh = learner_lib.batch_shardings(sharder, batch.PACKED, scored)
  micro = learner_lib.to_micro(batch.step_inputs(), m)
  if scored:
    micro["score_idx"] = step_lib.score_positions(micro["loss_mask"])
  return {k: jax.device_put(v, sh[k]) for k, v in micro.items()}


def _time(step, state0, ref, batch, steps):
  """(compile + first call s, median of `steps` timed calls, pre-update loss of the first)."""
  state = jax.tree.map(jnp.copy, state0)
  t0 = time.perf_counter()
  state, metrics = step(state, ref, batch)
  loss = float(metrics["loss"])
  first = time.perf_counter() - t0
  times = []
  for _ in range(steps):
    t0 = time.perf_counter()
    state, metrics = step(state, ref, batch)
    jax.block_until_ready((state, metrics))
    times.append(time.perf_counter() - t0)
  del state
  return first, float(np.median(times)), loss


def _uniform_packed(cfg, rows, T, seed=1):
  """Full-length packed rows: one segment each (the uniform-length yardstick)."""
  from ssp_jax.rl import pack as pack_lib
  rng = np.random.default_rng(seed)
  mask = np.ones((rows, T), np.float32)
  mask[:, 0] = 0.0
  return pack_lib.PackedBatch(
      tokens=rng.integers(0, cfg.vocab_size, (rows, T), dtype=np.int32),
      loss_mask=mask, old_logp=np.where(mask > 0, -8.0, 0.0).astype(np.float32),
      advantages=np.repeat(rng.normal(size=(rows, 1)), T, 1).astype(np.float32),
      loss_weight=np.ones((rows, T), np.float32),
      role=np.repeat((rng.random((rows, 1)) < 0.2).astype(np.int32), T, 1),
      segment_ids=np.ones((rows, T), np.int32),
      positions=np.broadcast_to(np.arange(T, dtype=np.int32), (rows, T)).copy(),
      seq_tokens=np.full((rows, T), T - 1, np.float32))


def run_length_mix(a, cfg, rl, sharder, tx, state_sh) -> dict:
  import length_mix
  from ssp_jax.rl import batch as batch_lib
  from ssp_jax.rl import pack as pack_lib
  mix = length_mix.load_mix(a.length_mix)
  scale = a.length_scale or (1 / 16 if a.tiny else 1.0)
  trajs, roles = length_mix.sample_trajectories(mix, a.traj, vocab=cfg.vocab_size, seed=0,
                                                scale=scale, max_len=a.seq)
  # prompt groups as in SSP: a proposer alone, solvers in groups of 5 attempts
  prompt, g = [], 0
  for i, r in enumerate(roles):
    g += 1 if (i == 0 or r == 0 or (i - roles.index(1)) % 5 == 0) else 0
    prompt.append(g)
  adv = np.random.default_rng(2).normal(size=len(trajs))
  batch = batch_lib.make_batch(trajs, adv, roles, prompt_index=prompt, bucket=128, max_len=a.seq)
  T = batch.row_len
  a.seq = T
  info = {}
  m = a.micro_batch or 0
  if not m:
    m, info = search_micro_batch(a, cfg, rl, sharder, tx, state_sh)
  check_micro_batch(m, sharder)
  sc = learner_lib.StepConfig.from_config(rl)
  sc = learner_lib.StepConfig(**{**sc.__dict__, "micro_batch_size": m,
                                 "max_segments": a.pack_max_segments})
  lengths = batch.length.astype(np.float64)
  train_f = np.array([flops_per_token(cfg, int(n))[0] for n in lengths])
  ref_f = np.array([flops_per_token(cfg, int(n))[1] for n in lengths])
  real_flops = float((lengths * (train_f + (ref_f if a.kl_coef else 0.0))).sum())
  real_flops_policy = float((lengths * train_f).sum())
  real = float(lengths.sum())

  state0 = ts.create_train_state(cfg, tx, sharder, param_dtype=ts.dtype_of(a.param_dtype))
  ref = (ts.make_reference(state0["params"], cfg, sharder, ts.dtype_of(a.compute_dtype))
         if a.kl_coef != 0 else None)
  n_dev = jax.device_count()
  peak = n_dev * 797e12
  padded = batch.pad_rows(-(-len(trajs) // m) * m)
  P = a.pack_len or T   # packed row length (rl.pack_len); the padded rows stay at T
  pb, _, pstats = pack_lib.pack_batch(batch, P, max_segments=a.pack_max_segments)
  pb = pb.pad_rows(pack_lib.micro_batches_bucket(pb.num_rows, m))
  layouts = {
      "padded": (padded, False, real, real_flops, real_flops_policy, len(trajs)),
      "packed": (pb, True, real, real_flops, real_flops_policy, int(pstats["rows"])),
  }
  full_rows = -(-int(pstats["rows"]) // m) * m
  uf = flops_per_token(cfg, P)
  layouts["uniform"] = (_uniform_packed(cfg, full_rows, P), True, float(full_rows * (P - 1)),
                        full_rows * P * (uf[0] + (uf[1] if a.kl_coef else 0.0)),
                        full_rows * P * uf[0], full_rows)
  out = {"bench": "train_step_length_mix", "model": "tiny" if a.tiny else a.preset,
         "length_mix": a.length_mix, "length_scale": scale, "traj": len(trajs),
         "real_tokens": int(real), "mean_len": real / len(trajs), "max_len": int(lengths.max()),
         "row_len": T, "pack_len": P, "micro_batch": m, "devices": n_dev,
         "device_kind": jax.devices()[0].device_kind, "jax": jax.__version__,
         "remat": a.remat, "attn_impl": rl.attn_impl, "kl_coef": a.kl_coef,
         "logprob_positions": a.logprob_positions, "logits_grad_dtype": a.logits_grad_dtype,
         "layer_loop": a.layer_loop, **info}
  layouts = {k: v for k, v in layouts.items() if k in a.layouts.split(",")}
  for name, (b, packed, toks, flops, flops_policy, used_rows) in layouts.items():
    step = learner_lib.make_train_step(cfg, sc, tx, sharder, state_sh,
                                       with_ref=a.kl_coef != 0, packed=packed)
    put = _put(b, m, sharder, sc.score_loss_tokens)
    first, dt, loss = _time(step, state0, ref, put, a.steps)
    if a.profile:   # after the timed calls, so the profiler never slows a reported time
      state = jax.tree.map(jnp.copy, state0)
      with jax.profiler.trace(os.path.join(a.profile, name), create_perfetto_trace=True):
        jax.block_until_ready(step(state, ref, put))
      del state
      with open(os.path.join(a.profile, f"{name}.hlo.txt"), "w") as f:   # op names -> source
        f.write(step.lower(state0, ref, put).compile().as_text())
    rows = b.num_rows
    computed = -(-used_rows // m) * m * b.tokens.shape[1]   # positions of the micro-batches that run
    out.update({f"step_s_{name}": dt, f"compile_and_first_s_{name}": round(first, 2),
                f"rows_{name}": used_rows, f"micro_batches_{name}": rows // m,
                f"fill_rate_{name}": toks / computed, f"real_tok_s_{name}": toks / dt,
                f"mfu_real_{name}": flops / dt / peak,
                f"mfu_real_policy_{name}": flops_policy / dt / peak, f"loss_{name}": loss})
  stats = jax.devices()[0].memory_stats() or {}
  if "peak_bytes_in_use" in stats:   # the allocator's peak over the process (all layouts)
    out["device_peak_gb"] = round(stats["peak_bytes_in_use"] / 1e9, 2)
  if "packed" in layouts:
    for k in ("fill_rate", "real_tok_s", "mfu_real"):
      out[k] = out[f"{k}_packed"]
  if {"packed", "padded"} <= set(layouts):
    out["speedup_packed_vs_padded"] = out["step_s_padded"] / out["step_s_packed"]
    out["loss_rel_diff"] = abs(out["loss_packed"] - out["loss_padded"]) / max(
        abs(out["loss_padded"]), 1e-12)
  if {"packed", "uniform"} <= set(layouts):
    out["mfu_real_packed_over_uniform"] = out["mfu_real_packed"] / out["mfu_real_uniform"]
  return out


def main(argv=None) -> int:
  a = parse_args(argv)
  cfg = model_config(a)
  rl, sharder, tx, state_sh = build(a, cfg)
  if a.length_mix:
    print(json.dumps(run_length_mix(a, cfg, rl, sharder, tx, state_sh)))
    return 0
  info = {}
  m = a.micro_batch or 0
  if not m:
    m, info = search_micro_batch(a, cfg, rl, sharder, tx, state_sh)
  check_micro_batch(m, sharder)
  K = a.num_micro or max(1, a.tokens_per_step // (m * a.seq))
  step, compiled, compile_s = compile_step(a, cfg, rl, sharder, tx, state_sh, K, m)
  state = ts.create_train_state(cfg, tx, sharder, param_dtype=ts.dtype_of(a.param_dtype))
  ref = (ts.make_reference(state["params"], cfg, sharder, ts.dtype_of(a.compute_dtype))
         if a.kl_coef != 0 else None)
  batch = fake_batch(cfg, K, m, a.seq, sharder, rl.logprob_positions == "loss")
  state, metrics = compiled(state, ref, batch)   # warm-up
  jax.block_until_ready(state)
  times = []
  for _ in range(a.steps):
    t0 = time.perf_counter()
    state, metrics = compiled(state, ref, batch)
    jax.block_until_ready((state, metrics))
    times.append(time.perf_counter() - t0)
  dt = float(np.median(times))
  tokens = K * m * a.seq
  train_f, ref_f = flops_per_token(cfg, a.seq)
  if a.kl_coef == 0:
    ref_f = 0.0
  n_dev = jax.device_count()
  tps = tokens / dt
  out = {
      "bench": "train_step", "model": "tiny" if a.tiny else a.preset,
      "num_params": cfg.num_params(), "layers": cfg.num_layers, "seq": a.seq,
      "micro_batch": m, "num_micro": K, "tokens_per_step": tokens, "devices": n_dev,
      "device_kind": jax.devices()[0].device_kind, "jax": jax.__version__,
      "remat": a.remat, "compute_dtype": a.compute_dtype, "param_dtype": a.param_dtype,
      "attn_impl": rl.attn_impl, "kl_coef": a.kl_coef, "compile_s": round(compile_s, 2),
      "step_s_median": dt, "step_s_all": [round(t, 4) for t in times],
      "tokens_per_s": tps, "tokens_per_s_per_device": tps / n_dev,
      "train_flops_per_token": train_f, "ref_flops_per_token": ref_f,
      "mfu": tps * train_f / (n_dev * a.peak_tflops * 1e12),
      "mfu_vs_797": tps * train_f / (n_dev * 797e12),
      "mfu_incl_ref": tps * (train_f + ref_f) / (n_dev * a.peak_tflops * 1e12),
      "mfu_incl_ref_vs_797": tps * (train_f + ref_f) / (n_dev * 797e12),
      "peak_bytes": peak_bytes(compiled), "loss": float(metrics["loss"]),
      "update_ok": float(metrics["update_ok"]), **info,
  }
  print(json.dumps(out))
  return 0


if __name__ == "__main__":
  sys.exit(main())
