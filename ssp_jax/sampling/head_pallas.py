"""The decode step's output projection and the draw's per-block statistics in one kernel
(Pallas; Triton on GPUs), so the [B, V] float32 logits never reach HBM.

The XLA path (`decode_step._logits`, then `methods.sample_next`) writes the logits, B x V
float32 (155 MB at 256 rows of Qwen2.5's 151,936), and the draw reads them back twice. Here one
program per (vocabulary block of `BLOCK` entries, tile of `rows` rows) computes its
block's logits z = h . W / T in fp32 registers and writes only their max and sum of
exp(z - max) (and, greedy, the first index of the max): [N, B] each, N = V / BLOCK. The draw
then runs on those ([B, N], 1.2 MB): the row's max and log-sum-exp, the block its uniform
number falls in (`methods.choose_block`), and that one block's logits recomputed from h and W
(`block_logits`, [B, BLOCK]) to find the entry and its log-prob (`methods.choose_in_block`).

Same distribution and the same random numbers as `sample_next(method="inverse_cdf")`; the
tokens can differ only where fp32 rounding moves a cumulative mass across the uniform number
(the kernel sums in another order than XLA's GEMM), the log-probs by fp32 rounding. Greedy
takes the first index of the row's max, as `jnp.argmax`. Not for top-k / top-p or the gumbel
method (they need the whole row): `eligible` says when it applies, else the caller takes the
XLA path. Rows are padded to a multiple of 16, a vocabulary that is not a multiple of BLOCK
with masked columns. The grid is not partitioned: unsharded decoding only. On a CPU it runs in
Pallas's interpret mode (slow, for tests); tested against the XLA path (tests/test_head_pallas.py).
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from ssp_jax.sampling import methods as M

BLOCK = M.BLOCK      # vocabulary entries a program (and a draw block)
ROWS = 256           # rows a program at most (`_rows`); 256 and 8 warps were the fastest on an
NUM_WARPS = 8        # H100 at widths 896 and 3,584 (bench/head_draw.py, 2026-12-07)


def eligible(p: M.SamplingParams, D: int) -> bool:
  """Whether the fused head covers this draw and width: inverse_cdf or greedy, no truncation,
  D a multiple of 16. Any number of rows (padded to a multiple of 16) and any vocabulary (one
  that is not a multiple of BLOCK, unlike Qwen2.5's, LLaMA-3's and SmolLM2's, has its
  projection padded with masked columns on every step: a copy of the weight)."""
  plain = p.greedy or (p.method == "inverse_cdf" and not p.top_k and p.top_p >= 1.0)
  return plain and D % 16 == 0


def _rows(B: int, rows: int) -> int:
  """Rows a program: the largest power of two <= rows that divides B (B a multiple of 16, so
  at least 16; Triton's blocks are powers of two)."""
  r = 1 << (min(rows, B).bit_length() - 1)
  while B % r:
    r //= 2
  return r


def _kernel(h_ref, w_ref, m_ref, s_ref, *a_ref, inv_t: float, chunk: int, vocab: int | None):
  """h_ref [R, D] (rows of the final hidden state), w_ref [D, BLOCK] (this block's columns of
  the output projection); writes m_ref, s_ref [R]: the max of z = h.W * inv_t and the sum of
  exp(z - max); a_ref [R] (greedy): the first column holding the max. vocab: the columns from
  this one on are padding (z = -inf); None when there are none."""
  R, D = h_ref.shape

  def body(i, acc_RK):
    sl = pl.ds(pl.multiple_of(i * chunk, chunk), chunk)
    return acc_RK + lax.dot_general(h_ref[:, sl], w_ref[sl, :], (((1,), (0,)), ((), ())),
                                    preferred_element_type=jnp.float32)

  z_RK = lax.fori_loop(0, D // chunk, body, jnp.zeros((R, BLOCK), jnp.float32))
  if inv_t != 1.0:
    z_RK = z_RK * inv_t
  if vocab is not None:
    col_RK = pl.program_id(0) * BLOCK + lax.broadcasted_iota(jnp.int32, (R, BLOCK), 1)
    z_RK = jnp.where(col_RK < vocab, z_RK, -jnp.inf)   # every block keeps a real column
  m_R = jnp.max(z_RK, axis=1)
  m_ref[...] = m_R
  s_ref[...] = jnp.sum(jnp.exp(z_RK - m_R[:, None]), axis=1)
  if a_ref:
    col_RK = lax.broadcasted_iota(jnp.int32, (R, BLOCK), 1)
    a_ref[0][...] = jnp.min(jnp.where(z_RK == m_R[:, None], col_RK, BLOCK), axis=1)


@functools.partial(jax.jit, static_argnames=("inv_t", "greedy", "interpret", "rows",
                                             "num_warps", "num_stages", "vocab"))
def block_stats(h_BD: jax.Array, w_DV: jax.Array, *, inv_t: float = 1.0, greedy: bool = False,
                interpret: bool = False, rows: int = ROWS, num_warps: int = NUM_WARPS,
                num_stages: int = 2, vocab: int | None = None) -> tuple[jax.Array, ...]:
  """(m_NB, s_NB[, a_NB]) float32 (int32): per vocabulary block n of BLOCK entries and row b,
  the max of z = (h_BD @ w_DV)[b, block n] * inv_t, the sum of exp(z - that max), and
  (greedy) the first index inside the block holding it. h and w in the compute dtype; the
  products accumulate in fp32 (as the XLA path's preferred_element_type). w's columns are a
  multiple of BLOCK; vocab: those from it on are padding (never drawn)."""
  B, D = h_BD.shape
  V = w_DV.shape[1]
  N = V // BLOCK
  R = _rows(B, rows)
  chunk = math.gcd(D, 128)
  out = jax.ShapeDtypeStruct((N, B), jnp.float32)
  out_shape = [out, out] + ([jax.ShapeDtypeStruct((N, B), jnp.int32)] if greedy else [])
  out_spec = pl.BlockSpec((None, R), lambda n, b: (n, b))
  return tuple(pl.pallas_call(
      functools.partial(_kernel, inv_t=inv_t, chunk=chunk, vocab=vocab),
      grid=(N, B // R),   # a block's row tiles run next to each other: its columns from L2
      in_specs=[pl.BlockSpec((R, D), lambda n, b: (b, 0)),
                pl.BlockSpec((D, BLOCK), lambda n, b: (0, n))],
      out_specs=[out_spec] * len(out_shape), out_shape=out_shape,
      compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages),
      interpret=interpret, name="head_block_stats")(h_BD, w_DV))


def block_logits(h_BD: jax.Array, w_DV: jax.Array, j_B: jax.Array, inv_t: float,
                 vocab: int | None = None) -> jax.Array:
  """[B, BLOCK] float32: row b's logits over vocabulary block j_B[b], times inv_t (reads each
  row's D x BLOCK columns of w: 58 MB at 256 rows of a 896-wide model); columns from `vocab`
  on (padding) are -inf."""
  D, V = w_DV.shape
  w_DBK = jnp.take(w_DV.reshape(D, V // BLOCK, BLOCK), j_B, axis=1)
  z_BK = jnp.einsum("BD,DBK->BK", h_BD, w_DBK, preferred_element_type=jnp.float32)
  z_BK = z_BK * inv_t if inv_t != 1.0 else z_BK
  if vocab is not None:
    col_BK = j_B[:, None] * BLOCK + jnp.arange(BLOCK, dtype=jnp.int32)[None, :]
    z_BK = jnp.where(col_BK < vocab, z_BK, -jnp.inf)
  return z_BK


def sample_from_hidden(h_BD: jax.Array, w_DV: jax.Array, key: jax.Array, p: M.SamplingParams,
                       *, interpret: bool | None = None, **knobs) -> tuple[jax.Array, jax.Array]:
  """(token_B int32, logprob_B float32) as `methods.sample_next(h_BD @ w_DV in fp32, key, p)`
  (see the module docstring for where they may differ); `eligible(p, ...)` must hold."""
  B, D = h_BD.shape
  V = w_DV.shape[1]
  if not eligible(p, D):
    raise ValueError(f"the fused head does not cover sampling {p} at width {D}")
  if interpret is None:
    interpret = jax.default_backend() == "cpu"
  inv_t = 1.0 if p.greedy else 1.0 / p.temperature
  vocab = V if V % BLOCK else None
  if vocab is not None:
    w_DV = jnp.pad(w_DV, ((0, 0), (0, -V % BLOCK)))
  hp_BD = jnp.pad(h_BD, ((0, -B % 16), (0, 0)))   # the kernel's row tiles: multiples of 16
  stats = block_stats(hp_BD, w_DV, inv_t=inv_t, greedy=p.greedy, interpret=interpret,
                      vocab=vocab, **knobs)
  stats = [x[:, :B] for x in stats]
  mb_BN, s_BN = stats[0].T, stats[1].T
  m_B = jnp.max(mb_BN, axis=-1)
  e_BN = s_BN * jnp.exp(mb_BN - m_B[:, None])
  if p.greedy:
    total_B = jnp.sum(e_BN, axis=-1)
    j_B = jnp.argmax(mb_BN, axis=-1).astype(jnp.int32)   # first block holding the max
    i_B = jnp.take_along_axis(stats[2].T, j_B[:, None], axis=1)[:, 0]
    return j_B * BLOCK + i_B, -jnp.log(total_B)          # z[tok] = m: logprob = -log(total)
  u_B = jax.random.uniform(key, (B,), jnp.float32)
  j_B, left_B, total_B = M.choose_block(e_BN, u_B)
  zj_BK = block_logits(h_BD, w_DV, j_B, inv_t, vocab)
  i_B = M.choose_in_block(zj_BK, m_B, left_B)
  picked_B = jnp.take_along_axis(zj_BK, i_B[:, None], axis=1)[:, 0]
  return j_B * BLOCK + i_B, picked_B - (m_B + jnp.log(total_B))
