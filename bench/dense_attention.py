"""One layer's dense decode attention kernel alone, as the decode step calls it with
`decode_attention="pallas_rope"` (sampling/dense_pallas.py `dense_attention_write_qkv`: the
fused q/k/v projection in, RoPE, the new token's K/V stored in the cache, attention out), timed
over Triton's knobs. Prints one JSON line per (shape, row lengths, setting): microseconds a
layer (median of `--repeats` timings of a jitted loop of `--iters` layers, the caches carried in
place), the KV bytes the rows' slots hold and the rate that makes; then the best setting and
the default's line again, marked.

Row lengths (the cache holds S slots, a multiple of 16): `single` = every row at slot 383 of a
384-slot cache (128-token prompts, 256 new tokens), `multi` = uniform in 128 .. 1,665 of a
1,680-slot cache (issue 26's multi-turn shape), `long` = uniform in 128 .. 8,192 of 8,208.

  python bench/dense_attention.py                        # 0.5B and 7B heads at 256 rows, sweep
  python bench/dense_attention.py --shapes 0.5b --lengths single --grid default
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp
import numpy as np

from models import layers as L_
from ssp_jax.sampling import dense_pallas as DP

SHAPES = {"0.5b": (2, 7, 64), "7b": (4, 7, 128), "tiny": (2, 3, 16)}   # K, G, H
LENGTHS = {"single": (384, 384, 384), "multi": (128, 1665, 1680), "long": (128, 8192, 8208)}
DEFAULT = {"splits": None, "num_warps": None, "num_stages": None, "max_block": None}   # default_knobs
GRIDS = {
    "default": [DEFAULT],
    "sweep": [{"splits": sp, "num_warps": w, "num_stages": st, "max_block": mb}
              for sp, w, st, mb in itertools.product((None, 2), (2, 4, 8), (1, 2, 3), (64, 128))],
}


def _case(B, K, G, H, lo, hi, S, dtype, seed=0):
  r = np.random.default_rng(seed)
  pos = (r.integers(lo - 1, hi, size=B) if lo < hi else np.full(B, hi - 1)).astype(np.int32)
  N = K * G
  qkv = jnp.asarray(r.normal(size=(B, N + 2 * K, H)), dtype)
  inv = L_.rope_inv_freq(H, 1e6, None)
  cos, sin = L_.rope_cos_sin(jnp.asarray(pos)[:, None], inv, dtype)
  k, v = (jnp.asarray(r.normal(size=(B, K, S, H)), dtype) for _ in range(2))
  return qkv, cos[:, 0], sin[:, 0], k, v, jnp.asarray(pos)


def time_setting(case, N, iters, repeats, setting):
  interpret = jax.default_backend() == "cpu"

  @jax.jit
  def loop(qkv, cos, sin, k, v, pos):
    def body(i, c):
      qkv, k, v = c
      o, k, v = DP.dense_attention_write_qkv(qkv, cos, sin, k, v, pos, num_heads=N,
                                             interpret=interpret, **setting)
      B, K, G, H = o.shape   # the next layer's projection depends on this one's output
      qkv = qkv + o.reshape(B, K * G, H).mean(axis=1, keepdims=True).astype(qkv.dtype)
      return qkv, k, v
    return jax.lax.fori_loop(0, iters, body, (qkv, k, v))

  out = loop(*case)
  jax.block_until_ready(out)
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    jax.block_until_ready(loop(*case))
    times.append(time.perf_counter() - t)
  return statistics.median(times) / iters * 1e6


def main(argv=None) -> int:
  a = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawTextHelpFormatter)
  a.add_argument("--shapes", default="0.5b,7b", help=f"comma list of {sorted(SHAPES)}")
  a.add_argument("--batches", default="256")
  a.add_argument("--lengths", default="single,multi", help=f"comma list of {list(LENGTHS)}")
  a.add_argument("--grid", default="sweep", choices=sorted(GRIDS))
  a.add_argument("--dtype", default="bfloat16")
  a.add_argument("--iters", type=int, default=24, help="layers a timed loop runs")
  a.add_argument("--repeats", type=int, default=5)
  args = a.parse_args(argv)
  dtype = jnp.dtype(args.dtype)
  for shape in args.shapes.split(","):
    K, G, H = SHAPES[shape]
    for B in (int(b) for b in args.batches.split(",")):
      for ln in args.lengths.split(","):
        lo, hi, S = LENGTHS[ln]
        case = _case(B, K, G, H, lo, hi, S, dtype)
        pos = np.asarray(case[5])
        kv_bytes = int((pos + 1).sum()) * K * H * 2 * dtype.itemsize
        base = {"bench": "dense_attention", "shape": shape, "batch": B, "lengths": ln,
                "cache_slots": S, "mean_slots": round(float(pos.mean()) + 1, 1),
                "kv_mb": round(kv_bytes / 1e6, 1), "device": jax.devices()[0].device_kind}
        lines = []
        for setting in GRIDS[args.grid]:
          line = {**base, **setting, "default": setting == DEFAULT}
          try:
            us = time_setting(case, K * G, args.iters, args.repeats, setting)
          except Exception as e:  # noqa: BLE001 - reported, the other settings still run
            line["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            print(json.dumps(line), flush=True)
            continue
          line.update(us_per_layer=round(us, 2), kv_gb_s=round(kv_bytes / us / 1e3, 1))
          print(json.dumps(line), flush=True)
          lines.append(line)
        if len(lines) > 1:
          best = min(lines, key=lambda d: d["us_per_layer"])
          print(json.dumps({**best, "bench": "dense_attention_best"}), flush=True)
          for d in lines:
            if d["default"]:
              print(json.dumps({**d, "bench": "dense_attention_default"}), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
