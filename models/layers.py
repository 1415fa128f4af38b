"""Small numeric building blocks shared by the decoder: RMSNorm, rotary embeddings, attention."""
from __future__ import annotations

import functools
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

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


def cache_attention(q_BTNH: jax.Array, k_BKSH: jax.Array, v_BKSH: jax.Array,
                    mask_BTS: jax.Array) -> jax.Array:
  """`attention` over a KV cache stored heads first ([B, K, S, H], models/decoder.py): the same
  result, with the cache read in its stored order (batch dims B, K lead both GEMM operands)."""
  B, T, N, H = q_BTNH.shape
  K = k_BKSH.shape[1]
  G = N // K
  q_BKGTH = jnp.moveaxis(q_BTNH.reshape(B, T, K, G, H), 1, 3)
  logits_BKGTS = jnp.einsum("BKGTH,BKSH->BKGTS", q_BKGTH, k_BKSH,
                            preferred_element_type=jnp.float32) / math.sqrt(H)
  logits_BKGTS = jnp.where(mask_BTS[:, None, None], logits_BKGTS, jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(logits_BKGTS, axis=-1).astype(v_BKSH.dtype)
  out_BKGTH = jnp.einsum("BKGTS,BKSH->BKGTH", probs, v_BKSH)
  return jnp.moveaxis(out_BKGTH, 3, 1).reshape(B, T, N, H)


def causal_chunked_attention(q_BTNH: jax.Array, k_BTKH: jax.Array, v_BTKH: jax.Array,
                             mask_BTT: jax.Array, chunk: int) -> jax.Array:
  """`attention` of a full (no cache) forward whose mask is causal in index space (a query
  never sees a later index; `segment_mask` guarantees it), by query chunks of `chunk` tokens:
  chunk i attends to keys [0, (i + 1) * chunk) only, so the masked upper triangle above the
  chunks is never computed (about half of the score matrix for long rows). Rows that see no key
  at all (padding) may differ from `attention`; every row that sees a key is the same."""
  T = q_BTNH.shape[1]
  if chunk <= 0 or T <= chunk:
    return attention(q_BTNH, k_BTKH, v_BTKH, mask_BTT)
  outs = []
  for start in range(0, T, chunk):
    end = min(start + chunk, T)
    outs.append(attention(q_BTNH[:, start:end], k_BTKH[:, :end], v_BTKH[:, :end],
                          mask_BTT[:, start:end, :end]))
  return jnp.concatenate(outs, axis=1)


def fused_causal_attention(q_BTNH, k_BTKH, v_BTKH, impl: str) -> jax.Array:
  """Causal self-attention through `jax.nn.dot_product_attention` (cuDNN flash on GPU)."""
  impl = "cudnn" if impl == "cudnn_gqa" else impl   # GQA is native here either way
  return jax.nn.dot_product_attention(q_BTNH, k_BTKH, v_BTKH, is_causal=True,
                                      implementation=impl)


def segment_mask(positions_BT: jax.Array, segment_ids_BT: jax.Array) -> jax.Array:
  """[B, T, S] causal mask of packed rows: a query sees keys of its own segment (id > 0) at
  an earlier or equal position and index. Segment 0 (padding) sees nothing and is never seen."""
  T = segment_ids_BT.shape[1]
  seg = segment_ids_BT
  mask_BTS = ((positions_BT[:, :, None] >= positions_BT[:, None, :])
              & (seg[:, :, None] == seg[:, None, :]) & (seg[:, None, :] != 0))
  # Causal order must also hold in index space for packed rows with restarted positions.
  return mask_BTS & jnp.tril(jnp.ones((T, T), bool))[None]


def segment_seqlens_offsets(segment_ids_BT: jax.Array,
                            max_segments: int) -> tuple[jax.Array, jax.Array]:
  """cuDNN packed-layout descriptors of rows whose segments 1..M are contiguous, numbered in
  order from the row's start, with padding (id 0) after the last one.

  Returns (seqlen [B, M]: each segment's length, -1 where the row has fewer segments;
  offsets [B, M + 1]: each segment's first index, -1 where absent; the last column is -1).
  Segments numbered above `max_segments` are not described (the packer never makes them).
  """
  ids_M = jnp.arange(1, max_segments + 1, dtype=segment_ids_BT.dtype)
  len_BM = jnp.sum(segment_ids_BT[:, :, None] == ids_M, axis=1, dtype=jnp.int32)
  start_BM = jnp.cumsum(len_BM, axis=1, dtype=jnp.int32) - len_BM
  present = len_BM > 0
  seqlen_BM = jnp.where(present, len_BM, -1)
  offsets_BM = jnp.where(present, start_BM, -1)
  offsets_BM1 = jnp.concatenate([offsets_BM, jnp.full_like(offsets_BM[:, :1], -1)], axis=1)
  return seqlen_BM, offsets_BM1


CUDNN_GQA_REFUSED = (
    f"attn_impl='cudnn_gqa' needs a JAX whose cuDNN wrapper strides packed KV offsets by the "
    f"key's head count (JAX PR 39521); this JAX ({jax.__version__}) strides them by the query's, "
    f"so grouped-query K/V would be read at the wrong tokens. Use attn_impl='cudnn' (K/V "
    f"repeated to the query heads) or upgrade JAX.")


@functools.lru_cache(maxsize=None)
def cudnn_packed_gqa_ok() -> bool:
  """Whether JAX's cuDNN wrapper strides packed KV offsets by the key's own head count.

  Older JAX (0.10 among them) multiplies both the q and the kv segment offsets by the query's
  heads x head dim, so grouped-query K/V must be repeated to the query heads first; JAX PR 39521
  (merged 2026-07-29) strides the kv offsets by the key's heads. This runs the wrapper's own
  offset conversion on a two-segment row (2 query heads, 1 KV head, head dim 1) and reads which
  stride it applied; any failure (a renamed private function) answers False."""
  try:
    from jax._src.cudnn import fused_attention_stablehlo as cudnn_fa
    seqlen = np.array([[2, 2]], np.int32)
    offsets = np.array([[0, 2, -1]], np.int32)
    q, k = np.zeros((1, 4, 2, 1), np.float32), np.zeros((1, 4, 1, 1), np.float32)
    with jax.ensure_compile_time_eval():
      _, _, q_off, kv_off = cudnn_fa._fix_seqlen_offsets(seqlen, seqlen, offsets, offsets, q, k)
    q_off, kv_off = np.asarray(q_off).ravel(), np.asarray(kv_off).ravel()
    return bool(q_off[1] == 4 and kv_off[1] == 2)
  except Exception:   # noqa: BLE001 - a changed private API means: keep the repeat
    return False


def fused_segment_attention(q_BTNH, k_BTKH, v_BTKH, segment_ids_BT, positions_BT, impl: str,
                            max_segments: int) -> jax.Array:
  """Causal self-attention within segments of packed rows (0 = padding), without a [T, T] mask
  on GPU.

  impl "cudnn": cuDNN flash attention in its packed (ragged-offset) layout through JAX's cuDNN
  wrapper, every segment attended as its own causal sequence, with grouped-query KV heads
  repeated to the query heads first (older wrappers, JAX 0.10 among them, stride the KV
  offsets by the query's head count). impl "cudnn_gqa": the same with K/V at their own heads
  (no repeat, no group sum in the backward), for a wrapper that strides KV offsets by the
  key's heads (`cudnn_packed_gqa_ok`, JAX PR 39521); refused on one that does not. Padding
  rows' outputs are set to 0. Any other impl: `jax.nn.dot_product_attention` with the segment mask
  (`segment_mask`), i.e. the XLA path.
  """
  if impl not in ("cudnn", "cudnn_gqa"):
    mask = segment_mask(positions_BT, segment_ids_BT)[:, None]
    impl_arg = None if impl in ("auto", "xla") else impl
    return jax.nn.dot_product_attention(q_BTNH, k_BTKH, v_BTKH, mask=mask,
                                        implementation=impl_arg)
  from jax._src.cudnn import fused_attention_stablehlo as cudnn_fa
  # cuDNN's backward pass leaves non-finite q gradients at tokens outside every segment (on an
  # H200, 2026-12-05: 804 of them in bench/cudnn_grad_check.py's rows, and a whole
  # ssp_small_h200 step with NaN gradient norms); the projections' weight gradients sum over
  # every token, so the select below keeps only the segments' gradients (then finite, and equal
  # to the XLA path's within bf16).
  real_BT11 = (segment_ids_BT > 0)[:, :, None, None]
  q_BTNH, k_BTKH, v_BTKH = (jnp.where(real_BT11, x, jax.lax.stop_gradient(x))
                            for x in (q_BTNH, k_BTKH, v_BTKH))
  N, H = q_BTNH.shape[2], q_BTNH.shape[3]
  G = N // k_BTKH.shape[2]
  if impl == "cudnn_gqa" and G > 1 and not cudnn_packed_gqa_ok():
    raise ValueError(CUDNN_GQA_REFUSED)
  if impl == "cudnn" and G > 1:
    k_BTKH, v_BTKH = jnp.repeat(k_BTKH, G, axis=2), jnp.repeat(v_BTKH, G, axis=2)
  seqlen_BM, offsets_BM1 = segment_seqlens_offsets(segment_ids_BT, max_segments)
  out = cudnn_fa.dot_product_attention(
      q_BTNH, k_BTKH, v_BTKH, bias=None, mask=None, q_seqlen=seqlen_BM, kv_seqlen=seqlen_BM,
      q_offsets=offsets_BM1, kv_offsets=offsets_BM1, scale=1.0 / math.sqrt(H),
      mask_type=cudnn_fa.MaskType.PADDING_CAUSAL, qkv_layout="BTNH")
  # Padding tokens belong to no segment: whatever cuDNN leaves there is replaced (a select, so
  # even non-finite garbage neither reaches the loss nor the gradients).
  return jnp.where(real_BT11, out, jnp.zeros_like(out))
