"""Fused single-query decode attention over the paged KV cache (Pallas; Triton on GPUs).

`decode_forward` on the paged layout with `attn_impl="pallas"` (sampling/paged.py: per-layer
pools [K, P, T, H], a page table [B, C]). The earlier path, kept as `attn_impl="pallas_jax"`,
scatters the new token's K/V into the pools (two scatter kernels a layer), then calls JAX's
library kernel (`jax.experimental.pallas.ops.gpu.paged_attention`): q padded to 16 heads, the
table split into up to 16 partitions whatever the batch, each writing a bf16 partial output,
then a combine of the partitions in XLA (several small kernels a layer). This kernel is the
dense one (sampling/dense_pallas.py) reading through the page table:

  * grid (B, K, splits): one program per (row, KV head, share of the table's columns). The G
    query heads of a KV head are one [Gp, H] tile (Gp = G padded to a power of two >= 16: Triton
    dots need M >= 16). q is scaled by 1/sqrt(H) and cast to the pool dtype outside.
  * each program loops over its columns in blocks of `pages` pages (pages x T slots, T the page
    size; up to MAX_BLOCK slots), gathering the blocks' pages through the row's table, with a
    dynamic trip count that stops at the block holding the slot before pos_B[b]: a row reads its
    own slots only. Slots >= pos_B in that block get score -inf and V zero (unwritten slots and
    the null page may hold anything, NaN included).
  * the query token's K/V come as inputs: the loop reads slots before pos only, the new token
    joins the online softmax from registers, and the program whose share holds column
    pos // T stores it at (table[b, pos // T], pos % T) of the pools (aliased: updated in place,
    no scatter kernels). A position past the table (C * T slots) is neither stored nor attended,
    as writing it to the null page and attending over the table would do.
  * splits: with few (row, head) programs (the tail batch, long rows) the columns are split
    into `splits` shares until there are MIN_PROGRAMS programs, each writing an unnormalised
    o, m, l that a small JAX combine rescales; with one share (256 rows of 4 KV heads) the
    kernel normalises and writes the output itself.
  * `paged_attention_write_qkv` (`decode_attention="pallas_rope"`): the layer's fused q/k/v
    projection and the rows' RoPE cos/sin in place of q, k, v (`DP.rope_inputs`, as in the
    dense kernel).
Unlike the dense kernel, programs of different rows write the same pool buffers: each writes
the one slot its row owns, which no other row reads (pages are never shared between rows; the
null page is never read unmasked). On a CPU it runs in Pallas's interpret mode
(`interpret=True`; slow, for tests). The grid is not partitioned: unsharded decoding only.
Tested against the gather path (tests/test_paged_pallas.py).
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from ssp_jax.sampling import dense_pallas as DP

MIN_PROGRAMS = 1024  # split the columns until B * K * splits reaches this (tuned on one H100)
MAX_BLOCK = 128      # slots per loop iteration (at most; at least one page)


def _kernel(pos_ref, table_ref, *refs, pages: int, exact: bool, rope: tuple | None,
            direct_rows: int | None = None):
  """pos_ref [1] (the query token's position); table_ref [share] (this program's columns of
  the row's table); then q_ref [Gp, H], k_ref, v_ref [P, T, H] (one KV head's pools), kn_ref,
  vn_ref [H] (the query token's K/V), the output(s) (out [Gp, H] normalised, or o [Gp, H],
  m [Gp], l [Gp]), and k_out, v_out [P, T, H] (aliased to k_ref, v_ref).
  rope = (num_heads, Gp): qkv_ref [N + 2K, H], cos_ref, sin_ref [H] come in place of q_ref,
  and kn_ref, vn_ref are not passed (`DP.rope_inputs` computes q, k, v)."""
  if rope is not None:
    qkv_ref, cos_ref, sin_ref, k_ref, v_ref, *out_refs, k_out, v_out = refs
    q_GH, kn_H, vn_H = DP.rope_inputs(qkv_ref, cos_ref, sin_ref, *rope, k_ref.dtype)
  else:
    q_ref, k_ref, v_ref, kn_ref, vn_ref, *out_refs, k_out, v_out = refs
    q_GH = q_ref[...]
  Gp, H = q_GH.shape
  T = k_ref.shape[1]
  share = table_ref.shape[0]
  block = pages * T
  start = pl.program_id(2) * share * T                 # first slot of this share
  pos = pos_ref[0]
  n_valid = jnp.minimum(pos - start, share * T)        # slots of this share < pos (may be <= 0)
  trips = jnp.maximum((n_valid + block - 1) // block, 0)

  def body(i, carry):
    o_GH, m_G, l_G = carry
    page_P = table_ref[pl.ds(pl.multiple_of(i * pages, pages), pages)]
    k_TH = k_ref[page_P].reshape(block, H)
    v_TH = v_ref[page_P].reshape(block, H)
    s_GT = DP._dot(q_GH, k_TH, 1, exact)                      # [Gp, block] fp32
    slot_T = start + i * block + lax.broadcasted_iota(jnp.int32, (block,), 0)
    ok_T = slot_T < pos
    s_GT = jnp.where(ok_T[None, :], s_GT, -jnp.inf)
    m_new = jnp.maximum(m_G, jnp.max(s_GT, axis=1))        # finite: the block's first slot < pos
    alpha_G = jnp.exp(m_G - m_new)
    p_GT = jnp.exp(s_GT - m_new[:, None])
    v_TH = jnp.where(ok_T[:, None], v_TH, jnp.zeros((), v_TH.dtype))   # stale: 0 * NaN
    o_GH = alpha_G[:, None] * o_GH + DP._dot(p_GT.astype(v_TH.dtype), v_TH, 0, exact)
    return o_GH, m_new, alpha_G * l_G + jnp.sum(p_GT, axis=1)

  init = (jnp.zeros((Gp, H), jnp.float32), jnp.full((Gp,), -jnp.inf, jnp.float32),
          jnp.zeros((Gp,), jnp.float32))
  o_GH, m_G, l_G = lax.fori_loop(0, trips, body, init)

  col = pos // T - pl.program_id(2) * share            # pos's column within this share
  mine = (col >= 0) & (col < share)
  if rope is None:
    kn_H, vn_H = kn_ref[...], vn_ref[...]
  o_GH, m_G, l_G = DP.add_token(q_GH, kn_H, vn_H, mine, o_GH, m_G, l_G)

  @pl.when(mine)
  def _store():
    # the page of pos's column: a masked sum over the share's table (no scalar gather needed)
    cols = lax.broadcasted_iota(jnp.int32, (share,), 0)
    page = jnp.sum(jnp.where(cols == col, table_ref[...], 0))
    slot = (pl.ds(page, 1), pl.ds(pos % T, 1), slice(None))
    k_out[slot] = kn_H[None, None, :].astype(k_out.dtype)
    v_out[slot] = vn_H[None, None, :].astype(v_out.dtype)

  DP.store_out(out_refs, o_GH, m_G, l_G, direct_rows)


def default_knobs(H: int) -> tuple[int, int, int]:
  """(num_warps, num_stages, max_block) of the decode steps' calls at head size H: 4 warps, 2
  stages, MAX_BLOCK slots (tuned on one H100). bench/paged_attention.py --sweep on an H200
  (2026-12-07) found 2 warps, 2 stages, 64-slot blocks 7-38% faster alone at three of four
  Qwen2.5 shapes, not yet timed in the loop (bench/sampler.py --paged-knobs replaces this for a
  process)."""
  del H
  return 4, 2, MAX_BLOCK


def block_pages(share: int, page_size: int, max_block: int = MAX_BLOCK) -> int:
  """Pages a loop iteration reads: up to max_block slots, dividing the share's columns."""
  return math.gcd(share, max(1, max_block // page_size))


def choose_splits(B: int, K: int, C: int, min_programs: int = MIN_PROGRAMS) -> int:
  """Powers of two dividing the C columns, while B * K * splits < min_programs."""
  splits = 1
  while B * K * splits < min_programs and C % (2 * splits) == 0:
    splits *= 2
  return splits


def paged_attention_write(q_BKGH: jax.Array, kp_KPTH: jax.Array, vp_KPTH: jax.Array,
                          table_BC: jax.Array, pos_B: jax.Array, k_BKH: jax.Array,
                          v_BKH: jax.Array, *, interpret: bool = False,
                          splits: int | None = None, num_warps: int | None = None,
                          num_stages: int | None = None, max_block: int | None = None,
                          min_programs: int = MIN_PROGRAMS,
                          direct_out: bool | None = None
                          ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(attention [B, K, G, H] in q's dtype, k pools, v pools): softmax over the slots before
  pos_B[b] of row b's pages plus the query token's own k/v (k_BKH, v_BKH), in fp32, which the
  kernel also stores at (table[b, pos // T], pos % T) of the pools (aliased, in place). Same
  math as writing the token first and attending over slots <= pos_B (the gather path).
  splits: None = `choose_splits` (to min_programs); else a divisor of the C columns. max_block:
  slots a loop iteration reads at most (at least one page). num_warps, num_stages: Triton's.
  Knobs left None: `default_knobs`."""
  num_warps, num_stages, max_block = _knobs(kp_KPTH.shape[3], num_warps, num_stages, max_block)
  return _paged_attention(q_BKGH, kp_KPTH, vp_KPTH, table_BC, pos_B,
                          k_BKH.astype(kp_KPTH.dtype), v_BKH.astype(vp_KPTH.dtype),
                          interpret=interpret, splits=splits, num_warps=num_warps,
                          num_stages=num_stages, max_block=max_block, min_programs=min_programs,
                          direct_out=DP.direct_out_or_default(direct_out))


def paged_attention_write_qkv(qkv_BRH: jax.Array, cos_BH: jax.Array, sin_BH: jax.Array,
                              kp_KPTH: jax.Array, vp_KPTH: jax.Array, table_BC: jax.Array,
                              pos_B: jax.Array, *, num_heads: int, interpret: bool = False,
                              splits: int | None = None, num_warps: int | None = None,
                              num_stages: int | None = None, max_block: int | None = None,
                              min_programs: int = MIN_PROGRAMS, direct_out: bool | None = None
                              ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """`paged_attention_write` from the layer's fused q/k/v projection qkv_BRH [B, N + 2K, H]
  (bias added, no RoPE yet) and the rows' RoPE cos_BH, sin_BH [B, H]: the kernel splits the
  heads, applies RoPE and the 1/sqrt(H) scale itself (`DP.rope_inputs`), so no XLA kernel runs
  between the projection's GEMM and it. Returns attention [B, K, G, H] in qkv's dtype."""
  num_warps, num_stages, max_block = _knobs(kp_KPTH.shape[3], num_warps, num_stages, max_block)
  return _paged_attention(qkv_BRH, kp_KPTH, vp_KPTH, table_BC, pos_B, cos_BH, sin_BH,
                          interpret=interpret, splits=splits, num_warps=num_warps,
                          num_stages=num_stages, max_block=max_block, min_programs=min_programs,
                          num_heads=num_heads, direct_out=DP.direct_out_or_default(direct_out))


def _knobs(H: int, num_warps, num_stages, max_block) -> tuple[int, int, int]:
  """The given knobs, `default_knobs(H)`'s where None (read at each call, outside jit)."""
  nw, ns, mb = default_knobs(H)
  return (nw if num_warps is None else num_warps, ns if num_stages is None else num_stages,
          mb if max_block is None else max_block)


@functools.partial(jax.jit, static_argnames=("interpret", "splits", "num_warps", "num_stages",
                                             "max_block", "min_programs", "num_heads",
                                             "direct_out"))
def _paged_attention(q_BKGH, kp_KPTH, vp_KPTH, table_BC, pos_B, kn_BKH, vn_BKH, *,
                     interpret: bool, splits: int | None, num_warps: int, num_stages: int,
                     max_block: int, min_programs: int, num_heads: int | None = None,
                     direct_out: bool = False):
  """The pallas_call of both: q_BKGH, kn_BKH, vn_BKH the scaled-later query and the token's
  K/V, or, with num_heads, the fused projection [B, N + 2K, H] and RoPE's cos, sin [B, H]."""
  rope = num_heads is not None
  K, P, T, H = kp_KPTH.shape
  B = q_BKGH.shape[0]
  G = num_heads // K if rope else q_BKGH.shape[2]
  C = table_BC.shape[1]
  if C & (C - 1):   # Triton loads need power-of-two sizes (the engine's tables always are)
    raise ValueError(f"the page table has {C} columns; the paged Pallas kernel needs a power of "
                     f"two: pad it with null-page (0) columns to {pl.next_power_of_2(C)}")
  splits = choose_splits(B, K, C, min_programs) if splits is None else splits
  if C % splits:
    raise ValueError(f"splits={splits}: must divide the table's {C} columns")
  share = C // splits
  pages = block_pages(share, T, max_block)
  Gp = max(16, pl.next_power_of_2(G))
  pos_B1 = pos_B.astype(jnp.int32).reshape(B, 1)
  pool_spec = pl.BlockSpec((None, P, T, H), lambda b, h, j: (h, 0, 0, 0))
  in_specs = [pl.BlockSpec((None, 1), lambda b, h, j: (b, 0)),
              pl.BlockSpec((None, share), lambda b, h, j: (b, j))]
  if rope:
    args = (pos_B1, table_BC.astype(jnp.int32), q_BKGH, kn_BKH, vn_BKH, kp_KPTH, vp_KPTH)
    in_specs += DP.rope_in_specs(q_BKGH.shape[1], H) + [pool_spec, pool_spec]
    pools = (5, 6)
  else:
    q_BKGH_ = (q_BKGH / math.sqrt(H)).astype(kp_KPTH.dtype)
    q_BKGH_ = jnp.pad(q_BKGH_, ((0, 0), (0, 0), (0, Gp - G), (0, 0)))
    args = (pos_B1, table_BC.astype(jnp.int32), q_BKGH_, kp_KPTH, vp_KPTH, kn_BKH, vn_BKH)
    in_specs += [pl.BlockSpec((None, None, Gp, H), lambda b, h, j: (b, h, 0, 0)),
                 pool_spec, pool_spec,
                 pl.BlockSpec((None, None, H), lambda b, h, j: (b, h, 0)),
                 pl.BlockSpec((None, None, H), lambda b, h, j: (b, h, 0))]
    pools = (3, 4)
  direct_rows = G if direct_out and splits == 1 else None
  out_shape, out_specs = DP.out_blocks(B, K, splits, Gp, H, q_BKGH.dtype, direct_rows)
  out_shape += [jax.ShapeDtypeStruct(kp_KPTH.shape, kp_KPTH.dtype),
                jax.ShapeDtypeStruct(vp_KPTH.shape, vp_KPTH.dtype)]
  out_specs += [pool_spec, pool_spec]
  kernel = functools.partial(_kernel, pages=pages, exact=kp_KPTH.dtype == jnp.float32,
                             rope=(num_heads, Gp) if rope else None, direct_rows=direct_rows)
  *out, kp_new, vp_new = pl.pallas_call(
      kernel, grid=(B, K, splits), in_specs=in_specs, out_specs=out_specs, out_shape=out_shape,
      input_output_aliases={pools[0]: len(out_shape) - 2, pools[1]: len(out_shape) - 1},
      compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages),
      interpret=interpret, name="paged_decode_attention")(*args)
  if direct_rows is not None:
    o = out[0].reshape(B, K, G, H)
  elif splits == 1:
    o = out[0][:, :, :G]
  else:
    o = DP.combine_shares(*out, G, q_BKGH.dtype)   # share 0 holds slot 0 (< pos, or pos)
  return o, kp_new, vp_new
