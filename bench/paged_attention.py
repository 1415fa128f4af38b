"""One layer's paged decode attention alone, with the store of the new token's K/V: the fused
kernel (`pallas`, sampling/paged_pallas.py) against JAX's library kernel after two scatters
(`pallas_jax`) and the pure-JAX gather path (`gather`). Prints one JSON line per (shape, row
lengths, implementation): microseconds a layer (median of `--repeats` timings of a jitted loop
of `--iters` layers, the pools carried in place), the KV bytes the rows' slots hold and the rate
that makes, against the GPU's memory bandwidth.

Row lengths: `single` = every row at 384 slots (the single-turn shape: 128-token prompts, 256
new tokens), `multi` = uniform in 128 .. 1,665 (the multi-turn shape of issue 26: 1,024-token
responses, 512-token observations), `long` = uniform in 128 .. 8,192.

  python bench/paged_attention.py                                # 0.5B and 7B heads, B 256, 16
  python bench/paged_attention.py --shapes 0.5b --batches 256 --lengths multi --impls pallas
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp
import numpy as np

from ssp_jax.sampling import paged as PG
from ssp_jax.sampling import paged_pallas as PP

SHAPES = {"0.5b": (2, 7, 64), "7b": (4, 7, 128), "tiny": (2, 3, 16)}   # K, G, H
LENGTHS = {"single": (384, 384), "multi": (128, 1665), "long": (128, 8192)}


def _case(B, K, G, H, T, lo, hi, dtype, seed=0):
  r = np.random.default_rng(seed)
  pos = r.integers(lo - 1, hi, size=B).astype(np.int32) if lo < hi else np.full(B, hi - 1,
                                                                                 np.int32)
  need = pos // T + 1                                   # pages a row owns (its slots <= pos)
  C = 1 << int(math.ceil(math.log2(int(need.max()))))
  P = int(need.sum()) + 1
  table = np.zeros((B, C), np.int32)
  pages = r.permutation(np.arange(1, P))
  at = 0
  for b in range(B):
    table[b, :need[b]] = pages[at:at + need[b]]
    at += need[b]
  kp, vp = (jnp.asarray(r.normal(size=(K, P, T, H)), dtype) for _ in range(2))
  q = jnp.asarray(r.normal(size=(B, K, G, H)), dtype)
  kn, vn = (jnp.asarray(r.normal(size=(B, K, H)), dtype) for _ in range(2))
  return q, kp, vp, jnp.asarray(table), jnp.asarray(pos), kn, vn


def _layer(impl, **kw):
  def f(q, kp, vp, table, pos, kn, vn):
    if impl == "pallas":
      return PP.paged_attention_write(q, kp, vp, table, pos, kn, vn,
                                      interpret=jax.default_backend() == "cpu", **kw)
    page, off = PG.slot_of(table, pos, kp.shape[2])
    kp = PG.write_token(kp, page, off, kn)
    vp = PG.write_token(vp, page, off, vn)
    if impl == "gather":
      return PG.gather_attention(q, kp, vp, table, pos + 1), kp, vp
    return PG.pallas_attention(q, kp, vp, table, pos + 1,
                               interpret=jax.default_backend() == "cpu"), kp, vp
  return f


def time_impl(impl, args, iters, repeats, **kw):
  layer = _layer(impl, **kw)

  @jax.jit
  def loop(q, kp, vp, table, pos, kn, vn):
    def body(i, c):
      q, kp, vp = c
      o, kp, vp = layer(q, kp, vp, table, pos, kn, vn)
      return o.astype(q.dtype), kp, vp             # the next layer's query depends on this one
    return jax.lax.fori_loop(0, iters, body, (q, kp, vp))

  q, kp, vp, table, pos, kn, vn = args
  out = loop(q, kp, vp, table, pos, kn, vn)
  jax.block_until_ready(out)
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    jax.block_until_ready(loop(q, kp, vp, table, pos, kn, vn))
    times.append(time.perf_counter() - t)
  return statistics.median(times) / iters * 1e6, out[0]


def main(argv=None) -> int:
  a = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawTextHelpFormatter)
  a.add_argument("--shapes", default="0.5b,7b", help=f"comma list of {sorted(SHAPES)}")
  a.add_argument("--batches", default="256,16")
  a.add_argument("--lengths", default="single,multi,long", help=f"comma list of {list(LENGTHS)}")
  a.add_argument("--impls", default="pallas,pallas_jax,gather")
  a.add_argument("--page-size", type=int, default=64)
  a.add_argument("--dtype", default="bfloat16")
  a.add_argument("--iters", type=int, default=24, help="layers a timed loop runs")
  a.add_argument("--repeats", type=int, default=10)
  a.add_argument("--sweep", action="store_true",
                 help="the fused kernel only, over --warps x --stages x --blocks x --programs")
  a.add_argument("--warps", default="2,4,8", help="--sweep: num_warps values")
  a.add_argument("--stages", default="2,3", help="--sweep: num_stages values")
  a.add_argument("--blocks", default="64,128,256", help="--sweep: max_block values (slots)")
  a.add_argument("--programs", default="512,1024,2048", help="--sweep: min_programs values")
  args = a.parse_args(argv)
  dtype = jnp.dtype(args.dtype)
  if args.sweep:
    for flag in ("warps", "stages", "blocks", "programs"):
      try:
        vals = [int(x) for x in getattr(args, flag).split(",")]
        assert min(vals) >= 1
      except (ValueError, AssertionError):
        a.error(f"--{flag} {getattr(args, flag)!r}: a comma list of positive integers")
    return sweep(args, dtype)
  for shape in args.shapes.split(","):
    K, G, H = SHAPES[shape]
    for B in (int(b) for b in args.batches.split(",")):
      for ln in args.lengths.split(","):
        lo, hi = LENGTHS[ln]
        case = _case(B, K, G, H, args.page_size, lo, hi, dtype)
        pos = np.asarray(case[4])
        kv_bytes = int((pos + 1).sum()) * K * H * 2 * dtype.itemsize
        ref = None
        for impl in args.impls.split(","):
          line = {"bench": "paged_attention", "shape": shape, "batch": B, "lengths": ln,
                  "impl": impl, "page_size": args.page_size, "columns": int(case[3].shape[1]),
                  "mean_slots": round(float(pos.mean()) + 1, 1), "kv_mb": round(kv_bytes / 1e6, 1),
                  "device": jax.devices()[0].device_kind}
          try:
            us, out = time_impl(impl, case, args.iters, args.repeats)
          except Exception as e:  # noqa: BLE001 - reported, the other impls still run
            line["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            print(json.dumps(line), flush=True)
            continue
          out = np.asarray(out, np.float32)
          if ref is None:
            ref = out
          line.update(us_per_layer=round(us, 2), kv_gb_s=round(kv_bytes / us / 1e3, 1),
                      max_abs_diff_vs_first=float(np.abs(out - ref).max()))
          print(json.dumps(line), flush=True)
  return 0


def sweep(args, dtype) -> int:
  import itertools
  ints = lambda v: [int(x) for x in v.split(",")]
  grid = list(itertools.product(ints(args.warps), ints(args.stages), ints(args.blocks),
                                ints(args.programs)))
  for shape in args.shapes.split(","):
    K, G, H = SHAPES[shape]
    for B in (int(b) for b in args.batches.split(",")):
      for ln in args.lengths.split(","):
        case = _case(B, K, G, H, args.page_size, *LENGTHS[ln], dtype)
        pos = np.asarray(case[4])
        kv_bytes = int((pos + 1).sum()) * K * H * 2 * dtype.itemsize
        best = None
        for w, s, mb, mp in grid:
          line = {"bench": "paged_attention_sweep", "shape": shape, "batch": B, "lengths": ln,
                  "num_warps": w, "num_stages": s, "max_block": mb, "min_programs": mp}
          try:
            us, _ = time_impl("pallas", case, args.iters, args.repeats, num_warps=w,
                              num_stages=s, max_block=mb, min_programs=mp)
          except Exception as e:  # noqa: BLE001
            line["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            print(json.dumps(line), flush=True)
            continue
          line.update(us_per_layer=round(us, 2), kv_gb_s=round(kv_bytes / us / 1e3, 1))
          print(json.dumps(line), flush=True)
          best = min(best or line, line, key=lambda d: d["us_per_layer"])
        print(json.dumps({**best, "bench": "paged_attention_sweep_best"}), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
