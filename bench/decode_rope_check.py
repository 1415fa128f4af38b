"""RoPE in the decode kernels, checked on the device: `decode_attention="pallas_rope"` (the
kernel splits the fused q/k/v projection and applies RoPE itself) against `"pallas"` (XLA's
split and RoPE, then the same kernel), for the dense and the paged layout. Prints one JSON line
per (model heads, layout, dtype): the largest absolute difference of the attention outputs and
of the K/V the kernels store, with the largest output magnitude for scale. The tests run the
same comparison in Pallas's interpret mode on a CPU (tests/test_dense_pallas.py,
tests/test_paged_pallas.py); this runs the Triton kernels the GPU compiles.

  python bench/decode_rope_check.py                       # 0.5B and 7B heads, bf16 and fp32
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp
import numpy as np

from models import layers as L_
from ssp_jax.sampling import dense_pallas as DP
from ssp_jax.sampling import paged_pallas as PP

SHAPES = {"0.5b": (2, 7, 64), "7b": (4, 7, 128), "tiny": (2, 3, 16)}   # K, G, H


def _diff(a, b) -> float:
  return float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))))


def check(name: str, layout: str, dtype, B: int, S: int, page: int = 64, seed: int = 0) -> dict:
  K, G, H = SHAPES[name]
  N = K * G
  r = np.random.default_rng(seed)
  interpret = jax.default_backend() == "cpu"
  qkv = jnp.asarray(r.normal(size=(B, N + 2 * K, H)), dtype)
  pos = jnp.asarray(r.integers(0, S, size=B), jnp.int32)
  cos, sin = L_.rope_cos_sin(pos[:, None], L_.rope_inv_freq(H, 1e6, None), dtype)
  cos, sin = cos[:, 0], sin[:, 0]
  q, kn, vn = DP.split_rope(qkv, cos, sin, N)
  if layout == "dense":
    k, v = (jnp.asarray(r.normal(size=(B, K, S, H)), dtype) for _ in range(2))
    want = DP.dense_attention_write(q, k, v, pos, kn, vn, interpret=interpret)
    got = DP.dense_attention_write_qkv(qkv, cos, sin, k, v, pos, num_heads=N,
                                       interpret=interpret)
  else:
    C = S // page
    P = B * C + 1
    kp, vp = (jnp.asarray(r.normal(size=(K, P, page, H)), dtype) for _ in range(2))
    table = jnp.asarray(1 + r.permutation(B * C).reshape(B, C), jnp.int32)
    want = PP.paged_attention_write(q, kp, vp, table, pos, kn, vn, interpret=interpret)
    got = PP.paged_attention_write_qkv(qkv, cos, sin, kp, vp, table, pos, num_heads=N,
                                       interpret=interpret)
  return {"bench": "decode_rope_check", "model_heads": name, "layout": layout,
          "dtype": jnp.dtype(dtype).name, "batch": B, "slots": S,
          "device": jax.devices()[0].device_kind,
          "max_abs_diff_out": _diff(got[0], want[0]), "max_abs_out": _diff(want[0], 0 * want[0]),
          "max_abs_diff_k": _diff(got[1], want[1]), "max_abs_diff_v": _diff(got[2], want[2]),
          "finite": bool(jnp.isfinite(got[0].astype(jnp.float32)).all())}


def main(argv=None) -> int:
  a = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawTextHelpFormatter)
  a.add_argument("--shapes", default="0.5b,7b", help=f"comma list of {sorted(SHAPES)}")
  a.add_argument("--layouts", default="dense,paged")
  a.add_argument("--dtypes", default="bfloat16,float32")
  a.add_argument("--batch", type=int, default=256)
  a.add_argument("--slots", type=int, default=512, help="cache slots a row (a multiple of 64)")
  args = a.parse_args(argv)
  for name in args.shapes.split(","):
    if name not in SHAPES:
      a.error(f"--shapes {name!r}: use one of {sorted(SHAPES)}")
    for layout in args.layouts.split(","):
      if layout not in ("dense", "paged"):
        a.error(f"--layouts {layout!r}: use dense, paged or both")
      for dt in args.dtypes.split(","):
        print(json.dumps(check(name, layout, jnp.dtype(dt), args.batch, args.slots)),
              flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
