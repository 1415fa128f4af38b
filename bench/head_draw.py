"""The decode step's output projection and draw alone: the XLA path (the [B, V] float32 logits
from one GEMM, then `sample_next`) against the fused head (sampling/head_pallas.py: the GEMM and
the draw's block statistics in one kernel, the logits never stored), over the fused kernel's
knobs. Prints one JSON line per (model width, sampling, implementation, setting):
microseconds a draw (median of `--repeats` timings of a jitted loop of `--iters` draws, each
draw's hidden state depending on the last one's token), the share of tokens equal to the XLA
path's for the same keys, and the largest log-prob difference.

  python bench/head_draw.py                          # 0.5B and 7B widths, 256 rows, Qwen vocab
  python bench/head_draw.py --widths 896 --grid default
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

from ssp_jax.sampling import head_pallas as HP
from ssp_jax.sampling.methods import SamplingParams, sample_next

DEFAULT = {"rows": HP.ROWS, "num_warps": HP.NUM_WARPS, "num_stages": 2}
GRIDS = {"default": [DEFAULT],
         "rows": [{"rows": r, "num_warps": w, "num_stages": 2}
                  for r, w in itertools.product((64, 128, 256), (4, 8))],
         "sweep": [{"rows": r, "num_warps": w, "num_stages": s}
                   for r, w, s in itertools.product((64, 128, 256), (4, 8, 16), (2, 3))]}
SAMPLING = {"t1": SamplingParams(1.0), "greedy": SamplingParams(0.0)}


def _draw(impl, p, knobs):
  if impl == "xla":
    return lambda h, w, k: sample_next(
        jnp.einsum("BD,DV->BV", h, w, preferred_element_type=jnp.float32), k, p)
  return lambda h, w, k: HP.sample_from_hidden(h, w, k, p, **knobs)


def time_draw(draw, h, w, iters, repeats):
  @jax.jit
  def loop(h, w, key):
    def body(i, c):
      h, toks = c
      tok, lp = draw(h, w, jax.random.fold_in(key, i))
      h = h + (tok % 2).astype(h.dtype)[:, None] * 1e-3   # the next draw waits for this one
      return h, toks.at[i].set(tok)
    return jax.lax.fori_loop(0, iters, body, (h, jnp.zeros((iters, h.shape[0]), jnp.int32)))

  jax.block_until_ready(loop(h, w, jax.random.key(0)))
  times = []
  for r in range(repeats):
    t = time.perf_counter()
    jax.block_until_ready(loop(h, w, jax.random.key(r)))
    times.append(time.perf_counter() - t)
  return statistics.median(times) / iters * 1e6


def main(argv=None) -> int:
  a = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawTextHelpFormatter)
  a.add_argument("--widths", default="896,3584", help="hidden sizes (Qwen2.5 0.5B: 896, 7B: 3584)")
  a.add_argument("--batch", type=int, default=256)
  a.add_argument("--vocab", type=int, default=151_936)
  a.add_argument("--sampling", default="t1,greedy", help=f"comma list of {list(SAMPLING)}")
  a.add_argument("--grid", default="sweep", choices=sorted(GRIDS))
  a.add_argument("--dtype", default="bfloat16")
  a.add_argument("--iters", type=int, default=20)
  a.add_argument("--repeats", type=int, default=5)
  args = a.parse_args(argv)
  dtype = jnp.dtype(args.dtype)
  for D in (int(x) for x in args.widths.split(",")):
    kh, kw = jax.random.split(jax.random.key(D))
    h = jax.random.normal(kh, (args.batch, D), jnp.float32).astype(dtype)
    w = (jax.random.normal(kw, (D, args.vocab), jnp.float32) * (3.0 / np.sqrt(D))).astype(dtype)
    for sname in args.sampling.split(","):
      p = SAMPLING[sname]
      base = {"bench": "head_draw", "width": D, "batch": args.batch, "vocab": args.vocab,
              "sampling": sname, "device": jax.devices()[0].device_kind}
      ref = jax.jit(_draw("xla", p, {}))(h, w, jax.random.key(1))
      us = time_draw(_draw("xla", p, {}), h, w, args.iters, args.repeats)
      print(json.dumps({**base, "impl": "xla", "us_per_draw": round(us, 1)}), flush=True)
      lines = []
      for knobs in GRIDS[args.grid]:
        line = {**base, "impl": "fused", **knobs, "default": knobs == DEFAULT}
        try:
          got = jax.jit(_draw("fused", p, knobs))(h, w, jax.random.key(1))
          us = time_draw(_draw("fused", p, knobs), h, w, args.iters, args.repeats)
        except Exception as e:  # noqa: BLE001 - reported, the other settings still run
          line["error"] = f"{type(e).__name__}: {str(e)[:200]}"
          print(json.dumps(line), flush=True)
          continue
        line.update(us_per_draw=round(us, 1),
                    same_tokens_frac=float(jnp.mean(got[0] == ref[0])),
                    max_logprob_diff=float(jnp.max(jnp.abs(got[1] - ref[1]))))
        print(json.dumps(line), flush=True)
        lines.append(line)
      if len(lines) > 1:
        print(json.dumps({**min(lines, key=lambda d: d["us_per_draw"]),
                          "bench": "head_draw_best"}), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
