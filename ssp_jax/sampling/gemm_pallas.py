"""The decode step's layer GEMMs at few rows (Pallas; Triton on GPUs), split over K.

At T = 1 a layer's four GEMMs have M = rows (256 at most in the engine) against weights of
millions of entries: each is near the ridge of FLOPs against bytes (M flops per weight byte
at bf16), and cuBLAS picks small output tiles. In the 0.5B single-turn profile on an H100
(2026-12-07, docs/results/issue26_h100_2026-12-07_fifth/hd_trace.jsonl) the GEMM with 64 x 32
tiles and a residual epilogue, by its shape the down projection (K = 4,864, N = 896, so 112
programs each running 76 serial K steps), took 10.2 us a layer: 0.85 TB/s of weights. This
kernel tiles the output [block_m, block_n] and also splits K into `splits` shares, so a
short-and-wide GEMM still fills every SM:

  * grid (M / block_m, N / block_n, splits); a program accumulates its tile over its share of K
    in `block_k` steps, fp32, and writes it. With one share the output is in a's dtype (plus an
    optional residual, added in fp32 before the one rounding, as cuBLAS does when XLA folds
    `x + a @ b` into its epilogue); with several the kernel writes fp32 partial
    tiles [splits, M, N] and one small XLA fusion sums them (and adds the residual).
  * `swiglu=True` (the gate/up GEMM over `_fuse_layer`'s [D, 2F] weight): a program
    accumulates the gate tile and the matching up tile and writes silu(gate) * up [M, F], so
    the [M, 2F] projection never reaches HBM (one share only: silu is not linear).
  * `norm_K` (the RMSNorm before q/k/v and before the MLP): a program first reads its rows for
    their sum of squares, then normalises each K block as it loads it, so the normed
    activations never reach HBM either (one share only). `bias_N` (q/k/v) in the epilogue.
With norms, swiglu and residuals inside, a layer runs five kernels (q/k/v, attention, o, gate/up,
down) plus one small XLA sum for each GEMM whose K is split (the 0.5B defaults at 256 rows split
the o and down projections': seven), where the XLA path runs eight (two norm fusions and the SiLU multiply
besides; cuBLAS may add split-K reductions of its own).
Blocks are powers of two >= 16 that divide M, N and K / splits (`check`); rows that are not a
multiple of 16 are padded (a copy of a); knobs that do not fit raise, naming the knob. On a CPU
it runs in Pallas's interpret mode (slow, for tests). Tested against jnp.dot and
models.layers.rms_norm (tests/test_gemm_pallas.py); timed by bench/decode_gemm.py.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu


class Knobs(NamedTuple):
  block_m: int = 64
  block_n: int = 64
  block_k: int = 64
  splits: int = 1
  num_warps: int = 4
  num_stages: int = 3


def _pow2(x: int) -> bool:
  return x > 0 and x & (x - 1) == 0


def check(M: int, K: int, N: int, kn: Knobs, swiglu: bool = False) -> Knobs:
  """kn with block_m clipped to M; raises ValueError naming the knob that does not fit."""
  kn = kn._replace(block_m=min(kn.block_m, M))
  for name in ("block_m", "block_n", "block_k"):
    if not _pow2(getattr(kn, name)) or getattr(kn, name) < 16:
      raise ValueError(f"gemm knob {name}={getattr(kn, name)}: must be a power of two >= 16")
  if M % kn.block_m:
    raise ValueError(f"gemm knob block_m={kn.block_m}: must divide the {M} rows")
  if N % kn.block_n:
    raise ValueError(f"gemm knob block_n={kn.block_n}: must divide N = {N}")
  if kn.splits < 1 or K % kn.splits or (K // kn.splits) % kn.block_k:
    raise ValueError(f"gemm knobs splits={kn.splits}, block_k={kn.block_k}: K = {K} must split "
                     "into shares that are multiples of block_k")
  if swiglu and kn.splits != 1:
    raise ValueError("gemm knob splits must be 1 with swiglu (silu is not linear)")
  return kn


def _pow2_divisor(x: int, cap: int = 64) -> int:
  """The largest power of two <= cap dividing x."""
  d = cap
  while x % d:
    d //= 2
  return d


def default_knobs(M: int, K: int, N: int, one_share: bool = False) -> Knobs:
  """Tiles of up to 64 rows and 64 columns, K steps up to 64 deep (the largest powers of two
  dividing M, N and K), 4 warps, 4 stages. Where fewer than 132 programs (an H100's or H200's
  SMs) would run: with one share (swiglu, a norm), 32-column tiles; else K is split in two,
  four or eight while fewer than 264 programs (two per SM) would run and the shares stay at
  least 256 deep. On one H100 (2026-12-08, bench/decode_gemm.py, Qwen2.5-0.5B at 256 rows) the
  o projection (K = 896) took 6.7 us split in two against 9.2-9.4 unsplit with 32-column tiles
  (the rule before); the down projection's default (four shares) 17.1-19.0 against the sweep's
  best 16.2; q/k/v and gate/up (one share, a norm) 1.7-2x slower than XLA's norm and cuBLAS
  whatever the knobs (rollout.decode_matmul "pallas_residual" leaves them to XLA)."""
  kn = Knobs(block_m=_pow2_divisor(M), block_n=_pow2_divisor(N), block_k=_pow2_divisor(K),
             splits=1, num_warps=4, num_stages=4)
  programs = (M // kn.block_m) * (N // kn.block_n)
  if one_share:
    if programs < 132 and kn.block_n == 64:
      kn = kn._replace(block_n=32)
    return kn
  splits = 1
  while (programs * splits < 264 and splits < 8 and K % (2 * splits * kn.block_k) == 0
         and K // (2 * splits) >= 256):
    splits *= 2
  return kn._replace(splits=splits)


def eligible(M: int, K: int, N: int, swiglu: bool = False) -> bool:
  """Whether the kernel covers the shape: K and N (each half with swiglu) multiples of 16 (the
  smallest Triton dot); any M (rows are padded to a multiple of 16)."""
  if swiglu and N % 2:
    return False
  n = N // 2 if swiglu else N
  return M > 0 and K % 16 == 0 and n % 16 == 0


def _kernel(*refs, block_k: int, steps: int, swiglu: bool, norm_eps: float | None,
            bias: bool, residual: bool, exact: bool):
  """refs: a_ref [bm, Ks], b_ref [Ks, bn] (or [Ks, 2, bn] with swiglu: gate and up columns),
  then g_ref [K] (norm_eps set), bias_ref [bn], residual_ref [bm, bn] where given, o_ref."""
  a_ref, b_ref, *rest = refs
  o_ref = rest.pop()
  g_ref = rest.pop(0) if norm_eps is not None else None
  bias_ref = rest.pop(0) if bias else None
  res_ref = rest.pop(0) if residual else None
  bm = a_ref.shape[0]
  bn = o_ref.shape[-1]
  dt = a_ref.dtype
  prec = lax.Precision.HIGHEST if exact else None

  def dot(a, b):
    return lax.dot_general(a, b, (((1,), (0,)), ((), ())), precision=prec,
                           preferred_element_type=jnp.float32)

  def chunk(i):
    return pl.ds(pl.multiple_of(i * block_k, block_k), block_k)

  if g_ref is not None:   # RMSNorm of the rows first: a pass over them for the statistics
    def sumsq(i, ss):
      a = a_ref[:, chunk(i)].astype(jnp.float32)
      return ss + jnp.sum(a * a, axis=1)
    ss = lax.fori_loop(0, steps, sumsq, jnp.zeros((bm,), jnp.float32))
    inv = lax.rsqrt(ss / (steps * block_k) + norm_eps)[:, None]

  def body(i, accs):
    sl = chunk(i)
    a = a_ref[:, sl]
    if g_ref is not None:   # as models.layers.rms_norm: scale in fp32, round, times the weight
      a = g_ref[sl].astype(dt)[None, :] * (a.astype(jnp.float32) * inv).astype(dt)
    if swiglu:
      return accs[0] + dot(a, b_ref[sl, 0, :]), accs[1] + dot(a, b_ref[sl, 1, :])
    return (accs[0] + dot(a, b_ref[sl, :]),)

  zero = jnp.zeros((bm, bn), jnp.float32)
  accs = lax.fori_loop(0, steps, body, (zero, zero) if swiglu else (zero,))
  out = accs[0]
  if swiglu:
    out = jax.nn.silu(out) * accs[1]
  if bias_ref is not None:
    out = out + bias_ref[...].astype(jnp.float32)[None, :]
  if res_ref is not None:
    out = out + res_ref[...].astype(jnp.float32)
  o_ref[...] = out.astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("knobs", "swiglu", "norm_eps", "interpret"))
def matmul(a_MK: jax.Array, b_KN: jax.Array, residual_MN: jax.Array | None = None, *,
           bias_N: jax.Array | None = None, norm_K: jax.Array | None = None,
           norm_eps: float = 1e-6, knobs: Knobs | None = None, swiglu: bool = False,
           interpret: bool = False) -> jax.Array:
  """a_MK @ b_KN (+ bias_N) (+ residual_MN) in a's dtype, fp32 accumulation.
  norm_K: the rows of a go through `models.layers.rms_norm(a, norm_K, norm_eps)` first (the
    same rounding: statistics and scale in fp32, rounded, times the weight), inside the kernel
    (a first pass over each program's rows; one share only: a program needs whole rows).
  swiglu: b_KN is [K, 2F] (gate columns, then up) and the result is silu(a @ gate) * (a @ up)
    [M, F] (no bias or residual). knobs: None = `default_knobs`.
  Rounding: the XLA path rounds the q/k/v GEMM before adding its bias and the gate/up GEMM
  before SiLU; here each result is rounded once, at the end."""
  M, K = a_MK.shape
  N2 = b_KN.shape[1]
  N = N2 // 2 if swiglu else N2
  if swiglu and (residual_MN is not None or bias_N is not None):
    raise ValueError("gemm: swiglu takes no residual or bias")
  if M % 16:   # Triton's dots take >= 16 rows: pad them (zero rows; sliced off)
    pad = lambda x: None if x is None else jnp.pad(x, ((0, -M % 16), (0, 0)))
    out = matmul(pad(a_MK), b_KN, pad(residual_MN), bias_N=bias_N, norm_K=norm_K,
                 norm_eps=norm_eps, knobs=knobs, swiglu=swiglu, interpret=interpret)
    return out[:M]
  norm = norm_K is not None
  if knobs is None:
    knobs = default_knobs(M, K, N, swiglu or norm)
  kn = check(M, K, N, knobs, swiglu)
  if norm and kn.splits != 1:
    raise ValueError("gemm knob splits must be 1 with a norm (a program needs whole rows)")
  share = K // kn.splits
  grid = (M // kn.block_m, N // kn.block_n, kn.splits)
  b = b_KN.astype(a_MK.dtype)
  if swiglu:   # [K, 2, F]: a program's gate and up columns are one block
    b = b.reshape(K, 2, N)
    b_spec = pl.BlockSpec((share, 2, kn.block_n), lambda i, j, s: (s, 0, j))
  else:
    b_spec = pl.BlockSpec((share, kn.block_n), lambda i, j, s: (s, j))
  in_specs = [pl.BlockSpec((kn.block_m, share), lambda i, j, s: (i, s)), b_spec]
  args = [a_MK, b]
  if norm:
    in_specs.append(pl.BlockSpec((K,), lambda i, j, s: (0,)))
    args.append(norm_K)
  one = kn.splits == 1   # else bias and residual join the XLA sum of the shares
  if bias_N is not None and one:
    in_specs.append(pl.BlockSpec((kn.block_n,), lambda i, j, s: (j,)))
    args.append(bias_N)
  if residual_MN is not None and one:
    in_specs.append(pl.BlockSpec((kn.block_m, kn.block_n), lambda i, j, s: (i, j)))
    args.append(residual_MN)
  if one:
    out_shape = jax.ShapeDtypeStruct((M, N), a_MK.dtype)
    out_spec = pl.BlockSpec((kn.block_m, kn.block_n), lambda i, j, s: (i, j))
  else:
    out_shape = jax.ShapeDtypeStruct((kn.splits, M, N), jnp.float32)
    out_spec = pl.BlockSpec((None, kn.block_m, kn.block_n), lambda i, j, s: (s, i, j))
  out = pl.pallas_call(
      functools.partial(_kernel, block_k=kn.block_k, steps=share // kn.block_k, swiglu=swiglu,
                        norm_eps=norm_eps if norm else None,
                        bias=bias_N is not None and one, residual=residual_MN is not None and one,
                        exact=a_MK.dtype == jnp.float32),
      grid=grid, in_specs=in_specs, out_specs=out_spec, out_shape=out_shape,
      compiler_params=plgpu.CompilerParams(num_warps=kn.num_warps, num_stages=kn.num_stages),
      interpret=interpret, name="decode_gemm_swiglu" if swiglu else "decode_gemm")(*args)
  if one:
    return out
  out = out.sum(axis=0)
  if bias_N is not None:
    out = out + bias_N.astype(jnp.float32)
  if residual_MN is not None:
    out = out + residual_MN.astype(jnp.float32)
  return out.astype(a_MK.dtype)
