"""Paged KV cache: device side (the host page allocator is ssp_jax/rollout/pages.py).

Layout (`kv_layout="paged"`), held in `DecodeState.cache`:
  k, v    lists of L per-layer page pools [K, P, T, H]   (P pages of T = page_size slots)
  table   [B, C] int32: page of row b holding positions c*T .. c*T + T-1 (C = attended columns)

Page 0 is the null page: owned by no row, the target of every unused table entry, so stray writes
(finished or empty rows, padded prefill tokens) land there and reads of it are always masked.
The per-layer pool layout [K, P, T, H] is the one JAX's Pallas GPU kernel
(`jax.experimental.pallas.ops.gpu.paged_attention`) reads, so `attn_impl="pallas_jax"` calls it
with no transpose; `attn_impl="pallas"` is this package's fused kernel over the same pools
(sampling/paged_pallas.py: it also stores the new token's K/V, and splits a row's columns only
until there are enough programs);
on any backend `attn_impl="gather"` (pure JAX) gathers the C attended pages per row.

Decode attention cost scales with C (the engine sizes it to the longest row in flight, rounded
up to a power of two, at least an eighth of the table: rollout/slots.py `table_width`) for
"gather", and with each row's own length for the Pallas kernels (the engine passes them the
whole table);
the pool holds the call's rows at their longest (rollout.kv_pool="fixed") or grows with the
tokens in flight ("grow"), not slots x the longest possible row.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

PAGED_ATTN_IMPLS = ("gather", "pallas", "pallas_rope", "pallas_jax")
# The kernels that read each row's own slots through the whole table (the engine hands them
# every column, so a decode loop has one table shape): "pallas" and "pallas_rope"
# (sampling/paged_pallas.py, also stores the new K/V; "pallas_rope" also applies RoPE to the raw
# projection) and "pallas_jax" (JAX's library kernel after two scatters).
OWN_SLOT_IMPLS = ("pallas", "pallas_rope", "pallas_jax")


def reads_own_slots(attn_impl) -> bool:
  """Whether decode attention `attn_impl` reads each row's own slots only (a Pallas kernel)."""
  return str(attn_impl) in OWN_SLOT_IMPLS


NULL_PAGE = 0
# Logical axes of a pool [K, P, T, H]: split over the KV heads like the dense cache, pages and
# slots whole. (Until 2026-12-04 the constraint named the cache's length axis for K, which no
# rule splits: a tensor-parallel mesh held every pool whole on each device wherever the
# constraint applied, and resharded it where XLA's propagation split it.)
POOL_LOGICAL = ("act_kv_heads", None, None, "head_dim")


def init_pages(cfg, num_pages: int, page_size: int, dtype) -> tuple[list, list]:
  shape = (cfg.num_kv_heads, num_pages, page_size, cfg.head_dim)
  return ([jnp.zeros(shape, dtype) for _ in range(cfg.num_layers)],
          [jnp.zeros(shape, dtype) for _ in range(cfg.num_layers)])


def slot_of(table_BC: jax.Array, pos_B: jax.Array, page_size: int) -> tuple[jax.Array, jax.Array]:
  """(page, offset) of position pos_B of each row; positions past the table go to the null page."""
  col_B = pos_B // page_size
  C = table_BC.shape[1]
  page_B = jnp.take_along_axis(table_BC, jnp.minimum(col_B, C - 1)[:, None], axis=1)[:, 0]
  return jnp.where(col_B < C, page_B, NULL_PAGE), pos_B % page_size


def slots_of(table_RC: jax.Array, pos_RT: jax.Array, page_size: int) -> tuple[jax.Array, jax.Array]:
  """(page, offset) [R, T] of positions pos_RT of each row (a chunk of T tokens a row);
  positions past the table go to the null page."""
  col_RT = pos_RT // page_size
  C = table_RC.shape[1]
  page_RT = jnp.take_along_axis(table_RC, jnp.minimum(col_RT, C - 1), axis=1)
  return jnp.where(col_RT < C, page_RT, NULL_PAGE), pos_RT % page_size


def write_token(pool_KPTH: jax.Array, page_B: jax.Array, off_B: jax.Array,
                x_BKH: jax.Array) -> jax.Array:
  """Writes one token's K (or V) per row at (page_B, off_B), in place on a loop carry."""
  return pool_KPTH.at[:, page_B, off_B].set(jnp.swapaxes(x_BKH, 0, 1).astype(pool_KPTH.dtype))


def gather_attention(q_BKGH: jax.Array, kp_KPTH: jax.Array, vp_KPTH: jax.Array,
                     table_BC: jax.Array, len_B: jax.Array) -> jax.Array:
  """Single-query GQA attention over slots < len_B of each row's pages; fp32 softmax.
  Masked slots are zeroed in V too, so nothing from a page a row does not own (the null page
  included) reaches its output, whatever that page holds. Returns [B, K, G, H]."""
  B, C = table_BC.shape
  K, _, T, H = kp_KPTH.shape
  k_KBSH = kp_KPTH[:, table_BC].reshape(K, B, C * T, H)
  v_KBSH = vp_KPTH[:, table_BC].reshape(K, B, C * T, H)
  mask_BS = jnp.arange(C * T, dtype=jnp.int32)[None, :] < len_B[:, None]
  s_BKGS = jnp.einsum("BKGH,KBSH->BKGS", (q_BKGH / math.sqrt(H)).astype(k_KBSH.dtype), k_KBSH,
                      preferred_element_type=jnp.float32)
  s_BKGS = jnp.where(mask_BS[:, None, None, :], s_BKGS, -jnp.inf)
  p_BKGS = jax.nn.softmax(s_BKGS, axis=-1)
  v_KBSH = jnp.where(mask_BS[None, :, :, None], v_KBSH, jnp.zeros((), v_KBSH.dtype))
  out = jnp.einsum("BKGS,KBSH->BKGH", p_BKGS.astype(v_KBSH.dtype), v_KBSH,
                   preferred_element_type=jnp.float32)
  return out.astype(q_BKGH.dtype)


def pallas_attention(q_BKGH: jax.Array, kp_KPTH: jax.Array, vp_KPTH: jax.Array,
                     table_BC: jax.Array, len_B: jax.Array, interpret: bool = False) -> jax.Array:
  """JAX's Pallas GPU paged-attention kernel (reads only each row's first len_B slots). The kernel
  does not scale the logits, so q is scaled here; its C table columns are split into k_splits
  partitions (a divisor of C) of compute blocks of up to 8 pages."""
  from jax.experimental.pallas.ops.gpu import paged_attention as pa
  B, K, G, H = q_BKGH.shape
  C = table_BC.shape[1]
  q = (q_BKGH.astype(jnp.float32) / math.sqrt(H)).astype(kp_KPTH.dtype).reshape(B, K * G, H)
  k_splits = math.gcd(C, 16)
  out = pa.paged_attention(q, kp_KPTH, vp_KPTH, table_BC, len_B.astype(jnp.int32),
                           pages_per_compute_block=math.gcd(C // k_splits, 8),
                           k_splits=k_splits, interpret=interpret)
  return out.reshape(B, K, G, H).astype(q_BKGH.dtype)


def write_tokens(pool_KPTH: jax.Array, page_RT: jax.Array, off_RT: jax.Array,
                 x_RTKH: jax.Array) -> jax.Array:
  """Writes a chunk's K (or V), T tokens a row, at (page_RT, off_RT) (the chunk prefill)."""
  return pool_KPTH.at[:, page_RT, off_RT].set(
      jnp.moveaxis(x_RTKH, 2, 0).astype(pool_KPTH.dtype))


def gather_view(pool_KPTH: jax.Array, table_RC: jax.Array) -> jax.Array:
  """One layer's dense view [R, K, C*T, H] of rows' first C pages (the chunk prefill's
  attention reads it; the dense cache's row layout)."""
  R, C = table_RC.shape
  K, _, T, H = pool_KPTH.shape
  return jnp.swapaxes(pool_KPTH[:, table_RC].reshape(K, R, C * T, H), 0, 1)


def grow_pages(pool: list, num_pages: int) -> list:
  """Adds zero pages at the end of every layer's pool (page ids of existing pages unchanged)."""
  return [jnp.pad(p, ((0, 0), (0, num_pages - p.shape[1]), (0, 0), (0, 0))) for p in pool]
