"""Pure-JAX decoder (Qwen2/Qwen2.5, Qwen3, LLaMA-3.x) over an explicit params pytree.

Params layout (layers stacked on a leading L axis and run with `lax.scan`):

  embed            [V, D]
  final_norm       [D]
  lm_head          [D, V]        (absent when config.tie_embeddings)
  layers/
    attn_norm      [L, D]
    wq [L, D, N, H]   wk [L, D, K, H]   wv [L, D, K, H]   wo [L, N, H, D]
    bq [L, N, H]      bk [L, K, H]      bv [L, K, H]      (only when config.qkv_bias)
    q_norm [L, H]     k_norm [L, H]                       (only when config.qk_norm)
    mlp_norm       [L, D]
    w_gate [L, D, F]  w_up [L, D, F]  w_down [L, F, D]

KV cache: {"k": [L, B, K, S, H], "v": [L, B, K, S, H]}: heads before slots, so attention over
a layer's [B, K, S, H] is a batched GEMM over (B, K) that reads the cache as stored (with slots
before heads, XLA copied every layer's K and V into this order on each decode step).
Slot s of a row holds the token at
position s of that row, so the row's positions are also its cache slots. A chunk of T tokens
starting at position p is written to slots p..p+T-1; a query at position q attends to slots
<= q. Slots past a row's current length may hold stale values from a padded prefill: they are
never read, because a query only sees slots up to its own position and every slot below that
was written by a real token of the row. Callers must keep p + T <= S (`dynamic_update_slice`
would clamp and misplace the write).
"""
from __future__ import annotations

import functools
from typing import Any, Optional, Union

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from models import layers as L_
from models.blocked_attention import block_for, blocked_attention
from models.config import ModelConfig
from models.init import init_from_shapes
from models.sharding import Sharder, constrain

Params = dict[str, Any]


def _dots_flash(prim, *avals, **params) -> bool:
  """`dots` plus the outputs of cuDNN's flash-attention forward (its output and softmax
  statistics): the backward pass then reuses them instead of running the attention forward
  again. Elsewhere (XLA or blocked attention) the same as `dots`."""
  if "dot_product_attention_fwd" in prim.name:
    return True
  return jax.checkpoint_policies.dots_with_no_batch_dims_saveable(prim, *avals, **params)


REMAT_POLICIES = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "dots_flash": _dots_flash,
    "save_attn_out": jax.checkpoint_policies.save_only_these_names("attn_out"),
}


# --------------------------------------------------------------------------------------------
# Parameter shapes, logical axes and init
# --------------------------------------------------------------------------------------------
def param_shapes(cfg: ModelConfig) -> Params:
  """Shapes of every parameter (a pytree of tuples)."""
  D, F, N, K, H, V, L = (cfg.hidden_size, cfg.intermediate_size, cfg.num_heads,
                         cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size, cfg.num_layers)
  lay = {
      "attn_norm": (L, D), "wq": (L, D, N, H), "wk": (L, D, K, H), "wv": (L, D, K, H),
      "wo": (L, N, H, D), "mlp_norm": (L, D), "w_gate": (L, D, F), "w_up": (L, D, F),
      "w_down": (L, F, D),
  }
  if cfg.qkv_bias:
    lay.update(bq=(L, N, H), bk=(L, K, H), bv=(L, K, H))
  if cfg.qk_norm:
    lay.update(q_norm=(L, H), k_norm=(L, H))
  out = {"embed": (V, D), "final_norm": (D,), "layers": lay}
  if not cfg.tie_embeddings:
    out["lm_head"] = (D, V)
  return out


_LOGICAL = {
    "embed": ("vocab", "embed"), "final_norm": ("norm",), "lm_head": ("embed", "vocab"),
    "attn_norm": ("layers", "norm"), "mlp_norm": ("layers", "norm"),
    "wq": ("layers", "embed", "q_heads", "head_dim"),
    "wk": ("layers", "embed", "kv_heads", "head_dim"),
    "wv": ("layers", "embed", "kv_heads", "head_dim"),
    "wo": ("layers", "q_heads", "head_dim", "embed"),
    "bq": ("layers", "q_heads", "head_dim"), "bk": ("layers", "kv_heads", "head_dim"),
    "bv": ("layers", "kv_heads", "head_dim"),
    "q_norm": ("layers", "head_dim"), "k_norm": ("layers", "head_dim"),
    "w_gate": ("layers", "embed", "mlp"), "w_up": ("layers", "embed", "mlp"),
    "w_down": ("layers", "mlp", "embed"),
}


def param_logical_axes(cfg: ModelConfig) -> Params:
  """The logical axis names of every parameter, same tree structure as the params."""
  shapes = param_shapes(cfg)
  out = {k: _LOGICAL[k] for k in shapes if k != "layers"}
  out["layers"] = {k: _LOGICAL[k] for k in shapes["layers"]}
  return out


CACHE_LOGICAL = ("layers", "act_batch", "act_kv_heads", "act_kv_len", "head_dim")


def init_params(cfg: ModelConfig, rng: jax.Array, dtype=jnp.float32, std: float = 0.02) -> Params:
  """Random init (normal(std) weights, ones for norms, zeros for biases). For tests/benchmarks."""
  return init_from_shapes(param_shapes(cfg), rng, dtype, std, is_one=lambda n: "norm" in n,
                          is_zero=lambda n: n in ("bq", "bk", "bv"))


def init_cache(cfg: ModelConfig, batch: int, max_len: int, dtype=jnp.bfloat16) -> dict:
  shape = (cfg.num_layers, batch, cfg.num_kv_heads, max_len, cfg.head_dim)
  return {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)}


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------
def _qkv(cfg, lp, x_BTD, cos, sin, sharder):
  h_BTD = L_.rms_norm(x_BTD, lp["attn_norm"], cfg.rms_norm_eps)
  q = jnp.einsum("BTD,DNH->BTNH", h_BTD, lp["wq"].astype(h_BTD.dtype))
  k = jnp.einsum("BTD,DKH->BTKH", h_BTD, lp["wk"].astype(h_BTD.dtype))
  v = jnp.einsum("BTD,DKH->BTKH", h_BTD, lp["wv"].astype(h_BTD.dtype))
  if cfg.qkv_bias:
    q = q + lp["bq"].astype(q.dtype)
    k = k + lp["bk"].astype(k.dtype)
    v = v + lp["bv"].astype(v.dtype)
  if cfg.qk_norm:
    q = L_.rms_norm(q, lp["q_norm"], cfg.rms_norm_eps)
    k = L_.rms_norm(k, lp["k_norm"], cfg.rms_norm_eps)
  q = L_.apply_rope(q, cos, sin)
  k = L_.apply_rope(k, cos, sin)
  q = constrain(q, ("act_batch", "act_len", "act_heads", None), sharder)
  k = constrain(k, ("act_batch", "act_len", "act_kv_heads", None), sharder)
  v = constrain(v, ("act_batch", "act_len", "act_kv_heads", None), sharder)
  return q, k, v


def _attn_out_and_mlp(cfg, lp, x_BTD, attn_BTNH, sharder):
  attn_BTNH = checkpoint_name(attn_BTNH, "attn_out")
  x_BTD = x_BTD + jnp.einsum("BTNH,NHD->BTD", attn_BTNH, lp["wo"].astype(attn_BTNH.dtype))
  x_BTD = constrain(x_BTD, ("act_batch", "act_len", "act_embed"), sharder)
  h_BTD = L_.rms_norm(x_BTD, lp["mlp_norm"], cfg.rms_norm_eps)
  gate_BTF = jnp.einsum("BTD,DF->BTF", h_BTD, lp["w_gate"].astype(h_BTD.dtype))
  up_BTF = jnp.einsum("BTD,DF->BTF", h_BTD, lp["w_up"].astype(h_BTD.dtype))
  act_BTF = constrain(jax.nn.silu(gate_BTF) * up_BTF, ("act_batch", "act_len", "act_mlp"), sharder)
  x_BTD = x_BTD + jnp.einsum("BTF,FD->BTD", act_BTF, lp["w_down"].astype(act_BTF.dtype))
  return constrain(x_BTD, ("act_batch", "act_len", "act_embed"), sharder)


def _embed(cfg, params, tokens_BT, dtype, sharder):
  x_BTD = jnp.take(params["embed"], tokens_BT, axis=0).astype(dtype)
  return constrain(x_BTD, ("act_batch", "act_len", "act_embed"), sharder)


def _scan_layers(body, x, xs, remat: str, unroll: Union[bool, int] = False):
  """The layers as a `lax.scan` over the stacked params. `unroll`: True, fully unrolled
  (straight-line code, static slices, no [L, ...] stacks of saved activations; a longer
  compile); an int N, N layers an iteration; False or 1, one."""
  policy = REMAT_POLICIES[remat]
  n = True if unroll is True else max(1, int(unroll))
  if remat != "none":   # CSE across unrolled layers would merge the backward's recomputation
    body = jax.checkpoint(body, policy=policy, prevent_cse=n is True or n > 1)   # into the forward
  return jax.lax.scan(body, x, xs, unroll=n)


def hidden_states(cfg: ModelConfig, params: Params, tokens_BT: jax.Array, *,
                  positions_BT: Optional[jax.Array] = None,
                  segment_ids_BT: Optional[jax.Array] = None,
                  dtype=jnp.float32, remat: str = "none", attn_impl: str = "xla",
                  sharder: Optional[Sharder] = None, max_segments: int = 0,
                  attn_chunk: int = 0, frozen_layers: int = 0,
                  unroll_layers: Union[bool, int] = False) -> jax.Array:
  """Final-norm hidden states [B, T, D] of a full (no cache) forward.

  positions_BT: rope positions and causal order (default 0..T-1 per row).
  segment_ids_BT: tokens attend only within their segment; 0 marks padding (default all 1).
    Left padding: segment 0 on the pads and positions 0.. on the real tokens. Packing: one id
    per packed sequence, positions restarting at 0 in each.
  attn_impl: "xla" (einsum, any mask), "blocked" (any mask: block-sparse attention with its
    own backward pass, `models.blocked_attention`; the fast one on a CPU), or "cudnn"/"auto"
    for `jax.nn.dot_product_attention` (flash attention on GPU). With segment ids and `max_segments` > 0 (packed rows: segments
    1..M contiguous and in order, padding after them), "cudnn" runs cuDNN's packed layout
    (`layers.fused_segment_attention`; "cudnn_gqa": the same without repeating grouped-query
    K/V, where the JAX wrapper allows it); with max_segments 0 segment ids take the XLA path.
  attn_chunk: on the XLA path, query chunks of this many tokens that skip the keys after the
    chunk (`layers.causal_chunked_attention`; 0: one block). Same outputs, less work on long
    rows. With "blocked", the query and key block length (0: 128).
  frozen_layers: the first this many layers (and the embedding lookup) get no gradient: their
    output is under stop_gradient, so a backward pass stops there (same forward values).
  unroll_layers: True, the layer scan fully unrolled (`_scan_layers`): the same values; XLA sees
    each layer's weights and saved activations as their own buffers instead of slices of [L, ...]
    stacks (the checkpoint then prevents CSE, which would merge the recomputation into the
    forward and keep what the remat policy drops). An int N: N layers an iteration.
  """
  B, T = tokens_BT.shape
  if positions_BT is None:
    positions_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
  inv_freq = L_.rope_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
  cos, sin = L_.rope_cos_sin(positions_BT, inv_freq, dtype)
  masked = attn_impl in ("xla", "blocked")
  packed_fused = not masked and segment_ids_BT is not None and max_segments > 0
  fused = not masked and segment_ids_BT is None
  if not (fused or packed_fused):
    seg = jnp.ones((B, T), jnp.int32) if segment_ids_BT is None else segment_ids_BT
    mask_BTS = L_.segment_mask(positions_BT, seg)

  def body(x_BTD, lp):
    q, k, v = _qkv(cfg, lp, x_BTD, cos, sin, sharder)
    if fused:
      attn = L_.fused_causal_attention(q, k, v, attn_impl)
    elif packed_fused:
      attn = L_.fused_segment_attention(q, k, v, segment_ids_BT, positions_BT, attn_impl,
                                        max_segments)
    elif attn_impl == "blocked":
      attn = blocked_attention(q, k, v, mask_BTS, block_for(T, attn_chunk or 128))
    else:
      attn = L_.causal_chunked_attention(q, k, v, mask_BTS, attn_chunk)
    return _attn_out_and_mlp(cfg, lp, x_BTD, attn, sharder), None

  x_BTD = _embed(cfg, params, tokens_BT, dtype, sharder)
  layers = params["layers"]
  if frozen_layers > 0:
    if frozen_layers >= cfg.num_layers:
      raise ValueError(f"frozen_layers={frozen_layers} must be below the model's "
                       f"{cfg.num_layers} layers")
    bottom = jax.tree.map(lambda w: w[:frozen_layers], layers)
    layers = jax.tree.map(lambda w: w[frozen_layers:], layers)
    x_BTD, _ = _scan_layers(body, x_BTD, bottom, "none", unroll_layers)
    x_BTD = jax.lax.stop_gradient(x_BTD)
  x_BTD, _ = _scan_layers(body, x_BTD, layers, remat, unroll_layers)
  return L_.rms_norm(x_BTD, params["final_norm"], cfg.rms_norm_eps)


def lm_head_weight(cfg: ModelConfig, params: Params) -> jax.Array:
  """[D, V] output projection (the transposed embedding when tied)."""
  return params["embed"].T if cfg.tie_embeddings else params["lm_head"]


def logits_from_hidden(cfg: ModelConfig, params: Params, h_BTD: jax.Array,
                       sharder: Optional[Sharder] = None) -> jax.Array:
  w_DV = lm_head_weight(cfg, params).astype(h_BTD.dtype)
  logits = jnp.einsum("BTD,DV->BTV", h_BTD, w_DV, preferred_element_type=jnp.float32)
  return constrain(logits, ("act_batch", "act_len", "act_vocab"), sharder)


def forward(cfg: ModelConfig, params: Params, tokens_BT: jax.Array, *,
            positions_BT: Optional[jax.Array] = None,
            segment_ids_BT: Optional[jax.Array] = None, dtype=jnp.float32,
            remat: str = "none", attn_impl: str = "xla",
            sharder: Optional[Sharder] = None) -> jax.Array:
  """float32 logits [B, T, V]. See `hidden_states` for the optional arguments."""
  h = hidden_states(cfg, params, tokens_BT, positions_BT=positions_BT,
                    segment_ids_BT=segment_ids_BT, dtype=dtype, remat=remat,
                    attn_impl=attn_impl, sharder=sharder)
  return logits_from_hidden(cfg, params, h, sharder)


def forward_with_cache(cfg: ModelConfig, params: Params, tokens_BT: jax.Array,
                       start_B: jax.Array, cache: dict, *, dtype=jnp.float32,
                       sharder: Optional[Sharder] = None,
                       return_hidden: bool = False) -> tuple[jax.Array, dict]:
  """Prefill or decode a chunk of T tokens per row at positions start_B[b] + 0..T-1.

  Writes the chunk's K/V into the cache at those slots and attends to slots <= position.
  Returns (float32 logits [B, T, V] (or hidden [B, T, D] if return_hidden), new cache).
  Works for prefill (T = prompt length, start 0), single-step decode (T = 1) and appending an
  observation chunk to a running sequence (T = chunk length, start = current length).
  """
  B, T = tokens_BT.shape
  S = cache["k"].shape[3]
  positions_BT = start_B[:, None].astype(jnp.int32) + jnp.arange(T, dtype=jnp.int32)[None]
  inv_freq = L_.rope_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
  cos, sin = L_.rope_cos_sin(positions_BT, inv_freq, dtype)
  mask_BTS = jnp.arange(S, dtype=jnp.int32)[None, None, :] <= positions_BT[:, :, None]
  write = jax.vmap(lambda c_KSH, x_KTH, s: jax.lax.dynamic_update_slice(c_KSH, x_KTH, (0, s, 0)))

  def body(x_BTD, inputs):
    lp, k_cache, v_cache = inputs                        # [B, K, S, H]
    q, k, v = _qkv(cfg, lp, x_BTD, cos, sin, sharder)    # k, v [B, T, K, H]
    k_cache = write(k_cache, jnp.swapaxes(k, 1, 2).astype(k_cache.dtype), start_B)
    v_cache = write(v_cache, jnp.swapaxes(v, 1, 2).astype(v_cache.dtype), start_B)
    k_cache = constrain(k_cache, CACHE_LOGICAL[1:], sharder)
    v_cache = constrain(v_cache, CACHE_LOGICAL[1:], sharder)
    attn = L_.cache_attention(q, k_cache.astype(q.dtype), v_cache.astype(q.dtype), mask_BTS)
    return _attn_out_and_mlp(cfg, lp, x_BTD, attn, sharder), (k_cache, v_cache)

  x_BTD = _embed(cfg, params, tokens_BT, dtype, sharder)
  x_BTD, (k_new, v_new) = jax.lax.scan(body, x_BTD, (params["layers"], cache["k"], cache["v"]))
  h = L_.rms_norm(x_BTD, params["final_norm"], cfg.rms_norm_eps)
  out = h if return_hidden else logits_from_hidden(cfg, params, h, sharder)
  return out, {"k": k_new, "v": v_new}


@functools.partial(jax.jit, static_argnums=(0,), static_argnames=("dtype",))
def forward_jit(cfg: ModelConfig, params: Params, tokens_BT: jax.Array, dtype=jnp.float32):
  return forward(cfg, params, tokens_BT, dtype=dtype)
