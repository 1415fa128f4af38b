"""One decode step (T = 1) tuned for the while_loop: same math as `models.forward_with_cache`.

Differences from the generic chunk forward, all about memory traffic at T = 1:
  * The cache is read-only inside the layer scan: each layer attends over its cached slots before
    the query plus the query's own k/v (a two-part softmax), and the new K/V of all layers go in
    with one scatter at (row, position) after the scan, in place on the while-loop carry. No
    layer's cache is copied into a new stacked scan output on every step.
  * Attention is written as multiply-reduce over the cache in its stored layout ([B, S, K, H]),
    so the cache is streamed once per layer without the transposes a batched GEMM would need
    (decode attention is bandwidth-bound anyway).
Equality with `forward_with_cache` is tested (tests/test_sampling_parity.py, HF greedy parity).
"""
from __future__ import annotations

import math
from typing import Optional

import jax
import jax.numpy as jnp

from models import decoder as D
from models.config import ModelConfig
from models.decoder import CACHE_LOGICAL
from models import layers as L_
from models.sharding import Sharder, constrain


def _decode_attention(q_BKGH, k_BSKH, v_BSKH, mask_BS, k_BKH, v_BKH):
  """Single-query GQA attention, fp32 softmax, over the cached slots in mask_BS (strictly before
  the query) plus the query token's own k/v (not yet in the cache). Returns [B, K, G, H]."""
  H = q_BKGH.shape[-1]
  qf = q_BKGH.astype(jnp.float32) / math.sqrt(H)
  s_BSKG = jnp.sum(qf[:, None] * k_BSKH[:, :, :, None, :], axis=-1, dtype=jnp.float32)
  s_BSKG = jnp.where(mask_BS[:, :, None, None], s_BSKG, -jnp.inf)
  s_BKG = jnp.sum(qf * k_BKH[:, :, None, :].astype(jnp.float32), axis=-1)
  m_BKG = jnp.maximum(jnp.max(s_BSKG, axis=1), s_BKG)
  p_BSKG = jnp.exp(s_BSKG - m_BKG[:, None])
  p_BKG = jnp.exp(s_BKG - m_BKG)
  denom_BKG = jnp.sum(p_BSKG, axis=1) + p_BKG
  out = jnp.sum(p_BSKG[..., None] * v_BSKH[:, :, :, None, :].astype(jnp.float32), axis=1)
  out = out + p_BKG[..., None] * v_BKH[:, :, None, :].astype(jnp.float32)
  return (out / denom_BKG[..., None]).astype(q_BKGH.dtype)


def decode_forward(cfg: ModelConfig, params, tok_B: jax.Array, pos_B: jax.Array, cache: dict, *,
                   dtype=jnp.float32, sharder: Optional[Sharder] = None,
                   unroll: int = 1) -> tuple[jax.Array, dict]:
  """Feeds tok_B at pos_B; returns (float32 logits [B, V], cache with slot pos_B written)."""
  B = tok_B.shape[0]
  S = cache["k"].shape[2]
  K, N, H = cfg.num_kv_heads, cfg.num_heads, cfg.head_dim
  G = N // K
  positions_B1 = pos_B[:, None].astype(jnp.int32)
  inv_freq = L_.rope_inv_freq(H, cfg.rope_theta, cfg.rope_scaling)
  cos, sin = L_.rope_cos_sin(positions_B1, inv_freq, dtype)
  mask_BS = jnp.arange(S, dtype=jnp.int32)[None, :] < positions_B1   # strictly earlier slots

  def body(x_B1D, inputs):
    lp, k_BSKH, v_BSKH = inputs                            # this layer's cache, read only
    q, k, v = D._qkv(cfg, lp, x_B1D, cos, sin, sharder)   # [B, 1, N|K, H]
    k_BKH, v_BKH = k[:, 0].astype(k_BSKH.dtype), v[:, 0].astype(v_BSKH.dtype)
    attn = _decode_attention(q[:, 0].reshape(B, K, G, H), k_BSKH, v_BSKH, mask_BS,
                             k_BKH, v_BKH)
    x_B1D = D._attn_out_and_mlp(cfg, lp, x_B1D, attn.reshape(B, 1, N, H), sharder)
    return x_B1D, (k_BKH, v_BKH)

  x_B1D = D._embed(cfg, params, tok_B[:, None], dtype, sharder)
  x_B1D, (k_LBKH, v_LBKH) = jax.lax.scan(body, x_B1D, (params["layers"], cache["k"], cache["v"]),
                                         unroll=unroll)
  # One in-place scatter of the new token's K/V for all layers, after the layer scan.
  rows_B = jnp.arange(B)
  new = {}
  for name, x_LBKH in (("k", k_LBKH), ("v", v_LBKH)):
    c = cache[name].at[:, rows_B, pos_B].set(x_LBKH)
    new[name] = constrain(c, CACHE_LOGICAL, sharder)
  h = L_.rms_norm(x_B1D, params["final_norm"], cfg.rms_norm_eps)
  logits = D.logits_from_hidden(cfg, params, h, sharder)
  return logits[:, 0], new
