"""One decode step (T = 1) tuned for the while_loop: same math as `models.forward_with_cache`.

Differences from the generic chunk forward, all about memory traffic at T = 1:
  * Layers are unrolled over per-layer weight buffers (`decode_params`), so no weight is sliced
    out of a stacked array (and copied) on every step.
  * Each layer writes its new K/V at (row, position) in place into its own carried cache buffer
    ([B, K, S, H], heads before slots), then attends over slots <= position reading that buffer
    as stored: no slice of a stacked cache and no transpose, so no copy of the cache per step
    (tests/test_rollout_overhead.py reads the compiled loop). The earlier read-only variant,
    "einsum_readonly", attends over the slots before the query plus its own k/v and writes all
    layers' K/V at the end; XLA then copies the whole cache every step, see decode_forward.
  * Attention over the cache is two batched GEMMs (`einsum`, the default; on an H200 it is 1.7x
    faster end to end than a multiply-reduce over the cache layout, see bench/RESULTS.md).
Equality with `forward_with_cache` is tested (tests/test_sampling_parity.py, HF greedy parity).
"""
from __future__ import annotations

import functools
import math
from typing import Optional

import jax
import jax.numpy as jnp

from models import decoder as D
from models.config import ModelConfig
from models.decoder import CACHE_LOGICAL
from models import layers as L_
from models.sharding import Sharder, constrain
from ssp_jax.sampling import dense_pallas as DP
from ssp_jax.sampling import gemm_pallas as GP
from ssp_jax.sampling import paged_pallas as PP
from ssp_jax.sampling import paged as PG


def _decode_attention(q_BKGH, k_BKSH, v_BKSH, mask_BS, k_BKH, v_BKH, einsum: bool = False):
  """Single-query GQA attention, fp32 softmax, over the cached slots in mask_BS (strictly before
  the query) plus the query token's own k/v (not yet in the cache). Returns [B, K, G, H].
  Used by "einsum_readonly" (the cache stays read-only inside the layers)."""
  H = q_BKGH.shape[-1]
  qf = q_BKGH.astype(jnp.float32) / math.sqrt(H)
  if einsum:  # dot_general (batched GEMMs over B, K) instead of multiply-reduce
    s_BKGS = jnp.einsum("BKGH,BKSH->BKGS", (q_BKGH / math.sqrt(H)).astype(k_BKSH.dtype), k_BKSH,
                        preferred_element_type=jnp.float32)
  else:
    s_BKGS = jnp.sum(qf[:, :, :, None] * k_BKSH[:, :, None], axis=-1, dtype=jnp.float32)
  s_BKGS = jnp.where(mask_BS[:, None, None, :], s_BKGS, -jnp.inf)
  s_BKG = jnp.sum(qf * k_BKH[:, :, None, :].astype(jnp.float32), axis=-1)
  m_BKG = jnp.maximum(jnp.max(s_BKGS, axis=-1), s_BKG)
  p_BKGS = jnp.exp(s_BKGS - m_BKG[..., None])
  p_BKG = jnp.exp(s_BKG - m_BKG)
  denom_BKG = jnp.sum(p_BKGS, axis=-1) + p_BKG
  if einsum:
    out = jnp.einsum("BKGS,BKSH->BKGH", p_BKGS.astype(v_BKSH.dtype), v_BKSH,
                     preferred_element_type=jnp.float32)
  else:
    out = jnp.sum(p_BKGS[..., None] * v_BKSH[:, :, None].astype(jnp.float32), axis=3)
  out = out + p_BKG[..., None] * v_BKH[:, :, None, :].astype(jnp.float32)
  return (out / denom_BKG[..., None]).astype(q_BKGH.dtype)


def _cached_attention(q_BKGH, k_BKSH, v_BKSH, mask_BS, einsum: bool):
  """Single-query GQA attention, fp32 softmax, over the cached slots in mask_BS (the query's own
  slot included: its k/v were written first). Returns [B, K, G, H]. With the cache stored heads
  first, "einsum" is two batched GEMMs over (B, K) that read each layer's cache as stored."""
  H = q_BKGH.shape[-1]
  if einsum:  # dot_general (batched GEMMs) instead of multiply-reduce
    s_BKGS = jnp.einsum("BKGH,BKSH->BKGS", (q_BKGH / math.sqrt(H)).astype(k_BKSH.dtype), k_BKSH,
                        preferred_element_type=jnp.float32)
  else:
    qf = q_BKGH.astype(jnp.float32) / math.sqrt(H)
    s_BKGS = jnp.sum(qf[:, :, :, None] * k_BKSH[:, :, None], axis=-1, dtype=jnp.float32)
  s_BKGS = jnp.where(mask_BS[:, None, None, :], s_BKGS, -jnp.inf)
  p_BKGS = jnp.exp(s_BKGS - jnp.max(s_BKGS, axis=-1, keepdims=True))
  denom_BKG = jnp.sum(p_BKGS, axis=-1)
  if einsum:
    out = jnp.einsum("BKGS,BKSH->BKGH", p_BKGS.astype(v_BKSH.dtype), v_BKSH,
                     preferred_element_type=jnp.float32)
  else:
    out = jnp.sum(p_BKGS[..., None] * v_BKSH[:, :, None].astype(jnp.float32), axis=3)
  return (out / denom_BKG[..., None]).astype(q_BKGH.dtype)


def decode_params(cfg: ModelConfig, params, dtype, fuse: bool = False) -> dict:
  """Params laid out for decoding, built once per rollout call: weights cast to `dtype`, the
  stacked layers split into a list of per-layer dicts, and the [D, V] output projection
  materialised (the transposed embedding when tied). Inside the while_loop every weight is then
  a whole buffer that the GEMMs read directly; slicing layer l out of a stacked [L, ...] weight
  on every step made XLA copy it first (measured on an H200: 27 -> 22 ms per 7B step).

  fuse: also concatenate each layer's q/k/v projections into one [D, (N + 2K) * H] weight and
  gate/up into one [D, 2F] weight, so a step runs two GEMMs where it ran five (at T = 1 the
  small K/V GEMMs are launch-bound). Same math; for unsharded decoding only (a tensor-sharded
  concatenation would split the heads differently from the separate weights)."""
  cast = lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x
  layers = [jax.tree.map(lambda x, l=l: cast(x[l]), params["layers"])
            for l in range(cfg.num_layers)]
  if fuse:
    layers = [_fuse_layer(cfg, lp) for lp in layers]
  return {"embed": cast(params["embed"]), "final_norm": cast(params["final_norm"]),
          "lm_head": cast(D.lm_head_weight(cfg, params)), "layers": layers}


def _fuse_layer(cfg: ModelConfig, lp: dict) -> dict:
  """One layer's weights with w_qkv [D, (N + 2K) * H] (and b_qkv) and w_gate_up [D, 2F]."""
  D_ = cfg.hidden_size
  lp = dict(lp)
  wq, wk, wv = (lp.pop(n).reshape(D_, -1) for n in ("wq", "wk", "wv"))
  lp["w_qkv"] = jnp.concatenate([wq, wk, wv], axis=1)
  if cfg.qkv_bias:
    lp["b_qkv"] = jnp.concatenate([lp.pop(n).reshape(-1) for n in ("bq", "bk", "bv")])
  lp["w_gate_up"] = jnp.concatenate([lp.pop("w_gate"), lp.pop("w_up")], axis=1)
  return lp


# The decode step's layer GEMMs (`decode_forward(matmul=...)`): "pallas" all four as
# gemm_pallas kernels; "pallas_residual" only the two with a residual add (o and down, K split),
# q/k/v and gate/up (with their norms) stay XLA's: on one H100 (2026-12-08, bench/decode_gemm.py,
# 0.5B at 256 rows) the kernel beat cuBLAS on o and down (6.7 / 16.2 against 8.0 / 21.5 us) and
# lost on the norm-fused two (16.7 / 46.5 against 9.5 / 23.5 us).
MATMULS = ("xla", "pallas", "pallas_residual")


def _pallas_gemm(matmul: str, M: int, K: int, N: int, swiglu: bool = False,
                 residual: bool = False) -> bool:
  """Whether a layer GEMM of the decode step runs gemm_pallas.matmul: matmul "pallas" (or
  "pallas_residual" for a GEMM with a residual add) and a shape the kernel covers
  (`GP.eligible`: K and N multiples of 16; any rows, padded); else XLA's dot."""
  wanted = matmul == "pallas" or (matmul == "pallas_residual" and residual)
  return wanted and GP.eligible(M, K, N, swiglu)


def _interpret() -> bool:
  return jax.default_backend() == "cpu"


def _qkv_fused(cfg, lp, x_BTD, matmul: str = "xla"):
  """RMSNorm, then the fused q/k/v projection (+ bias): [B, T, (N + 2K) * H]. matmul "pallas"
  at T = 1: one kernel (gemm_pallas.matmul with the norm and the bias inside)."""
  B, T, D_ = x_BTD.shape
  E = lp["w_qkv"].shape[1]
  if T == 1 and _pallas_gemm(matmul, B, D_, E):
    out = GP.matmul(x_BTD[:, 0], lp["w_qkv"], bias_N=lp.get("b_qkv"), norm_K=lp["attn_norm"],
                    norm_eps=cfg.rms_norm_eps, interpret=_interpret())
    return out[:, None]
  h_BTD = L_.rms_norm(x_BTD, lp["attn_norm"], cfg.rms_norm_eps)
  qkv_BTE = jnp.einsum("BTD,DE->BTE", h_BTD, lp["w_qkv"].astype(h_BTD.dtype))
  if cfg.qkv_bias:
    qkv_BTE = qkv_BTE + lp["b_qkv"].astype(qkv_BTE.dtype)
  return qkv_BTE


def _qkv(cfg, lp, x_BTD, cos, sin, sharder, matmul: str = "xla"):
  """D._qkv, or one GEMM over the fused weight of `_fuse_layer` (T = 1 in the decode step; the
  paged chunk prefill, sampling/paged_prefill.py, runs it on chunks of T tokens)."""
  if "w_qkv" not in lp:
    return D._qkv(cfg, lp, x_BTD, cos, sin, sharder)
  B, T = x_BTD.shape[:2]
  N, K, H = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
  qkv_BTE = _qkv_fused(cfg, lp, x_BTD, matmul)
  q = qkv_BTE[..., :N * H].reshape(B, T, N, H)
  k = qkv_BTE[..., N * H:(N + K) * H].reshape(B, T, K, H)
  v = qkv_BTE[..., (N + K) * H:].reshape(B, T, K, H)
  if cfg.qk_norm:
    q = L_.rms_norm(q, lp["q_norm"], cfg.rms_norm_eps)
    k = L_.rms_norm(k, lp["k_norm"], cfg.rms_norm_eps)
  return L_.apply_rope(q, cos, sin), L_.apply_rope(k, cos, sin), v


def _rope_in_kernel(cfg: ModelConfig, lp: dict, attn_impl: str) -> bool:
  """Whether a layer's Pallas kernel takes the raw fused projection and applies RoPE itself
  (`DP.rope_inputs`): "pallas_rope" with fused q/k/v weights and no q/k norm (Qwen3's norms run
  before RoPE, in XLA: such models, and sharded ones, take the "pallas" path)."""
  return attn_impl == "pallas_rope" and "w_qkv" in lp and not cfg.qk_norm


def _qkv_raw(cfg, lp, x_B1D, matmul: str = "xla"):
  """The fused projection [B, N + 2K, H] (bias added, no RoPE) for `_rope_in_kernel` layers."""
  qkv_B1E = _qkv_fused(cfg, lp, x_B1D, matmul)
  return qkv_B1E.reshape(x_B1D.shape[0], cfg.num_heads + 2 * cfg.num_kv_heads, cfg.head_dim)


def _attn_out_and_mlp(cfg, lp, x_B1D, attn_B1NH, sharder, matmul: str = "xla"):
  """D._attn_out_and_mlp, or with one gate/up GEMM over the fused weight of `_fuse_layer`;
  matmul "pallas": the kernels of gemm_pallas.matmul (o + residual, norm + gate/up + SiLU,
  down + residual) where the shapes fit; "pallas_residual": o and down only."""
  if "w_gate_up" not in lp:
    return D._attn_out_and_mlp(cfg, lp, x_B1D, attn_B1NH, sharder)
  B, _, N, H = attn_B1NH.shape
  D_ = x_B1D.shape[-1]
  F2 = lp["w_gate_up"].shape[1]
  if x_B1D.shape[1] != 1:   # the paged prefill's chunks of T tokens: XLA's dots
    matmul = "xla"
  if _pallas_gemm(matmul, B, N * H, D_, residual=True):
    x_BD = GP.matmul(attn_B1NH.reshape(B, N * H), lp["wo"].reshape(N * H, D_), x_B1D[:, 0],
                     interpret=_interpret())
    x_B1D = x_BD[:, None]
  else:
    x_B1D = x_B1D + jnp.einsum("BTNH,NHD->BTD", attn_B1NH, lp["wo"].astype(attn_B1NH.dtype))
  if (_pallas_gemm(matmul, B, D_, F2, swiglu=True)
      and _pallas_gemm(matmul, B, F2 // 2, D_, residual=True)):
    act_BF = GP.matmul(x_B1D[:, 0], lp["w_gate_up"], norm_K=lp["mlp_norm"],
                       norm_eps=cfg.rms_norm_eps, swiglu=True, interpret=_interpret())
    return GP.matmul(act_BF, lp["w_down"], x_B1D[:, 0], interpret=_interpret())[:, None]
  h_B1D = L_.rms_norm(x_B1D, lp["mlp_norm"], cfg.rms_norm_eps)
  gu_B1F2 = jnp.einsum("BTD,DF->BTF", h_B1D, lp["w_gate_up"].astype(h_B1D.dtype))
  F = gu_B1F2.shape[-1] // 2
  act_B1F = jax.nn.silu(gu_B1F2[..., :F]) * gu_B1F2[..., F:]
  if _pallas_gemm(matmul, B, F, D_, residual=True):   # "pallas_residual": down + x in a kernel
    return GP.matmul(act_B1F[:, 0], lp["w_down"], x_B1D[:, 0], interpret=_interpret())[:, None]
  return x_B1D + jnp.einsum("BTF,FD->BTD", act_B1F, lp["w_down"].astype(act_B1F.dtype))


ATTN_IMPLS = ("reduce", "einsum", "einsum_readonly", "cudnn", "xla", "pallas", "pallas_rope")


def decode_forward(cfg: ModelConfig, dparams: dict, tok_B: jax.Array, pos_B: jax.Array,
                   cache: dict, *, dtype=jnp.float32, sharder: Optional[Sharder] = None,
                   attn_impl: str = "einsum", hidden: bool = False,
                   matmul: str = "xla") -> tuple[jax.Array, dict]:
  """Feeds tok_B at pos_B; returns (float32 logits [B, V], cache with slot pos_B written).
  `dparams` comes from `decode_params`. hidden: the final-normed hidden state [B, D] in place
  of the logits (the fused head, sampling/head_pallas.py, projects and draws from it).

  cache: {"k", "v": L per-layer buffers [B, K, S, H]} (sampling/loop.py), or a paged cache.
  attn_impl: "einsum" (default; batched GEMMs) or "reduce" (multiply-reduce): each layer writes
    its new K/V in place into its buffer, then attends over slots <= pos_B;
    "einsum_readonly": the cache is read-only inside the layers (two-part softmax over the cached
    slots plus the query's own k/v) and all layers' K/V are written after the last layer. With
    the stacked cache of before 2026-12-01, XLA then copied the whole cache on every step and
    held about 1.5x the cache in temporaries (the 7B, 256-row, 1,665-slot step needed 33.5 GiB;
    bench/decode_memory.py). Kept to compare on GPUs. "cudnn" / "xla" write each layer's K/V
    first and call `jax.nn.dot_product_attention` with `key_value_seq_lengths = pos + 1`
    ("cudnn": the cuDNN flash kernel on NVIDIA GPUs), on a transposed copy of the layer's
    buffer (it takes [B, S, K, H]). "pallas": one fused kernel per layer (sampling/dense_pallas.py:
    online softmax, reads each row's K/V once up to its position and stores the new K/V at it,
    in place; Pallas interpret mode on a CPU, slow). "pallas_rope": the same kernel also splits
    the fused projection's heads and applies RoPE and the scale itself, in place of XLA's split,
    RoPE, scale and pad kernels (fused q/k/v weights and no q/k norm; else "pallas").
  matmul: the layer GEMMs: "xla" (XLA's dot; cuBLAS on GPUs) or "pallas" (sampling/gemm_pallas.py:
    the norms, the bias, SiLU and the residual adds inside four kernels a layer; fused weights,
    `decode_params(fuse=True)`, and widths that are multiples of 16, else XLA's; rows are padded
    to a multiple of 16; unsharded only) or "pallas_residual" (only o and down, with their
    residual adds, as kernels)."""
  if matmul not in MATMULS:
    raise ValueError(f"decode matmul {matmul!r} unknown; use one of {MATMULS}")
  if "table" in cache:
    return _paged_decode_forward(cfg, dparams, tok_B, pos_B, cache, dtype=dtype, sharder=sharder,
                                 attn_impl=attn_impl, hidden=hidden, matmul=matmul)
  if attn_impl not in ATTN_IMPLS:
    raise ValueError(f"decode attention {attn_impl!r} unknown; use one of {ATTN_IMPLS}")
  B = tok_B.shape[0]
  S = cache["k"][0].shape[2]                              # L buffers [B, K, S, H]
  K, N, H = cfg.num_kv_heads, cfg.num_heads, cfg.head_dim
  G = N // K
  positions_B1 = pos_B[:, None].astype(jnp.int32)
  inv_freq = L_.rope_inv_freq(H, cfg.rope_theta, cfg.rope_scaling)
  cos, sin = L_.rope_cos_sin(positions_B1, inv_freq, dtype)
  mask_BS = jnp.arange(S, dtype=jnp.int32)[None, :] < positions_B1   # strictly earlier slots
  upto_BS = jnp.arange(S, dtype=jnp.int32)[None, :] <= positions_B1  # the query's slot too

  x_B1D = D._embed(cfg, dparams, tok_B[:, None], dtype, sharder)
  rows_B = jnp.arange(B)
  k_all, v_all = list(cache["k"]), list(cache["v"])
  new_k, new_v = [], []
  for l, lp in enumerate(dparams["layers"]):             # unrolled: static, whole weights
    if _rope_in_kernel(cfg, lp, attn_impl):   # RoPE, the split and the K/V store in the kernel
      attn, k_all[l], v_all[l] = DP.dense_attention_write_qkv(
          _qkv_raw(cfg, lp, x_B1D, matmul), cos[:, 0], sin[:, 0], k_all[l], v_all[l], pos_B,
          num_heads=N, interpret=jax.default_backend() == "cpu")
      x_B1D = _attn_out_and_mlp(cfg, lp, x_B1D, attn.reshape(B, 1, N, H), sharder, matmul)
      continue
    q, k, v = _qkv(cfg, lp, x_B1D, cos, sin, sharder, matmul)   # [B, 1, N|K, H]
    k_BKH, v_BKH = k[:, 0].astype(k_all[l].dtype), v[:, 0].astype(v_all[l].dtype)
    if attn_impl == "einsum_readonly":
      attn_B1NH = _decode_attention(q[:, 0].reshape(B, K, G, H), k_all[l], v_all[l], mask_BS,
                                    k_BKH, v_BKH, True).reshape(B, 1, N, H)
      new_k.append(k_BKH)
      new_v.append(v_BKH)
      x_B1D = _attn_out_and_mlp(cfg, lp, x_B1D, attn_B1NH, sharder, matmul)
      continue
    if attn_impl in ("pallas", "pallas_rope"):   # the kernel stores k/v at pos itself
      attn, k_all[l], v_all[l] = DP.dense_attention_write(
          q[:, 0].reshape(B, K, G, H), k_all[l], v_all[l], pos_B, k_BKH, v_BKH,
          interpret=jax.default_backend() == "cpu")
      x_B1D = _attn_out_and_mlp(cfg, lp, x_B1D, attn.reshape(B, 1, N, H), sharder, matmul)
      continue
    k_all[l] = k_all[l].at[rows_B, :, pos_B].set(k_BKH)   # in place on the loop carry
    v_all[l] = v_all[l].at[rows_B, :, pos_B].set(v_BKH)
    if attn_impl in ("reduce", "einsum"):
      attn_B1NH = _cached_attention(q[:, 0].reshape(B, K, G, H), k_all[l], v_all[l], upto_BS,
                                    attn_impl == "einsum").reshape(B, 1, N, H)
    else:
      attn_B1NH = jax.nn.dot_product_attention(   # takes [B, S, K, H]: a transposed copy
          q, jnp.swapaxes(k_all[l], 1, 2).astype(q.dtype),
          jnp.swapaxes(v_all[l], 1, 2).astype(q.dtype),
          key_value_seq_lengths=pos_B.astype(jnp.int32) + 1, implementation=attn_impl)
    x_B1D = _attn_out_and_mlp(cfg, lp, x_B1D, attn_B1NH, sharder, matmul)
  if attn_impl == "einsum_readonly":   # the new K/V of all layers written after the last layer
    k_all = [x.at[rows_B, :, pos_B].set(k) for x, k in zip(k_all, new_k)]
    v_all = [x.at[rows_B, :, pos_B].set(v) for x, v in zip(v_all, new_v)]
  new = {"k": [constrain(x, CACHE_LOGICAL[1:], sharder) for x in k_all],
         "v": [constrain(x, CACHE_LOGICAL[1:], sharder) for x in v_all]}
  return _logits(cfg, dparams, x_B1D, sharder, hidden), new


def _logits(cfg, dparams, x_B1D, sharder, hidden: bool = False):
  h_B1D = L_.rms_norm(x_B1D, dparams["final_norm"], cfg.rms_norm_eps)
  if hidden:
    return h_B1D[:, 0]
  logits = jnp.einsum("BTD,DV->BTV", h_B1D, dparams["lm_head"].astype(h_B1D.dtype),
                      preferred_element_type=jnp.float32)
  logits = constrain(logits, ("act_batch", "act_len", "act_vocab"), sharder)
  return logits[:, 0]


def _paged_decode_forward(cfg, dparams, tok_B, pos_B, cache, *, dtype, sharder, attn_impl,
                          hidden=False, matmul="xla"):
  """decode_forward over a paged cache (sampling/paged.py): each layer writes its new K/V at
  (page, offset) of pos_B (first, or inside the "pallas" kernel), and attends over slots
  <= pos_B through the page table.
  attn_impl: "gather" (pure JAX, any backend), "pallas" (sampling/paged_pallas.py: one fused
  kernel a layer that also stores the new K/V, so no scatter), "pallas_rope" (the same kernel,
  also splitting the fused projection's heads and applying RoPE itself; "pallas" without fused
  weights or with a q/k norm) or "pallas_jax" (JAX's library kernel);
  the dense names ("einsum", "reduce", ...) mean "gather" here."""
  impl = attn_impl if attn_impl in PG.PAGED_ATTN_IMPLS else "gather"
  B = tok_B.shape[0]
  K, N, H = cfg.num_kv_heads, cfg.num_heads, cfg.head_dim
  G = N // K
  table_BC = cache["table"]
  T = cache["k"][0].shape[2]
  positions_B1 = pos_B[:, None].astype(jnp.int32)
  inv_freq = L_.rope_inv_freq(H, cfg.rope_theta, cfg.rope_scaling)
  cos, sin = L_.rope_cos_sin(positions_B1, inv_freq, dtype)
  page_B, off_B = PG.slot_of(table_BC, pos_B.astype(jnp.int32), T)
  len_B = pos_B.astype(jnp.int32) + 1
  interpret = jax.default_backend() == "cpu"   # the kernels' interpret mode (slow; for tests)
  if impl == "gather":
    attend = PG.gather_attention
  else:
    attend = functools.partial(PG.pallas_attention, interpret=interpret)
  x_B1D = D._embed(cfg, dparams, tok_B[:, None], dtype, sharder)
  new_k, new_v = [], []
  for l, lp in enumerate(dparams["layers"]):
    if _rope_in_kernel(cfg, lp, impl):   # RoPE, the split and the K/V store in the kernel
      attn_BKGH, kp, vp = PP.paged_attention_write_qkv(
          _qkv_raw(cfg, lp, x_B1D, matmul), cos[:, 0], sin[:, 0], cache["k"][l], cache["v"][l],
          table_BC, pos_B, num_heads=N, interpret=interpret)
      new_k.append(kp)
      new_v.append(vp)
      x_B1D = _attn_out_and_mlp(cfg, lp, x_B1D, attn_BKGH.reshape(B, 1, N, H), sharder, matmul)
      continue
    q, k, v = _qkv(cfg, lp, x_B1D, cos, sin, sharder, matmul)   # [B, 1, N|K, H]
    q_BKGH = q[:, 0].reshape(B, K, G, H)
    if impl in ("pallas", "pallas_rope"):   # the kernel stores k/v at (page, offset) of pos
      attn_BKGH, kp, vp = PP.paged_attention_write(q_BKGH, cache["k"][l], cache["v"][l],
                                                   table_BC, pos_B, k[:, 0], v[:, 0],
                                                   interpret=interpret)
    else:
      kp = PG.write_token(cache["k"][l], page_B, off_B, k[:, 0])
      vp = PG.write_token(cache["v"][l], page_B, off_B, v[:, 0])
      attn_BKGH = attend(q_BKGH, kp, vp, table_BC, len_B)
    attn_B1NH = attn_BKGH.reshape(B, 1, N, H)
    new_k.append(kp)
    new_v.append(vp)
    x_B1D = _attn_out_and_mlp(cfg, lp, x_B1D, attn_B1NH, sharder, matmul)
  return (_logits(cfg, dparams, x_B1D, sharder, hidden),
          {"k": new_k, "v": new_v, "table": table_BC})
