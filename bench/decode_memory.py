"""Compiled memory of the jitted decode loop at a model shape, with abstract inputs (no arrays).

  python bench/decode_memory.py --preset qwen2.5-7b --batch 256 --cache-len 1665 \
      --decode-attention einsum,einsum_readonly --dtype float32     # CPU, a minute, no GPU

Lowers and compiles `sampling.decode` (the engine's while_loop over 256 steps) on the default
backend from `jax.ShapeDtypeStruct` inputs and prints one JSON line per decode attention with
`compiled.memory_analysis()`: `temp_bytes` (the executable's scratch, what XLA must allocate on
top of its arguments), `argument_bytes`, `alias_bytes` (donated cache reused in place) and the
cache size. On CPU use --dtype float32: XLA's CPU backend widens a bf16 scatter into a float32
copy of the whole cache, a CPU artifact that a GPU does not have, while float32 keeps the
program's structure with every buffer twice its bf16 size.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp

import models
from ssp_jax import sampling as S


def decode_memory(cfg, B: int, cache_len: int, dtype, attn: str, steps: int) -> dict:
  sds = jax.ShapeDtypeStruct
  params = jax.tree.map(lambda s: sds(s, dtype), models.param_shapes(cfg),
                        is_leaf=lambda t: isinstance(t, tuple))
  dparams = jax.eval_shape(lambda p: S.decode_params(cfg, p, dtype), params)
  host = S.build_stop_tables([b"x"] * cfg.vocab_size, ["</search>"])
  tables = S.StopTables(*(sds(getattr(host, f).shape, getattr(host, f).dtype)
                          for f in S.StopTables._fields))
  st = jax.eval_shape(lambda: S.init_state(cfg, B, cache_len, tables.prefix_VM.shape[1], dtype))
  t0 = time.perf_counter()
  compiled = S.decode.lower(
      cfg, st, dparams, tables, sds((1,), jnp.int32), sds((B,), bool), sds((B,), jnp.int32),
      sds((), jnp.int32), jax.random.key(0), num_steps=steps, sampling=S.SamplingParams(1.0),
      dtype=dtype, attn_impl=attn).compile()
  m = compiled.memory_analysis()
  cache = 2 * cfg.num_layers * B * cache_len * cfg.num_kv_heads * cfg.head_dim * dtype.itemsize
  return {"bench": "decode_memory", "batch": B, "cache_len": cache_len, "dtype": str(dtype),
          "decode_attention": attn, "backend": jax.default_backend(),
          "compile_s": round(time.perf_counter() - t0, 1), "temp_bytes": m.temp_size_in_bytes,
          "temp_gib": round(m.temp_size_in_bytes / 2**30, 3),
          "argument_bytes": m.argument_size_in_bytes, "alias_bytes": m.alias_size_in_bytes,
          "cache_bytes": cache, "temp_over_cache": round(m.temp_size_in_bytes / cache, 3)}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--preset", default="qwen2.5-7b")
  p.add_argument("--batch", type=int, default=256)
  p.add_argument("--cache-len", type=int, default=1665)
  p.add_argument("--dtype", default="float32", help="float32 on CPU (see above); bfloat16 on GPU")
  p.add_argument("--decode-attention", default="einsum,einsum_readonly")
  p.add_argument("--steps", type=int, default=256)
  a = p.parse_args(argv)
  try:
    cfg = models.get_preset(a.preset)
  except KeyError as e:
    p.error(f"--preset: {e.args[0]}")
  for attn in a.decode_attention.split(","):
    if attn not in S.ATTN_IMPLS:
      p.error(f"--decode-attention {attn!r}: use one of {', '.join(S.ATTN_IMPLS)}")
  for attn in a.decode_attention.split(","):
    line = {"model": a.preset, **decode_memory(cfg, a.batch, a.cache_len, jnp.dtype(a.dtype),
                                                attn, a.steps)}
    print(json.dumps(line), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
