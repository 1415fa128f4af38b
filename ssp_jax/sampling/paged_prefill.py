"""Chunk prefill straight into the page pools (sampling/paged.py), with no dense view of the rows.

Each layer writes the chunk's K/V at (page, offset) of its positions first, then attends through
the page table: it gathers only that layer's [R, K, C*T, H] slots of the rows (C = the table
columns passed in), so no [L, R, K, C*T, H] copy of the rows' pages is built, carried through
the layer scan and scattered back (on an H200 that copy and its scan output made up most of the
paged layout's peak over the pool, bench/RESULTS.md). Same math as `models.forward_with_cache`
on the dense rows: the same K/V casts, mask and `cache_attention` over the same C*T slots.

Because every layer writes before it reads, two rows of one call may be two pieces of the same
sequence (same table row, the second starting where the first ends): the second piece's queries
see the first piece's K/V of the same layer. The engine uses this to feed any number of tokens
of a row as rows of one fixed length (rollout/prefill.py), so the programs' token axis takes one
size. Rows past their own pages (padded tokens, padding rows with a table of null pages) write
into the null page, which every read masks.

Layers are unrolled (the pools are L separate buffers, as the decode loop keeps them); the last
layer's attention output and MLP feed nothing and are dropped by XLA.

Attention over the gathered slots (`attn_impl`): "xla" computes the [R, N, T, C * page_size]
scores in fp32 and masks them (`layers.cache_attention`, any backend); "cudnn" is cuDNN's flash
attention on the same slots with the same mask as a bf16 bias, so no score matrix is stored (GPU
only, bf16/fp16 compute).
At 64 pieces of 64 tokens and 128 columns of 64 slots the 0.5B shape's scores are 1.9 GB a
layer in fp32, which the flash kernel never writes.
"""
from __future__ import annotations

import functools
import math
from typing import Optional

import jax
import jax.numpy as jnp

from models import decoder as D
from models import layers as L_
from models.config import ModelConfig
from models.decoder import CACHE_LOGICAL
from models.sharding import Sharder, constrain
from ssp_jax.sampling import decode_step as DS
from ssp_jax.sampling import paged as PG


PREFILL_ATTN = ("xla", "cudnn")


def slots_attention(q_RTNH: jax.Array, k_RKSH: jax.Array, v_RKSH: jax.Array,
                    mask_RTS: jax.Array, impl: str) -> jax.Array:
  """Attention of the queries over gathered cache slots ([R, K, S, H], heads first), masked by
  mask_RTS; [R, T, N, H]. impl "xla": `layers.cache_attention` (scores stored, softmax in
  fp32); "cudnn": cuDNN flash attention (bf16 inputs, fp32 softmax statistics inside the
  kernel), the mask passed as an additive bias broadcast over the heads."""
  if impl == "xla":
    return L_.cache_attention(q_RTNH, k_RKSH, v_RKSH, mask_RTS)
  if impl != "cudnn":
    raise ValueError(f"prefill attention {impl!r} unknown; use one of {PREFILL_ATTN}")
  from jax._src.cudnn import fused_attention_stablehlo as cudnn_fa
  q_RNTH = jnp.swapaxes(q_RTNH, 1, 2)
  out_RNTH = cudnn_fa.dot_product_attention(
      q_RNTH, k_RKSH, v_RKSH, mask=mask_RTS[:, None], scale=1.0 / math.sqrt(q_RTNH.shape[-1]),
      qkv_layout="BNTH")
  return jnp.swapaxes(out_RNTH, 1, 2)


def pages_forward(cfg: ModelConfig, params, k_pools: list, v_pools: list, table_RC: jax.Array,
                  tokens_RT: jax.Array, start_R: jax.Array, *, dtype,
                  sharder: Optional[Sharder] = None, attn_impl: str = "xla") -> tuple[list, list]:
  """Writes the K/V of tokens_RT at positions start_R.. of the rows whose pages table_RC lists;
  returns the new (k, v) pools. Queries attend to slots <= their position among the first
  C * page_size of their row. `params`: the decode-layout params (`decode_step.decode_params`,
  per-layer buffers, fused or not: the engine's), or stacked ones (`prefill_rows`); slicing
  layer l out of stacked weights in an unrolled program copies every layer's weights (at the
  0.5B shape on a CPU: 1.2 GiB more scratch and twice the compile time)."""
  R, T = tokens_RT.shape
  C = table_RC.shape[1]
  ps = k_pools[0].shape[2]                                   # pools [K, P, ps, H]
  positions_RT = start_R[:, None].astype(jnp.int32) + jnp.arange(T, dtype=jnp.int32)[None]
  inv_freq = L_.rope_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
  cos, sin = L_.rope_cos_sin(positions_RT, inv_freq, dtype)
  mask_RTS = jnp.arange(C * ps, dtype=jnp.int32)[None, None, :] <= positions_RT[:, :, None]
  page_RT, off_RT = PG.slots_of(table_RC, positions_RT, ps)
  x_RTD = D._embed(cfg, params, tokens_RT, dtype, sharder)
  k_new, v_new = [], []
  for l in range(cfg.num_layers):                            # unrolled: L pool buffers
    lp = (params["layers"][l] if isinstance(params["layers"], list)
          else jax.tree.map(lambda x, l=l: x[l], params["layers"]))
    q, k, v = DS._qkv(cfg, lp, x_RTD, cos, sin, sharder)     # k, v [R, T, K, H]
    kp = PG.write_tokens(k_pools[l], page_RT, off_RT, k)
    vp = PG.write_tokens(v_pools[l], page_RT, off_RT, v)
    k_RKSH = constrain(PG.gather_view(kp, table_RC), CACHE_LOGICAL[1:], sharder)
    v_RKSH = constrain(PG.gather_view(vp, table_RC), CACHE_LOGICAL[1:], sharder)
    attn = slots_attention(q, k_RKSH.astype(q.dtype), v_RKSH.astype(q.dtype), mask_RTS,
                           attn_impl)
    x_RTD = DS._attn_out_and_mlp(cfg, lp, x_RTD, attn, sharder)
    k_new.append(kp)
    v_new.append(vp)
  return k_new, v_new


def _constrain_pools(pools: list, sharder: Optional[Sharder]) -> list:
  """The pools' layout as `sampling.loop` constrains them in the decode state (the same spec, so
  no resharding copy between the prefill and the decode loop)."""
  return [constrain(p, PG.POOL_LOGICAL, sharder) for p in pools]


@functools.partial(jax.jit, static_argnames=("cfg", "dtype", "sharder", "attn_impl"),
                   donate_argnums=(1, 2))
def prefill_pages(cfg: ModelConfig, k_pools: list, v_pools: list, params, table_RC: jax.Array,
                  tokens_RT: jax.Array, start_R: jax.Array, *, dtype=jnp.float32,
                  sharder: Optional[Sharder] = None, attn_impl: str = "xla") -> tuple[list, list]:
  """`pages_forward` as one program over the pools alone (donated, updated in place): its
  shapes are the pool's, the rows', the token length and the table width, not the decode
  batch's, so the tail batch shrinking compiles no new prefill."""
  k, v = pages_forward(cfg, params, k_pools, v_pools, table_RC, tokens_RT, start_R,
                       dtype=dtype, sharder=sharder, attn_impl=attn_impl)
  return _constrain_pools(k, sharder), _constrain_pools(v, sharder)
