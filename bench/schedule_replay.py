"""The program shapes a multi-turn paged rollout asks for, without running the model: a host-only
replay of `bench/sampler.py --multiturn`'s schedule at any slot count, on a CPU in seconds.

  python bench/schedule_replay.py --batch 256 --max-new 8192 [--kv-max-tokens N] [--attn pallas]

`sampling.decode` is replaced by random tokens (uniform over the vocabulary, as random weights
nearly are; 1/256 of them a whole search, as the synthetic tokenizer makes them) and the
prefill by a no-op, so the engine's own planning (admission, pages, table widths, tail
shrinking, prefill grouping) runs as in the benchmark and records every (program, shape) it
calls. Each distinct shape is one compile in a real run. Prints one JSON line: `shapes`
({"prefill ...": calls}), `distinct` per program, `prefill_calls` and `prefill_computed_over_real`.
Not the GPU run's exact schedule (other random tokens), the same distribution of it.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp
import numpy as np

import sampler as SB   # bench/sampler.py (this directory is on sys.path as the script's own)
from ssp_jax import sampling as S


def replay(batch: int, max_new: int, kv_max_tokens: int, attn: str, seed: int = 0) -> dict:
  rng = np.random.default_rng(seed)
  shapes: collections.Counter = collections.Counter()

  def prefill_rows(cfg, st, params, rows_R, tokens_RT, start_R, **kw):
    shapes[f"prefill_rows B={st.tok_B.shape[0]} R,T={tokens_RT.shape} C={kw.get('columns')}"] += 1
    return st

  def prefill_pages(cfg, k, v, dparams, table_PC, toks_PT, start_P, **kw):
    shapes[f"prefill_pages P,T={toks_PT.shape} C={table_PC.shape[1]}"] += 1
    return k, v

  def decode(cfg, st, dparams, tables, eos_E, active_B, limit_B, exit_after, key, *,
             num_steps, **kw):
    shapes[f"decode B={st.tok_B.shape[0]} C={st.cache['table'].shape[1]}"] += 1
    act, lim = np.asarray(active_B), np.asarray(limit_B)
    toks = rng.integers(0, cfg.vocab_size, (len(act), num_steps)).astype(np.int32)
    fin = np.full(len(act), 10 ** 9)
    why = np.zeros(len(act), np.int32)
    for b in np.nonzero(act)[0]:
      hits = np.nonzero(toks[b, :lim[b]] % 256 == 7)[0]   # SyntheticTokenizer's search ids
      fin[b], why[b] = (hits[0] + 1, S.STOPPED) if len(hits) else (lim[b], S.LIMIT)
    done = sorted(fin[act])
    ex = int(exit_after)
    steps = min(num_steps, done[ex - 1] if len(done) >= ex else num_steps)
    count = np.where(act, np.minimum(fin, steps), 0).astype(np.int32)
    reason = np.where(act & (fin <= steps), why, S.RUNNING).astype(np.int32)
    toks[np.arange(num_steps)[None, :] >= count[:, None]] = 0
    return st, S.DecodeOut(toks, np.zeros(toks.shape, np.float32), count, reason,
                           np.int32(steps))

  S.prefill_rows, S.decode = prefill_rows, decode
  if hasattr(S, "prefill_pages"):
    S.prefill_pages = prefill_pages
  jax.block_until_ready = lambda x: x    # nothing runs on the device
  SB.PAGED_ATTN = attn
  cfg = SB.TINY
  eng = SB._engine(cfg, batch, 128, max_new, jnp.float32, 512, "paged", kv_max_tokens)
  prompts = [rng.integers(0, cfg.vocab_size, 128).tolist() for _ in range(batch)]
  _, stats = eng.generate(SB._params(cfg, jnp.float32), prompts, jax.random.key(1))
  distinct = collections.Counter(k.split()[0] for k in shapes)
  for name, n in stats["compiled_functions"].items():   # what did compile (small programs)
    distinct.setdefault(name, n)
  return {"bench": "schedule_replay", "batch": batch, "max_new": max_new,
          "kv_max_tokens": kv_max_tokens, "attn": attn, "searches": stats["searches"],
          "batch_min": stats.get("batch_min"), "prefill_calls": stats["prefill_calls"],
          "prefill_computed_over_real": round(stats["prefill_computed"]
                                              / max(stats["prefill_tokens"], 1), 3),
          "distinct": dict(distinct), "shapes": dict(sorted(shapes.items()))}


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--batch", type=int, default=256)
  ap.add_argument("--max-new", type=int, default=8192)
  ap.add_argument("--kv-max-tokens", type=int, default=0)
  ap.add_argument("--attn", default="pallas", help="paged decode attention (the GPU default)")
  ap.add_argument("--seed", type=int, default=0)
  a = ap.parse_args()
  print(json.dumps(replay(a.batch, a.max_new, a.kv_max_tokens, a.attn, a.seed)))


if __name__ == "__main__":
  main()
