"""Fused single-query decode attention over the dense KV cache (Pallas; Triton on GPUs).

`decode_forward(attn_impl="pallas")` on the dense layout (per-layer buffers [B, K, S, H], the
current token's K/V already written at slot pos_B). The "einsum" path is a pad of q, a batched
GEMM for the scores, a softmax reduction, exp/divide fusions and a second batched GEMM: each
reads or writes [B, K, G, S] fp32 through HBM and every one reads all S slots of every row.
This kernel reads each row's K/V once, up to its own position, and keeps the scores on chip:

  * grid (B, K, splits): one program per (row, KV head, share of the slots). The G query heads
    of a KV head are one [Gp, H] tile, Gp = G padded to a power of two >= 16 (Triton dots need
    M >= 16; the padded rows are zero queries, never stored with DIRECT_OUT (`store_out`), else
    sliced off). q is scaled by 1/sqrt(H) and cast to the cache dtype outside, as
    `_cached_attention(einsum=True)` does.
  * each program loops over its share in blocks of `block` slots (gcd(share, 128): 16..128, a
    power of two dividing the share, so no load runs past it), with a dynamic trip count that
    stops at the block holding pos_B[b]: a short row in a long cache reads only its own blocks.
    Slots past pos_B in that last block get score -inf and V zero (stale slots may hold
    anything, NaN included, and never reach the output).
  * online softmax (running max m, sum l) in fp32; bf16 loads, fp32 dot accumulation; P is cast
    to the cache dtype for the P.V dot (as the einsum path casts it).
  * splits: with few (row, head) programs (small batches, long caches) the slots are split into
    `splits` shares so there are >= MIN_PROGRAMS programs; each writes its unnormalised o, m, l
    and a small JAX combine rescales them. With one share the kernel normalises and writes the
    output itself (Qwen2.5-0.5B at 256 rows: 512 programs, one share).
  * `dense_attention_write` (the decode step's): the query token's K/V come as inputs, the loop
    reads the slots before pos_B only and the new token joins the softmax from registers; the
    program whose share holds pos_B stores the K/V there after its loop (the caches are aliased
    outputs, updated in place), so the step runs no scatter kernels for them.
  * `dense_attention_write_qkv` (`decode_attention="pallas_rope"`): the layer's fused q/k/v
    projection [B, N + 2K, H] and the rows' RoPE cos/sin come in place of q, k, v: each program
    reads its KV head's rows and applies RoPE and the scale itself (`rope_inputs`), so no XLA
    kernel runs between the projection's GEMM and this one. Same math as `split_rope`, then
    `dense_attention_write`; a bf16 k may round one step apart (RoPE in fp32, rounded once).
An S that is not a multiple of 16 is zero-padded (a copy of the cache; the engine's cache
lengths are multiples of 16, so it does not happen there). On a CPU it runs in Pallas's interpret
mode (`interpret=True`; slow, for tests). The grid is not partitioned: unsharded decoding only.
Tested against `_cached_attention` (tests/test_dense_pallas.py).
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from models import layers as L_

MIN_PROGRAMS = 512   # split the slots until B * K * splits reaches this (H200: 132 SMs)
MAX_BLOCK = 128      # slots per loop iteration (at most; `default_knobs` lowers it for wide heads)
LONG_CACHE = 1024    # caches of at least this many slots run 2 warps a program (`default_knobs`)
# With one share, write the G real query rows of each KV head straight into [B, K * G, H] (a
# masked store) instead of a [B, K, Gp, H] tile that XLA then slices to G rows: the slice is a
# kernel a layer (`wrapped_slice`, 1.9 us on an H100 at 0.5B, 256 rows). On one H200
# (2026-12-07, bench/sampler.py --direct-out on / off, 256 rows): the 0.5B single-turn step
# 1.616-1.634 against 1.674-1.688 ms (3%); 7B single turn and the 0.5B paged multi-turn call
# unchanged within noise. False: the padded tile and the slice (the tests run both).
DIRECT_OUT = True


def default_knobs(S: int, H: int) -> tuple[int, int, int]:
  """(num_warps, num_stages, max_block) for a cache of S slots and head size H: three pipeline
  stages; blocks of at most 8,192 K (and V) elements (128 slots at H = 64, 64 at H = 128); 4
  warps a program, 2 from LONG_CACHE slots on. The fastest settings of bench/dense_attention.py
  on an H100 (2026-12-07, 256 rows): Qwen2.5-0.5B and -7B heads at a 384-slot cache and a
  1,680-slot one (rows at 128..1,665): 37.7 / 87.3 us (0.5B) and 100.5 / 237.5 us (7B) a layer
  against 40.8 / 125.1 and 102.4 / 304.2 with the earlier 4 warps, 2 stages, 128-slot blocks.
  Between 384 and 1,680 slots the switch of warps is not measured."""
  return (2 if S >= LONG_CACHE else 4), 3, min(MAX_BLOCK, max(16, 8192 // H))


def _dot(a, b, contract_b: int, exact: bool):
  """[M, X] x b -> [M, N] fp32, contracting a's dim 1 with b's dim `contract_b`."""
  return lax.dot_general(a, b, (((1,), (contract_b,)), ((), ())),
                         precision=lax.Precision.HIGHEST if exact else None,
                         preferred_element_type=jnp.float32)


def add_token(q_GH, kn_H, vn_H, mine, o_GH, m_G, l_G):
  """The query token's own K/V (kn_H, vn_H, from registers) joined to an online softmax's
  running (o, m, l) when `mine` (the program whose share holds the token's slot), in fp32; the
  probability is cast to V's dtype as the P.V dots cast it. Used inside both decode kernels."""
  s_G = jnp.sum(q_GH.astype(jnp.float32) * kn_H.astype(jnp.float32)[None, :], axis=1)
  s_G = jnp.where(mine, s_G, -jnp.inf)
  m_new = jnp.maximum(m_G, s_G)
  alpha_G = jnp.where(m_G == m_new, 1.0, jnp.exp(m_G - m_new))   # -inf - -inf: no NaN
  p_G = jnp.where(mine, jnp.exp(s_G - m_new), 0.0)
  p_G = p_G.astype(vn_H.dtype).astype(jnp.float32)
  o_GH = alpha_G[:, None] * o_GH + p_G[:, None] * vn_H.astype(jnp.float32)[None, :]
  return o_GH, m_new, alpha_G * l_G + p_G


def rope_inputs(qkv_ref, cos_ref, sin_ref, num_heads: int, Gp: int, dtype):
  """Inside a decode kernel: (q [Gp, H] scaled by 1/sqrt(H), k [H], v [H], all in `dtype`) of
  KV head program_id(1), from the row's fused projection qkv_ref [N + 2K, H] (bias added), with
  RoPE (HF's rotate-half form) applied here at the row's cos_ref, sin_ref [H]. The XLA path
  (`split_rope`, then the kernel) runs a slice, RoPE, scale and pad as separate kernels a layer.
  rotate_half(x) is read, not computed: a second load of the same rows with the columns' halves
  swapped, times -1 on the first half. The rotated values are rounded to the
  projection's dtype where `models.layers.apply_rope` rounds them, q again after the scale.
  Query rows past G repeat row G - 1 (their outputs are never stored, or sliced off)."""
  R_, H = qkv_ref.shape
  N = num_heads
  K = (R_ - N) // 2
  G = N // K
  h = pl.program_id(1)
  f32 = jnp.float32
  c_H = lax.broadcasted_iota(jnp.int32, (H,), 0)
  swap_H = (c_H + H // 2) % H                       # rotate_half's source column
  sign_H = jnp.where(c_H < H // 2, -1.0, 1.0)
  cos_H, sin_H = cos_ref[...].astype(f32), sin_ref[...].astype(f32)
  rope = lambda x, x_swapped: (x.astype(f32) * cos_H + x_swapped.astype(f32) * sign_H * sin_H
                               ).astype(qkv_ref.dtype)
  rows_G = h * G + jnp.minimum(lax.broadcasted_iota(jnp.int32, (Gp,), 0), G - 1)
  q_GH = rope(qkv_ref[rows_G], qkv_ref[rows_G[:, None], swap_H[None, :]])
  q_GH = (q_GH.astype(f32) / math.sqrt(H)).astype(dtype)
  k_H = rope(qkv_ref[N + h], qkv_ref[N + h, swap_H]).astype(dtype)
  v_H = qkv_ref[N + K + h].astype(dtype)
  return q_GH, k_H, v_H


def rope_in_specs(R_: int, H: int) -> list:
  """BlockSpecs of `rope_inputs`' refs on a (row, KV head, share) grid: the row's projection
  [R_ = N + 2K, H], its cos and sin [H]."""
  return [pl.BlockSpec((None, R_, H), lambda b, h, j: (b, 0, 0)),
          pl.BlockSpec((None, H), lambda b, h, j: (b, 0)),
          pl.BlockSpec((None, H), lambda b, h, j: (b, 0))]


def split_rope(qkv_BRH: jax.Array, cos_BH: jax.Array, sin_BH: jax.Array, num_heads: int):
  """What `rope_inputs` computes, in XLA: (q [B, K, G, H], k, v [B, K, H]) with RoPE on q and k
  (`models.layers.apply_rope`); q not yet scaled. The fallback and the tests' reference."""
  B, R_, H = qkv_BRH.shape
  N = num_heads
  K = (R_ - N) // 2
  rope = lambda x: L_.apply_rope(x[:, None], cos_BH[:, None], sin_BH[:, None])[:, 0]
  q = rope(qkv_BRH[:, :N]).reshape(B, K, N // K, H)
  return q, rope(qkv_BRH[:, N:N + K]), qkv_BRH[:, N + K:]


def combine_shares(o_BKJGH, m_BKJG, l_BKJG, G: int, dtype):
  """The splits' unnormalised (o, m, l) rescaled to one output [B, K, G, H] in `dtype` (a share
  with no slot has m = -inf, l = 0: weight 0; share 0 always holds one)."""
  w_BKJG = jnp.exp(m_BKJG - jnp.max(m_BKJG, axis=2, keepdims=True))
  l_BKG = jnp.sum(w_BKJG * l_BKJG, axis=2)
  o_BKGH = jnp.sum(w_BKJG[..., None] * o_BKJGH, axis=2) / l_BKG[..., None]
  return o_BKGH[:, :, :G].astype(dtype)


def out_blocks(B: int, K: int, splits: int, Gp: int, H: int, dtype,
               direct_rows: int | None = None) -> tuple[list, list]:
  """(out_shape, out_specs) of a decode kernel on grid (B, K, splits): with one share the
  normalised output [B, K, Gp, H] in `dtype`, or with direct_rows = G the real rows only,
  [B, K * G, H] (every KV head's program writes its G rows of the row's block, `store_out`);
  else each share's fp32 o, m, l."""
  if splits == 1 and direct_rows is not None:
    N = K * direct_rows
    return ([jax.ShapeDtypeStruct((B, N, H), dtype)],
            [pl.BlockSpec((None, N, H), lambda b, h, j: (b, 0, 0))])
  if splits == 1:
    return ([jax.ShapeDtypeStruct((B, K, Gp, H), dtype)],
            [pl.BlockSpec((None, None, Gp, H), lambda b, h, j: (b, h, 0, 0))])
  return ([jax.ShapeDtypeStruct((B, K, splits, Gp, H), jnp.float32),
           jax.ShapeDtypeStruct((B, K, splits, Gp), jnp.float32),
           jax.ShapeDtypeStruct((B, K, splits, Gp), jnp.float32)],
          [pl.BlockSpec((None, None, None, Gp, H), lambda b, h, j: (b, h, j, 0, 0)),
           pl.BlockSpec((None, None, None, Gp), lambda b, h, j: (b, h, j, 0)),
           pl.BlockSpec((None, None, None, Gp), lambda b, h, j: (b, h, j, 0))])


def store_out(out_refs, o_GH, m_G, l_G, direct_rows: int | None):
  """A decode kernel's outputs: one ref, the normalised attention (a [Gp, H] tile, or with
  direct_rows = G the row's [K * G, H] block, of which this program's KV head owns rows
  h * G .. h * G + G - 1: a masked store, the padded query rows never leave the chip); three
  refs, the share's unnormalised o, m, l."""
  if len(out_refs) == 3:
    o_ref, m_ref, l_ref = out_refs
    o_ref[...], m_ref[...], l_ref[...] = o_GH, m_G, l_G
    return
  out_ref, = out_refs
  o_GH = (o_GH / l_G[:, None]).astype(out_ref.dtype)
  if direct_rows is None:
    out_ref[...] = o_GH
    return
  Gp, H = o_GH.shape
  i_G = lax.broadcasted_iota(jnp.int32, (Gp,), 0)
  rows_G = pl.program_id(1) * direct_rows + i_G    # past the block where masked: never stored
  cols_H = lax.broadcasted_iota(jnp.int32, (H,), 0)
  plgpu.store(out_ref.at[rows_G[:, None], cols_H[None, :]], o_GH,
              mask=(i_G < direct_rows)[:, None])


def _kernel(pos_ref, *refs, block: int, share: int, exact: bool, write: bool,
            rope: tuple | None, direct_rows: int | None = None):
  """pos_ref [1]; then q_ref [Gp, H], k_ref, v_ref [share, H]: this program's slots
  j*share .. (j+1)*share - 1 of one (row, KV head). Writes out [Gp, H] (normalised) when one
  output ref comes, else unnormalised o [Gp, H], m [Gp], l [Gp].
  write: after v_ref come kn_ref, vn_ref [H] (the query token's K/V, not yet in the cache), and
  the refs end with k_out, v_out [share, H] (the cache buffers, aliased to k_ref, v_ref): the
  loop reads the slots before pos only, the new token is added from registers, and the program
  whose share holds pos stores it there after the loop (no other program reads that slot).
  rope = (num_heads, Gp): (write) qkv_ref [N + 2K, H], cos_ref, sin_ref [H] take the place of
  q_ref and kn_ref, vn_ref (`rope_inputs`). direct_rows: `store_out`."""
  if rope is not None:
    qkv_ref, cos_ref, sin_ref, k_ref, v_ref, *out_refs, k_out, v_out = refs
    q_GH, kn_H, vn_H = rope_inputs(qkv_ref, cos_ref, sin_ref, *rope, k_ref.dtype)
  elif write:
    q_ref, k_ref, v_ref, kn_ref, vn_ref, *out_refs, k_out, v_out = refs
  else:
    q_ref, k_ref, v_ref, *out_refs = refs
  if rope is None:
    q_GH = q_ref[...]
  Gp, H = q_GH.shape
  start = pl.program_id(2) * share
  pos = pos_ref[0]
  last = pos - 1 if write else pos                      # the last slot read from the cache
  n_valid = jnp.minimum(last + 1 - start, share)        # slots of this share <= last (may be <= 0)
  trips = jnp.maximum((n_valid + block - 1) // block, 0)

  def body(i, carry):
    o_GH, m_G, l_G = carry
    sl = pl.ds(pl.multiple_of(i * block, block), block)
    s_GT = _dot(q_GH, k_ref[sl, :], 1, exact)               # [Gp, block] fp32
    slot_T = start + i * block + lax.broadcasted_iota(jnp.int32, (block,), 0)
    ok_T = slot_T <= last
    s_GT = jnp.where(ok_T[None, :], s_GT, -jnp.inf)
    m_new = jnp.maximum(m_G, jnp.max(s_GT, axis=1))         # finite: slot i*block <= pos
    alpha_G = jnp.exp(m_G - m_new)
    p_GT = jnp.exp(s_GT - m_new[:, None])
    v_TH = jnp.where(ok_T[:, None], v_ref[sl, :], jnp.zeros((), v_ref.dtype))   # stale: 0 * NaN
    o_GH = alpha_G[:, None] * o_GH + _dot(p_GT.astype(v_TH.dtype), v_TH, 0, exact)
    return o_GH, m_new, alpha_G * l_G + jnp.sum(p_GT, axis=1)

  init = (jnp.zeros((Gp, H), jnp.float32), jnp.full((Gp,), -jnp.inf, jnp.float32),
          jnp.zeros((Gp,), jnp.float32))
  o_GH, m_G, l_G = lax.fori_loop(0, trips, body, init)
  if write:
    mine = (pos >= start) & (pos < start + share)
    if rope is None:
      kn_H, vn_H = kn_ref[...], vn_ref[...]
    o_GH, m_G, l_G = add_token(q_GH, kn_H, vn_H, mine, o_GH, m_G, l_G)

    @pl.when(mine)
    def _store():
      row = pl.ds(pos - start, 1)
      k_out[row, :] = kn_H[None, :].astype(k_out.dtype)
      v_out[row, :] = vn_H[None, :].astype(v_out.dtype)
  store_out(out_refs, o_GH, m_G, l_G, direct_rows)


def choose_splits(B: int, K: int, S: int, max_block: int = MAX_BLOCK) -> int:
  """Powers of two, while B * K * splits < MIN_PROGRAMS and a share keeps whole blocks of
  gcd(S, max_block) slots."""
  block, splits = math.gcd(S, max_block), 1
  while B * K * splits < MIN_PROGRAMS and (S // (2 * splits)) % block == 0 and S % 2 == 0:
    splits *= 2
  return splits


def dense_attention_write(q_BKGH: jax.Array, k_BKSH: jax.Array, v_BKSH: jax.Array,
                          pos_B: jax.Array, k_BKH: jax.Array, v_BKH: jax.Array, *,
                          interpret: bool = False, splits: int | None = None,
                          direct_out: bool | None = None
                          ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(attention [B, K, G, H], k cache, v cache): `dense_attention` over the slots before pos_B
  plus the query token's own k/v (k_BKH, v_BKH), which the kernel also stores at slot pos_B of
  the caches (aliased: updated in place, no scatter kernels). Same math as writing first and
  attending over slots <= pos_B. A cache length that is not a multiple of 16 takes that path.
  direct_out: None = DIRECT_OUT."""
  if k_BKSH.shape[2] % 16:
    rows = jnp.arange(q_BKGH.shape[0])
    k_BKSH = k_BKSH.at[rows, :, pos_B].set(k_BKH.astype(k_BKSH.dtype))
    v_BKSH = v_BKSH.at[rows, :, pos_B].set(v_BKH.astype(v_BKSH.dtype))
    return (dense_attention(q_BKGH, k_BKSH, v_BKSH, pos_B, interpret=interpret, splits=splits,
                            direct_out=direct_out), k_BKSH, v_BKSH)
  return _dense_attention(q_BKGH, k_BKSH, v_BKSH, pos_B, k_BKH.astype(k_BKSH.dtype),
                          v_BKH.astype(v_BKSH.dtype), interpret=interpret, splits=splits,
                          direct_out=direct_out_or_default(direct_out))


def dense_attention_write_qkv(qkv_BRH: jax.Array, cos_BH: jax.Array, sin_BH: jax.Array,
                              k_BKSH: jax.Array, v_BKSH: jax.Array, pos_B: jax.Array, *,
                              num_heads: int, interpret: bool = False,
                              splits: int | None = None, num_warps: int | None = None,
                              num_stages: int | None = None, max_block: int | None = None,
                              direct_out: bool | None = None
                              ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """`dense_attention_write` from the layer's fused q/k/v projection qkv_BRH [B, N + 2K, H]
  (bias added, no RoPE yet) and the rows' RoPE cos_BH, sin_BH [B, H]: the kernel splits the
  heads, applies RoPE and the 1/sqrt(H) scale itself (`rope_inputs`), so no XLA kernel runs
  between the projection's GEMM and it. Returns attention [B, K, G, H] in qkv's dtype.
  num_warps, num_stages (Triton's) and max_block (slots a loop iteration reads at most): the
  tuning knobs bench/dense_attention.py sweeps; None: `default_knobs`. direct_out: None =
  DIRECT_OUT (`store_out`)."""
  if k_BKSH.shape[2] % 16:
    q, k, v = split_rope(qkv_BRH, cos_BH, sin_BH, num_heads)
    return dense_attention_write(q, k_BKSH, v_BKSH, pos_B, k, v, interpret=interpret,
                                 splits=splits, direct_out=direct_out)
  return _dense_attention(qkv_BRH, k_BKSH, v_BKSH, pos_B, cos_BH, sin_BH, interpret=interpret,
                          splits=splits, num_heads=num_heads, num_warps=num_warps,
                          num_stages=num_stages, max_block=max_block,
                          direct_out=direct_out_or_default(direct_out))


def dense_attention(q_BKGH: jax.Array, k_BKSH: jax.Array, v_BKSH: jax.Array, pos_B: jax.Array,
                    *, interpret: bool = False, splits: int | None = None,
                    num_warps: int | None = None, num_stages: int | None = None,
                    direct_out: bool | None = None) -> jax.Array:
  """Softmax over slots s <= pos_B[b] of q.k / sqrt(H), times V, in fp32; returns [B, K, G, H]
  in q's dtype. splits: None = `choose_splits`; else shares of S // splits slots, a multiple of
  16 (the loop's block is gcd(share, max_block); the knobs of `default_knobs`). direct_out:
  None = DIRECT_OUT."""
  return _dense_attention(q_BKGH, k_BKSH, v_BKSH, pos_B, None, None, interpret=interpret,
                          splits=splits, num_warps=num_warps, num_stages=num_stages,
                          direct_out=direct_out_or_default(direct_out))


def direct_out_or_default(direct_out: bool | None) -> bool:
  """A call's direct_out, DIRECT_OUT when None (read outside jit, so a change retraces)."""
  return DIRECT_OUT if direct_out is None else bool(direct_out)


@functools.partial(jax.jit, static_argnames=("interpret", "splits", "num_warps", "num_stages",
                                             "num_heads", "max_block", "direct_out"))
def _dense_attention(q_BKGH, k_BKSH, v_BKSH, pos_B, kn_BKH, vn_BKH, *, interpret: bool = False,
                     splits: int | None = None, num_warps: int | None = None,
                     num_stages: int | None = None, num_heads: int | None = None,
                     max_block: int | None = None, direct_out: bool = False):
  """The pallas_call of all three: kn_BKH / vn_BKH None (attend over slots <= pos), the new
  token's K/V (attend before pos plus it, store it; returns (out, k, v)), or, with num_heads,
  q_BKGH is the fused projection [B, N + 2K, H] and kn_BKH, vn_BKH are RoPE's cos, sin [B, H]
  (`rope_inputs`; returns (out, k, v))."""
  rope = num_heads is not None
  write = kn_BKH is not None
  B, K, S, H = k_BKSH.shape
  G = num_heads // K if rope else q_BKGH.shape[2]
  if S % 16:   # masked slots; only odd cache lengths pay this copy (not taken with rope)
    pad = ((0, 0), (0, 0), (0, -S % 16), (0, 0))
    k_BKSH, v_BKSH = jnp.pad(k_BKSH, pad), jnp.pad(v_BKSH, pad)
    S = k_BKSH.shape[2]
  nw, ns, mb = default_knobs(S, H)
  num_warps = nw if num_warps is None else num_warps
  num_stages = ns if num_stages is None else num_stages
  max_block = mb if max_block is None else max_block
  splits = choose_splits(B, K, S, max_block) if splits is None else splits
  if S % splits or (S // splits) % 16:
    raise ValueError(f"splits={splits}: must split the {S} slots into multiples of 16")
  share = S // splits
  block = math.gcd(share, max_block)
  Gp = max(16, pl.next_power_of_2(G))
  pos_B1 = pos_B.astype(jnp.int32).reshape(B, 1)
  kv_spec = pl.BlockSpec((None, None, share, H), lambda b, h, j: (b, h, j, 0))
  in_specs = [pl.BlockSpec((None, 1), lambda b, h, j: (b, 0))]
  if rope:
    args = (pos_B1, q_BKGH, kn_BKH, vn_BKH, k_BKSH, v_BKSH)
    in_specs += rope_in_specs(q_BKGH.shape[1], H) + [kv_spec, kv_spec]
    kv_args = (4, 5)
  else:
    q_BKGH_ = (q_BKGH / math.sqrt(H)).astype(k_BKSH.dtype)
    q_BKGH_ = jnp.pad(q_BKGH_, ((0, 0), (0, 0), (0, Gp - G), (0, 0)))
    args = (pos_B1, q_BKGH_, k_BKSH, v_BKSH)
    in_specs += [pl.BlockSpec((None, None, Gp, H), lambda b, h, j: (b, h, 0, 0)),
                 kv_spec, kv_spec]
    kv_args = (2, 3)
    if write:
      args += (kn_BKH, vn_BKH)
      in_specs += [pl.BlockSpec((None, None, H), lambda b, h, j: (b, h, 0))] * 2
  direct_rows = G if direct_out and splits == 1 else None
  out_shape, out_specs = out_blocks(B, K, splits, Gp, H, q_BKGH.dtype, direct_rows)
  aliases = {}
  if write:
    out_shape += [jax.ShapeDtypeStruct(k_BKSH.shape, k_BKSH.dtype),
                  jax.ShapeDtypeStruct(v_BKSH.shape, v_BKSH.dtype)]
    out_specs += [kv_spec, kv_spec]
    aliases = {kv_args[0]: len(out_shape) - 2, kv_args[1]: len(out_shape) - 1}
  kernel = functools.partial(_kernel, block=block, share=share,
                             exact=k_BKSH.dtype == jnp.float32, write=write,
                             rope=(num_heads, Gp) if rope else None, direct_rows=direct_rows)
  out = pl.pallas_call(
      kernel, grid=(B, K, splits), in_specs=in_specs, out_specs=out_specs, out_shape=out_shape,
      input_output_aliases=aliases,
      compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages),
      interpret=interpret, name="dense_decode_attention")(*args)
  caches = ()
  if write:
    *out, k_new, v_new = out
    caches = (k_new, v_new)
  if direct_rows is not None:
    o = out[0].reshape(B, K, G, H)
  elif splits == 1:
    o = out[0][:, :, :G]
  else:
    o = combine_shares(*out, G, q_BKGH.dtype)   # share 0 holds slot 0 (<= pos, or pos itself)
  return (o,) + caches if write else o
