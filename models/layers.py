"""Small numeric building blocks shared by the decoder: RMSNorm, rotary embeddings, attention."""
from __future__ import annotations

import math
from typing import Optional

import jax
import jax.numpy as jnp

from models.config import RopeScaling


def rms_norm(x: jax.Array, w: jax.Array, eps: float) -> jax.Array:
  """HF-exact RMSNorm: statistics in fp32, scale applied after casting back."""
  dtype = x.dtype
  xf = x.astype(jnp.float32)
  xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
  return w.astype(dtype) * xf.astype(dtype)


def rope_inv_freq(head_dim: int, theta: float, scaling: Optional[RopeScaling]) -> jax.Array:
  """[H/2] inverse frequencies, with LLaMA-3 scaling when configured."""
  inv = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
  if scaling is None:
    return inv
  low_wl = scaling.original_max_position_embeddings / scaling.low_freq_factor
  high_wl = scaling.original_max_position_embeddings / scaling.high_freq_factor
  wavelen = 2 * math.pi / inv
  scaled = jnp.where(wavelen > low_wl, inv / scaling.factor, inv)
  smooth = (scaling.original_max_position_embeddings / wavelen - scaling.low_freq_factor) / (
      scaling.high_freq_factor - scaling.low_freq_factor)
  smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
  medium = (wavelen >= high_wl) & (wavelen <= low_wl)
  return jnp.where(medium, smoothed, scaled)


def rope_cos_sin(positions_BT: jax.Array, inv_freq: jax.Array, dtype) -> tuple[jax.Array, jax.Array]:
  """cos, sin of shape [B, T, H] (HF layout: the half-frequencies repeated twice)."""
  freqs_BTh = positions_BT.astype(jnp.float32)[..., None] * inv_freq
  emb_BTH = jnp.concatenate([freqs_BTh, freqs_BTh], axis=-1)
  return jnp.cos(emb_BTH).astype(dtype), jnp.sin(emb_BTH).astype(dtype)


def apply_rope(x_BTNH: jax.Array, cos_BTH: jax.Array, sin_BTH: jax.Array) -> jax.Array:
  half = x_BTNH.shape[-1] // 2
  x1, x2 = x_BTNH[..., :half], x_BTNH[..., half:]
  rotated = jnp.concatenate([-x2, x1], axis=-1)
  return x_BTNH * cos_BTH[:, :, None, :] + rotated * sin_BTH[:, :, None, :]


def attention(q_BTNH: jax.Array, k_BSKH: jax.Array, v_BSKH: jax.Array,
              mask_BTS: jax.Array) -> jax.Array:
  """Grouped-query attention with an explicit boolean mask; softmax in fp32.

  Returns [B, T, N, H]. Query heads are grouped as N = K * G (head n uses kv head n // G),
  matching `repeat_kv` in transformers.
  """
  B, T, N, H = q_BTNH.shape
  K = k_BSKH.shape[2]
  G = N // K
  q_BTKGH = q_BTNH.reshape(B, T, K, G, H)
  logits_BKGTS = jnp.einsum("BTKGH,BSKH->BKGTS", q_BTKGH, k_BSKH,
                            preferred_element_type=jnp.float32) / math.sqrt(H)
  logits_BKGTS = jnp.where(mask_BTS[:, None, None], logits_BKGTS, jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(logits_BKGTS, axis=-1).astype(v_BSKH.dtype)
  out_BTKGH = jnp.einsum("BKGTS,BSKH->BTKGH", probs, v_BSKH)
  return out_BTKGH.reshape(B, T, N, H)


def fused_causal_attention(q_BTNH, k_BTKH, v_BTKH, impl: str) -> jax.Array:
  """Causal self-attention through `jax.nn.dot_product_attention` (cuDNN flash on GPU)."""
  return jax.nn.dot_product_attention(q_BTNH, k_BTKH, v_BTKH, is_causal=True,
                                      implementation=impl)
