"""The paged prefill program alone (`sampling.prefill_pages`): its model FLOP rate against the
chip's measured bf16 matmul rate, its scratch memory, and (--check) its error against an fp32
reference, for each prefill attention (`rollout.prefill_attention`: xla, cudnn).

The shape is the multi-turn engine's observation prefill: `--pieces` pieces of `--piece` tokens a
call (the engine's defaults: 64 x 64 = `rollout.prefill_tokens` 4,096), each a row's tokens at a
random position of its `--columns` pages of 64 slots, the slots before it already filled (random
K/V). Random weights. One JSON line per attention implementation, then one with the matmul rate.

  python bench/prefill_mfu.py --preset qwen2.5-7b --columns 32            # GPU timing
  python bench/prefill_mfu.py --preset qwen2.5-0.5b --columns 32 --check  # GPU error check
  python bench/prefill_mfu.py --tiny --impls xla --repeats 1              # CPU smoke run

FLOPs counted (`model_tflop_s`): 2 x the layers' projection weights a token, plus causal
attention over the slots each query sees (4 x heads x head_dim a seen slot a layer); padding
slots and the table's unseen slots are not counted. `mfu` divides by `matmul_tflop_s`, the rate
of an 8,192-cubed bf16 GEMM measured in the same process (797 TFLOP/s on the H200 of
bench/RESULTS.md).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp
import numpy as np

import models
from models.config import ModelConfig
from ssp_jax import sampling as S
from ssp_jax.sampling.paged_prefill import PREFILL_ATTN

TINY = ModelConfig(model_type="qwen2", vocab_size=512, hidden_size=64, intermediate_size=128,
                   num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16)
PS = 64   # slots a page (rollout.page_size)


def matmul_tflop_s(n: int = 8192, reps: int = 20) -> float:
  """The bf16 GEMM rate of this device (TFLOP/s), an n-cubed product chained reps times."""
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.bfloat16)
  f = jax.jit(lambda a: jax.lax.fori_loop(0, reps, lambda i, x: (x @ a) * 0.01, a))
  jax.block_until_ready(f(a))
  t = time.perf_counter()
  jax.block_until_ready(f(a))
  return reps * 2.0 * n ** 3 / (time.perf_counter() - t) / 1e12


def flops(cfg: ModelConfig, start_R: np.ndarray, T: int) -> float:
  D, F, H = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
  proj = 2.0 * (D * H * (2 * cfg.num_heads + 2 * cfg.num_kv_heads) + 3 * D * F)
  seen = float(np.sum(start_R[:, None] + np.arange(T)[None] + 1))   # slots each query sees
  return cfg.num_layers * (proj * len(start_R) * T + 4.0 * cfg.num_heads * H * seen)


def inputs(cfg: ModelConfig, R: int, T: int, C: int, dtype, seed: int = 0):
  """Pools of 1 + R * C pages filled with random K/V, row r owning pages 1 + r*C ...; each
  piece at a random start with T tokens left in its table."""
  rng = np.random.default_rng(seed)
  P = 1 + R * C
  shape = (cfg.num_kv_heads, P, PS, cfg.head_dim)
  keys = jax.random.split(jax.random.key(seed), 2 * cfg.num_layers)
  k = [jax.random.normal(keys[i], shape, dtype) for i in range(cfg.num_layers)]
  v = [jax.random.normal(keys[cfg.num_layers + i], shape, dtype) for i in range(cfg.num_layers)]
  table_RC = (1 + np.arange(R * C, dtype=np.int32)).reshape(R, C)
  start_R = rng.integers(0, C * PS - T + 1, R).astype(np.int32)
  toks_RT = rng.integers(0, cfg.vocab_size, (R, T)).astype(np.int32)
  return k, v, jnp.asarray(table_RC), jnp.asarray(toks_RT), start_R


def run(cfg, dparams, R, T, C, impl, repeats, dtype):
  k, v, table, toks, start = inputs(cfg, R, T, C, dtype)
  start_d = jnp.asarray(start)
  t = time.perf_counter()
  compiled = S.prefill_pages.lower(cfg, k, v, dparams, table, toks, start_d, dtype=dtype,
                                   attn_impl=impl).compile()
  compile_s = time.perf_counter() - t
  mem = compiled.memory_analysis()
  k, v = jax.block_until_ready(compiled(k, v, dparams, table, toks, start_d))   # first run
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    k, v = jax.block_until_ready(compiled(k, v, dparams, table, toks, start_d))  # in place
    times.append(time.perf_counter() - t)
  return statistics.median(times), compile_s, getattr(mem, "temp_size_in_bytes", None), start


def written(pools, table_RC, start_R, T):
  """The K/V the call wrote: [L, R, K, T, H] at each piece's slots, as fp32 numpy."""
  table = np.asarray(table_RC)
  out = []
  for p in pools:
    p = np.asarray(p.astype(jnp.float32))
    rows = []
    for r, s in enumerate(start_R):
      pos = s + np.arange(T)
      rows.append(p[:, table[r, pos // PS], pos % PS])       # [K, T, H]
    out.append(np.stack(rows))
  return np.stack(out)


def check(cfg, params, R, T, C, impls):
  """Each impl's written K/V (bf16 compute) against the xla path in fp32 compute."""
  res = {}
  for impl, dtype in [("ref", jnp.float32)] + [(i, jnp.bfloat16) for i in impls]:
    dp = S.make_decode_params(cfg, params, dtype, True)
    k, v, table, toks, start = inputs(cfg, R, T, C, jnp.bfloat16)
    k, v = S.prefill_pages(cfg, k, v, dp, table, toks, jnp.asarray(start), dtype=dtype,
                           attn_impl="xla" if impl == "ref" else impl)
    res[impl] = written(k, table, start, T), written(v, table, start, T)
  ref_k, ref_v = res.pop("ref")
  scale = max(np.abs(ref_k).max(), np.abs(ref_v).max())
  lines = []
  for impl, (kk, vv) in res.items():
    d = np.concatenate([np.abs(kk - ref_k).ravel(), np.abs(vv - ref_v).ravel()])
    last = np.abs(vv[-1] - ref_v[-1])     # the last layer's V: every earlier layer's error in it
    lines.append({"bench": "prefill_check", "attn": impl, "max_abs_err": float(d.max()),
                  "mean_abs_err": float(d.mean()), "ref_max_abs": float(scale),
                  "last_layer_v_mean_abs_err": float(last.mean())})
  return lines


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--preset", default="qwen2.5-7b")
  p.add_argument("--tiny", action="store_true", help="a 2-layer model (CPU smoke run)")
  p.add_argument("--pieces", type=int, default=64, help="pieces a call (rows of the program)")
  p.add_argument("--piece", type=int, default=64, help="tokens a piece (rollout.prefill_piece)")
  p.add_argument("--columns", type=int, default=32, help="table width in pages of 64 slots")
  p.add_argument("--impls", default=",".join(PREFILL_ATTN))
  p.add_argument("--repeats", type=int, default=10)
  p.add_argument("--check", action="store_true",
                 help="also each impl's written K/V against an fp32-compute reference")
  a = p.parse_args(argv)
  impls = a.impls.split(",")
  for i in impls:
    if i not in PREFILL_ATTN:
      p.error(f"--impls {i!r}: use {', '.join(PREFILL_ATTN)}")
  if a.pieces < 1 or a.piece < 1 or a.columns * PS < a.piece:
    p.error("--pieces, --piece >= 1 and --columns x 64 >= --piece")
  cfg = TINY if a.tiny else models.get_preset(a.preset)
  name = "tiny" if a.tiny else a.preset
  dtype = jnp.bfloat16
  params = jax.jit(lambda k: models.init_params(cfg, k, dtype=dtype))(jax.random.key(0))
  if a.check:
    for line in check(cfg, params, a.pieces, a.piece, a.columns, impls):
      print(json.dumps({"model": name, **line}), flush=True)
  dparams = S.make_decode_params(cfg, params, dtype, True)
  del params
  peak = matmul_tflop_s(8192 if jax.default_backend() != "cpu" else 512, 3)
  for impl in impls:
    s, compile_s, temp, start = run(cfg, dparams, a.pieces, a.piece, a.columns, impl,
                                    a.repeats, dtype)
    tf = flops(cfg, start, a.piece) / s / 1e12
    print(json.dumps({"bench": "prefill_mfu", "model": name, "attn": impl,
                      "pieces": a.pieces, "piece": a.piece, "columns": a.columns,
                      "tokens": a.pieces * a.piece, "device": jax.devices()[0].device_kind,
                      "s": round(s, 5), "compile_s": round(compile_s, 2),
                      "model_tflop_s": round(tf, 1), "matmul_tflop_s": round(peak, 1),
                      "mfu": round(tf / peak, 4), "temp_bytes": temp}), flush=True)


if __name__ == "__main__":
  main()
