"""The next-token choice of one decode step alone: `sample_next` with method "inverse_cdf"
(blocked: two passes over the logits, one uniform number a row; `inverse_cdf_block_max`: the
same draw with each block's mass taken from its own max, `methods.BLOCK_MAX_MASSES`, one pass
where XLA fuses it) against "gumbel" (the code it
replaced: jax.nn.logsumexp, then jax.random.categorical's Gumbel-max, a random number per
vocabulary entry), on float32 logits [B, V]. Prints one
JSON line per (implementation, sampling setting): microseconds a call (median of `--iters`
calls, each waited for), and the top-level operations of the compiled program (each one a
kernel or more on a GPU).

  python bench/sample_step.py                      # B 256, V 151,936 (Qwen2.5), T = 1
  python bench/sample_step.py --batch 64 --vocab 32000 --iters 20
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp

import dataclasses

from ssp_jax.sampling import methods as M
from ssp_jax.sampling.methods import SamplingParams, sample_next


def _ops(compiled) -> int:
  """Instructions of the compiled entry computation that launch work (fusions, custom calls,
  reductions, ...; not parameters, tuples or constants)."""
  text = compiled.as_text()
  entry = text[text.index("ENTRY"):]
  body = entry[:entry.index("\n}")]
  skip = ("parameter(", "tuple(", "get-tuple-element(", "constant(", "bitcast(")
  return sum(1 for line in body.splitlines()[1:]
             if "=" in line and not any(s in line for s in skip))


def main(argv=None) -> int:
  a = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawTextHelpFormatter)
  a.add_argument("--batch", type=int, default=256)
  a.add_argument("--vocab", type=int, default=151_936)
  a.add_argument("--iters", type=int, default=50)
  a.add_argument("--hlo-dir", default="", help="write each compiled program's HLO text here")
  args = a.parse_args(argv)
  logits = 3.0 * jax.random.normal(jax.random.key(0), (args.batch, args.vocab), jnp.float32)
  settings = {"t1": SamplingParams(1.0), "greedy": SamplingParams(0.0),
              "t0.7_topk50": SamplingParams(0.7, top_k=50)}
  for sname, p in settings.items():
    toks = {}
    for impl in ("gumbel", "inverse_cdf", "inverse_cdf_block_max"):
      q = dataclasses.replace(p, method=impl.replace("_block_max", ""))
      f = jax.jit(lambda x, k, q=q: sample_next(x, k, q))
      M.BLOCK_MAX_MASSES = impl.endswith("_block_max")    # read when f is traced, just below
      compiled = f.lower(logits, jax.random.key(1)).compile()
      M.BLOCK_MAX_MASSES = False
      if args.hlo_dir:
        os.makedirs(args.hlo_dir, exist_ok=True)
        with open(os.path.join(args.hlo_dir, f"{impl}_{sname}.hlo.txt"), "w") as fh:
          fh.write(compiled.as_text())
      out = f(logits, jax.random.key(1))
      jax.block_until_ready(out)
      toks[impl] = out[0]
      times = []
      for i in range(args.iters):
        k = jax.random.key(i)
        t0 = time.perf_counter()
        jax.block_until_ready(f(logits, k))
        times.append(time.perf_counter() - t0)
      print(json.dumps({"bench": "sample_step", "impl": impl, "sampling": sname,
                        "batch": args.batch, "vocab": args.vocab,
                        "us_per_call": round(1e6 * statistics.median(times), 1),
                        "ops": _ops(compiled), "device": jax.devices()[0].device_kind}),
            flush=True)
    # gumbel's sampled draws differ by construction (other random numbers); the two
    # inverse_cdf forms draw with the same numbers (masses equal up to fp32 rounding)
    pairs = [("inverse_cdf", "inverse_cdf_block_max")] + ([("gumbel", "inverse_cdf")]
                                                         if p.greedy else [])
    for a_, b_ in pairs:
      same = float(jnp.mean(toks[a_] == toks[b_]))
      print(json.dumps({"bench": "sample_step", "sampling": sname, "pair": [a_, b_],
                        "same_tokens_frac": same}), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
