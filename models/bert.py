"""Pure-JAX BERT encoder (MiniLM, E5, any HF `BertModel`) over an explicit params pytree.

Embeddings (token + absolute position + token type, LayerNorm), then post-LayerNorm blocks:
  x = LN(x + Attn(x));  x = LN(x + W_out gelu(W_in x))
with exact (erf) GELU and a padding mask on the keys. Sentence embeddings are the mean of the
last hidden states over the attention mask, L2-normalised (sentence-transformers / E5 style).

Params layout (layers stacked on a leading L axis and run with `lax.scan`):

  tok_embed [V, D]   pos_embed [P, D]   type_embed [Y, D]   embed_norm {scale, bias} [D]
  layers/
    wq, wk, wv [L, D, N, H]   bq, bk, bv [L, N, H]   wo [L, N, H, D]   bo [L, D]
    attn_norm_scale, attn_norm_bias [L, D]
    w_in [L, D, F]  b_in [L, F]  w_out [L, F, D]  b_out [L, D]
    mlp_norm_scale, mlp_norm_bias [L, D]
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import json
import math
import os
from typing import Any, Optional

import jax
import jax.numpy as jnp

from models.init import init_from_shapes
import numpy as np

from models.config import ConfigError
from models.sharding import Sharder, constrain

Params = dict[str, Any]
_GELU = {"gelu": False, "gelu_new": True, "gelu_pytorch_tanh": True}  # name -> tanh approx?


@dataclasses.dataclass(frozen=True)
class BertConfig:
  vocab_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  intermediate_size: int
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12
  hidden_act: str = "gelu"
  pad_token_id: int = 0

  def __post_init__(self):
    if self.hidden_size % self.num_heads:
      raise ConfigError(f"hidden_size {self.hidden_size} is not divisible by num_attention_heads "
                        f"{self.num_heads}")
    if self.hidden_act not in _GELU:
      raise ConfigError(f"hidden_act {self.hidden_act!r} is not supported; expected one of "
                        f"{sorted(_GELU)}")

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads

  @classmethod
  def from_hf_dict(cls, hf: dict[str, Any]) -> "BertConfig":
    mt = hf.get("model_type", "bert")
    if mt not in ("bert",):
      raise ConfigError(f"model_type {mt!r} is not a BERT encoder; the retriever encoder must be "
                        "a BertModel checkpoint (MiniLM, E5, BGE, ...)")
    pe = hf.get("position_embedding_type", "absolute")
    if pe != "absolute":
      raise ConfigError(f"position_embedding_type {pe!r} is not supported (only 'absolute')")
    return cls(vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
               num_layers=hf["num_hidden_layers"], num_heads=hf["num_attention_heads"],
               intermediate_size=hf["intermediate_size"],
               max_position_embeddings=hf.get("max_position_embeddings", 512),
               type_vocab_size=hf.get("type_vocab_size", 2),
               layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
               hidden_act=hf.get("hidden_act", "gelu"), pad_token_id=hf.get("pad_token_id") or 0)

  @classmethod
  def from_hf_dir(cls, path: str) -> "BertConfig":
    cfg_path = os.path.join(path, "config.json")
    if not os.path.exists(cfg_path):
      raise FileNotFoundError(f"{cfg_path} not found; the encoder path must be an HF BERT directory")
    with open(cfg_path) as f:
      return cls.from_hf_dict(json.load(f))


# --------------------------------------------------------------------------------------------
# Shapes, logical axes, init
# --------------------------------------------------------------------------------------------
def param_shapes(cfg: BertConfig) -> Params:
  D, F, N, H, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_heads, cfg.head_dim, cfg.num_layers
  return {
      "tok_embed": (cfg.vocab_size, D), "pos_embed": (cfg.max_position_embeddings, D),
      "type_embed": (cfg.type_vocab_size, D), "embed_norm_scale": (D,), "embed_norm_bias": (D,),
      "layers": {
          "wq": (L, D, N, H), "wk": (L, D, N, H), "wv": (L, D, N, H),
          "bq": (L, N, H), "bk": (L, N, H), "bv": (L, N, H), "wo": (L, N, H, D), "bo": (L, D),
          "attn_norm_scale": (L, D), "attn_norm_bias": (L, D),
          "w_in": (L, D, F), "b_in": (L, F), "w_out": (L, F, D), "b_out": (L, D),
          "mlp_norm_scale": (L, D), "mlp_norm_bias": (L, D),
      },
  }


_LOGICAL = {
    "tok_embed": ("vocab", "embed"), "pos_embed": (None, "embed"), "type_embed": (None, "embed"),
    "embed_norm_scale": ("norm",), "embed_norm_bias": ("norm",),
    "wq": ("layers", "embed", "q_heads", "head_dim"), "wk": ("layers", "embed", "q_heads", "head_dim"),
    "wv": ("layers", "embed", "q_heads", "head_dim"), "bq": ("layers", "q_heads", "head_dim"),
    "bk": ("layers", "q_heads", "head_dim"), "bv": ("layers", "q_heads", "head_dim"),
    "wo": ("layers", "q_heads", "head_dim", "embed"), "bo": ("layers", "norm"),
    "attn_norm_scale": ("layers", "norm"), "attn_norm_bias": ("layers", "norm"),
    "w_in": ("layers", "embed", "mlp"), "b_in": ("layers", "mlp"),
    "w_out": ("layers", "mlp", "embed"), "b_out": ("layers", "norm"),
    "mlp_norm_scale": ("layers", "norm"), "mlp_norm_bias": ("layers", "norm"),
}


def param_logical_axes(cfg: BertConfig) -> Params:
  """Logical axis names of every parameter (same tree as the params)."""
  shapes = param_shapes(cfg)
  out = {k: _LOGICAL[k] for k in shapes if k != "layers"}
  out["layers"] = {k: _LOGICAL[k] for k in shapes["layers"]}
  return out


def init_params(cfg: BertConfig, rng: jax.Array, dtype=jnp.float32, std: float = 0.02) -> Params:
  """Random init (normal(std) weights, ones for norm scales, zeros for biases)."""
  return init_from_shapes(param_shapes(cfg), rng, dtype, std,
                          is_one=lambda n: "norm_scale" in n,
                          is_zero=lambda n: "bias" in n or n in ("bq", "bk", "bv", "bo", "b_in",
                                                                 "b_out"))


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------
def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, eps: float) -> jax.Array:
  """LayerNorm with fp32 statistics, result in x's dtype."""
  xf = x.astype(jnp.float32)
  mean = jnp.mean(xf, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(xf - mean), axis=-1, keepdims=True)
  y = (xf - mean) * jax.lax.rsqrt(var + eps)
  return (y * scale.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


def _einsum(eq: str, a: jax.Array, b: jax.Array, matmul_dtype) -> jax.Array:
  """einsum in a's dtype; with matmul_dtype (e.g. bf16 under fp32 activations) the operands
  are cast to it and the products accumulated and returned in a's dtype."""
  if matmul_dtype is None or jnp.dtype(matmul_dtype) == a.dtype:
    return jnp.einsum(eq, a, b.astype(a.dtype))
  return jnp.einsum(eq, a.astype(matmul_dtype), b.astype(matmul_dtype),
                    preferred_element_type=a.dtype)


def _attention(cfg: BertConfig, q_BTNH, k_BSNH, v_BSNH, keymask_BS, attn_impl: str,
               matmul_dtype=None):
  """Bidirectional attention over the unmasked keys. "xla": einsum with fp32 softmax (any
  mask); "cudnn"/"auto": `jax.nn.dot_product_attention` with per-row key lengths (needs
  right-padded, prefix masks; cuDNN flash attention on GPU in bf16)."""
  if attn_impl != "xla":
    lengths_B = jnp.sum(keymask_BS, axis=1, dtype=jnp.int32)
    return jax.nn.dot_product_attention(q_BTNH, k_BSNH, v_BSNH, key_value_seq_lengths=lengths_B,
                                        implementation=None if attn_impl == "auto" else attn_impl)
  mdt = q_BTNH.dtype if matmul_dtype is None else matmul_dtype
  logits_BNTS = jnp.einsum("BTNH,BSNH->BNTS", q_BTNH.astype(mdt), k_BSNH.astype(mdt),
                           preferred_element_type=jnp.float32) / math.sqrt(cfg.head_dim)
  logits_BNTS = jnp.where(keymask_BS[:, None, None, :], logits_BNTS, jnp.finfo(jnp.float32).min)
  probs_BNTS = jax.nn.softmax(logits_BNTS, axis=-1).astype(v_BSNH.dtype)
  return _einsum("BNTS,BSNH->BTNH", probs_BNTS, v_BSNH, matmul_dtype)


def _block(cfg: BertConfig, lp: Params, x_BTD, keymask_BS, sharder, attn_impl: str,
           matmul_dtype=None):
  dt = x_BTD.dtype
  mm = functools.partial(_einsum, matmul_dtype=matmul_dtype)
  q = mm("BTD,DNH->BTNH", x_BTD, lp["wq"]) + lp["bq"].astype(dt)
  k = mm("BSD,DNH->BSNH", x_BTD, lp["wk"]) + lp["bk"].astype(dt)
  v = mm("BSD,DNH->BSNH", x_BTD, lp["wv"]) + lp["bv"].astype(dt)
  attn_BTNH = _attention(cfg, q, k, v, keymask_BS, attn_impl, matmul_dtype)
  attn_BTD = mm("BTNH,NHD->BTD", attn_BTNH, lp["wo"]) + lp["bo"].astype(dt)
  x_BTD = layer_norm(x_BTD + attn_BTD, lp["attn_norm_scale"], lp["attn_norm_bias"],
                     cfg.layer_norm_eps)
  x_BTD = constrain(x_BTD, ("act_batch", "act_len", "act_embed"), sharder)
  h_BTF = mm("BTD,DF->BTF", x_BTD, lp["w_in"]) + lp["b_in"].astype(dt)
  h_BTF = jax.nn.gelu(h_BTF, approximate=_GELU[cfg.hidden_act])
  h_BTF = constrain(h_BTF, ("act_batch", "act_len", "act_mlp"), sharder)
  out_BTD = mm("BTF,FD->BTD", h_BTF, lp["w_out"]) + lp["b_out"].astype(dt)
  x_BTD = layer_norm(x_BTD + out_BTD, lp["mlp_norm_scale"], lp["mlp_norm_bias"], cfg.layer_norm_eps)
  return constrain(x_BTD, ("act_batch", "act_len", "act_embed"), sharder)


def hidden_states(cfg: BertConfig, params: Params, tokens_BT: jax.Array, mask_BT: jax.Array,
                  token_types_BT: Optional[jax.Array] = None, *, dtype=jnp.float32,
                  attn_impl: str = "xla", sharder: Optional[Sharder] = None,
                  matmul_dtype=None) -> jax.Array:
  """Last hidden states [B, T, D]. mask_BT: 1 on real tokens, 0 on padding (right-padded).
  attn_impl: "xla" (default, exact), "cudnn" or "auto" (see `_attention`).
  matmul_dtype: None (matmuls in `dtype`) or a narrower type the matmul operands are cast to,
    accumulating in `dtype` (bf16 operands with fp32 activations: ~2x faster matmuls on a CPU
    with AVX-512 BF16; norms, softmax and the residual stream stay in `dtype`)."""
  B, T = tokens_BT.shape
  if token_types_BT is None:
    token_types_BT = jnp.zeros((B, T), jnp.int32)
  x_BTD = (jnp.take(params["tok_embed"], tokens_BT, axis=0)
           + params["pos_embed"][None, :T]
           + jnp.take(params["type_embed"], token_types_BT, axis=0))
  x_BTD = layer_norm(x_BTD.astype(dtype), params["embed_norm_scale"], params["embed_norm_bias"],
                     cfg.layer_norm_eps)
  x_BTD = constrain(x_BTD, ("act_batch", "act_len", "act_embed"), sharder)
  keymask_BS = mask_BT.astype(bool)

  def body(x, lp):
    return _block(cfg, lp, x, keymask_BS, sharder, attn_impl, matmul_dtype), None

  x_BTD, _ = jax.lax.scan(body, x_BTD, params["layers"])
  return x_BTD


def mean_pool(h_BTD: jax.Array, mask_BT: jax.Array) -> jax.Array:
  """[B, D] mean of h over the tokens where mask is 1 (fp32)."""
  m_BT1 = mask_BT.astype(jnp.float32)[..., None]
  return jnp.sum(h_BTD.astype(jnp.float32) * m_BT1, axis=1) / jnp.maximum(
      jnp.sum(m_BT1, axis=1), 1e-9)


def l2_normalize(x_BD: jax.Array, eps: float = 1e-12) -> jax.Array:
  """Row-wise L2 normalisation (torch.nn.functional.normalize semantics)."""
  return x_BD / jnp.maximum(jnp.linalg.norm(x_BD, axis=-1, keepdims=True), eps)


def embed(cfg: BertConfig, params: Params, tokens_BT: jax.Array, mask_BT: jax.Array, *,
          pooling: str = "mean", normalize: bool = True, dtype=jnp.float32,
          attn_impl: str = "xla", sharder: Optional[Sharder] = None,
          matmul_dtype=None) -> jax.Array:
  """Sentence embeddings [B, D] (fp32): mean (or cls) pooling, then optional L2 norm."""
  h_BTD = hidden_states(cfg, params, tokens_BT, mask_BT, dtype=dtype, attn_impl=attn_impl,
                        sharder=sharder, matmul_dtype=matmul_dtype)
  return _pool(h_BTD, mask_BT, pooling, normalize)


def _pool(h_BTD: jax.Array, mask_BT: jax.Array, pooling: str, normalize: bool) -> jax.Array:
  if pooling == "mean":
    e_BD = mean_pool(h_BTD, mask_BT)
  elif pooling == "cls":
    e_BD = h_BTD[:, 0].astype(jnp.float32)
  else:
    raise ValueError(f"pooling {pooling!r} is not supported; use 'mean' or 'cls'")
  return l2_normalize(e_BD) if normalize else e_BD


def segment_sums(h_BTD: jax.Array, seg_BT: jax.Array, num_segments: int
                 ) -> tuple[jax.Array, jax.Array]:
  """Per-segment sums of the hidden states, fp32 [B, S, D], and token counts [B, S]: token t of
  row b adds to segment seg_BT[b, t] (-1 or >= num_segments: to none)."""
  onehot_BTS = jax.nn.one_hot(seg_BT, num_segments, dtype=jnp.float32)
  sums_BSD = jnp.einsum("BTS,BTD->BSD", onehot_BTS, h_BTD.astype(jnp.float32))
  return sums_BSD, jnp.sum(onehot_BTS, axis=1)


def embed_with_segments(cfg: BertConfig, params: Params, tokens_BT: jax.Array, mask_BT: jax.Array,
                        seg_BT: jax.Array, *, num_segments: int, pooling: str = "mean",
                        normalize: bool = True, dtype=jnp.float32, attn_impl: str = "xla",
                        sharder: Optional[Sharder] = None, matmul_dtype=None):
  """`embed` of each row [B, D], plus `segment_sums` of the same forward's last hidden states
  ([B, S, D], [B, S]): sub-spans of a text pooled in its context, from one encoding pass."""
  h_BTD = hidden_states(cfg, params, tokens_BT, mask_BT, dtype=dtype, attn_impl=attn_impl,
                        sharder=sharder, matmul_dtype=matmul_dtype)
  return (_pool(h_BTD, mask_BT, pooling, normalize), *segment_sums(h_BTD, seg_BT, num_segments))


# --------------------------------------------------------------------------------------------
# Loading an HF BERT directory
# --------------------------------------------------------------------------------------------
def _read_state_dict(path: str) -> dict[str, np.ndarray]:
  files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
  if files:
    from safetensors.numpy import load_file
    out = {}
    for f in files:
      out.update(load_file(f))
    return out
  bin_path = os.path.join(path, "pytorch_model.bin")
  if os.path.exists(bin_path):
    import torch  # only for old checkpoints without safetensors
    sd = torch.load(bin_path, map_location="cpu", weights_only=True)
    return {k: v.float().numpy() for k, v in sd.items()}
  raise FileNotFoundError(f"no *.safetensors or pytorch_model.bin in {path}")


def params_from_state_dict(cfg: BertConfig, sd: dict[str, np.ndarray], dtype=jnp.float32) -> Params:
  """Maps HF BertModel tensors (optionally prefixed `bert.`) to our params."""
  sd = {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in sd.items()}
  D, N, H = cfg.hidden_size, cfg.num_heads, cfg.head_dim
  used: set[str] = set()

  def get(name, shape):
    if name not in sd:
      raise KeyError(f"tensor {name!r} is missing from the checkpoint")
    t = np.asarray(sd[name], np.float32)
    if t.shape != shape:
      raise ValueError(f"tensor {name!r}: expected shape {shape}, found {t.shape}")
    used.add(name)
    return t

  def stack(fmt, shape, fn=lambda t: t):
    return np.stack([fn(get(fmt.format(i), shape)) for i in range(cfg.num_layers)])

  F = cfg.intermediate_size
  a, o = "encoder.layer.{}.attention.", "encoder.layer.{}."
  layers = {
      "wq": stack(a + "self.query.weight", (D, D), lambda t: t.T.reshape(D, N, H)),
      "wk": stack(a + "self.key.weight", (D, D), lambda t: t.T.reshape(D, N, H)),
      "wv": stack(a + "self.value.weight", (D, D), lambda t: t.T.reshape(D, N, H)),
      "bq": stack(a + "self.query.bias", (D,), lambda t: t.reshape(N, H)),
      "bk": stack(a + "self.key.bias", (D,), lambda t: t.reshape(N, H)),
      "bv": stack(a + "self.value.bias", (D,), lambda t: t.reshape(N, H)),
      "wo": stack(a + "output.dense.weight", (D, D), lambda t: t.T.reshape(N, H, D)),
      "bo": stack(a + "output.dense.bias", (D,)),
      "attn_norm_scale": stack(a + "output.LayerNorm.weight", (D,)),
      "attn_norm_bias": stack(a + "output.LayerNorm.bias", (D,)),
      "w_in": stack(o + "intermediate.dense.weight", (F, D), lambda t: t.T),
      "b_in": stack(o + "intermediate.dense.bias", (F,)),
      "w_out": stack(o + "output.dense.weight", (D, F), lambda t: t.T),
      "b_out": stack(o + "output.dense.bias", (D,)),
      "mlp_norm_scale": stack(o + "output.LayerNorm.weight", (D,)),
      "mlp_norm_bias": stack(o + "output.LayerNorm.bias", (D,)),
  }
  e = "embeddings."
  params = {
      "tok_embed": get(e + "word_embeddings.weight", (cfg.vocab_size, D)),
      "pos_embed": get(e + "position_embeddings.weight", (cfg.max_position_embeddings, D)),
      "type_embed": get(e + "token_type_embeddings.weight", (cfg.type_vocab_size, D)),
      "embed_norm_scale": get(e + "LayerNorm.weight", (D,)),
      "embed_norm_bias": get(e + "LayerNorm.bias", (D,)),
      "layers": layers,
  }
  extra = [k for k in sd if k not in used and not k.startswith(("pooler.", "cls.", "lm_head."))
           and not k.endswith("position_ids")]
  if extra:
    raise ValueError(f"unexpected tensors in the BERT checkpoint: {extra[:5]}"
                     f"{' ...' if len(extra) > 5 else ''}")
  return jax.tree.map(lambda t: jnp.asarray(t, dtype), params)


def load_bert(path: str, *, dtype=jnp.float32) -> tuple[BertConfig, Params]:
  """Reads a local HF BERT directory (config.json + safetensors, or pytorch_model.bin)."""
  cfg = BertConfig.from_hf_dir(path)
  return cfg, params_from_state_dict(cfg, _read_state_dict(path), dtype)
