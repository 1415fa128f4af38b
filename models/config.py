"""Architecture config of the decoder-only models (Qwen2/Qwen2.5, Qwen3, LLaMA-3.x).

Dimension alphabet used across `models/`:
  B batch, T query length, S key/cache length, D hidden, N query heads, K kv heads,
  H head dim, F mlp hidden, V vocab, L layers.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional

SUPPORTED_MODEL_TYPES = ("qwen2", "qwen3", "llama")


class ConfigError(ValueError):
  """A config.json that this project cannot run, with the reason in the message."""


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """LLaMA-3 style frequency scaling (`rope_scaling.rope_type == "llama3"`)."""
  factor: float = 8.0
  low_freq_factor: float = 1.0
  high_freq_factor: float = 4.0
  original_max_position_embeddings: int = 8192


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Frozen (hashable) so it can be a static argument of `jax.jit`."""
  model_type: str = "qwen2"
  vocab_size: int = 151936      # V
  hidden_size: int = 896        # D
  intermediate_size: int = 4864 # F
  num_layers: int = 24          # L
  num_heads: int = 14           # N
  num_kv_heads: int = 2         # K; K == N is MHA, K == 1 is MQA
  head_dim: int = 64            # H; Qwen3 sets it explicitly (!= D / N)
  rope_theta: float = 1e6
  rms_norm_eps: float = 1e-6
  tie_embeddings: bool = True   # lm_head shares the embedding matrix
  qkv_bias: bool = True         # Qwen2 / Qwen2.5
  qk_norm: bool = False         # Qwen3: RMSNorm over H on q and k before rope
  rope_scaling: Optional[RopeScaling] = None
  max_position_embeddings: int = 32768
  bos_token_id: Optional[int] = None
  eos_token_id: Optional[int] = None

  def __post_init__(self):
    if self.model_type not in SUPPORTED_MODEL_TYPES:
      raise ConfigError(
          f"model_type {self.model_type!r} is not supported; supported: "
          f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    if self.num_heads % self.num_kv_heads:
      raise ConfigError(
          f"num_attention_heads ({self.num_heads}) must be a multiple of "
          f"num_key_value_heads ({self.num_kv_heads})")

  # -- parameter counting (used by the presets' tests and the MFU benchmarks) --
  def num_params(self, include_embedding: bool = True) -> int:
    D, F, N, K, H, V, L = (self.hidden_size, self.intermediate_size, self.num_heads,
                           self.num_kv_heads, self.head_dim, self.vocab_size, self.num_layers)
    attn = D * N * H + 2 * D * K * H + N * H * D
    if self.qkv_bias:
      attn += N * H + 2 * K * H
    if self.qk_norm:
      attn += 2 * H
    per_layer = attn + 3 * D * F + 2 * D
    total = L * per_layer + D
    if include_embedding:
      total += V * D * (1 if self.tie_embeddings else 2)
    elif not self.tie_embeddings:
      total += V * D  # the lm_head matmul is still compute
    return total

  # -- HF config.json ---------------------------------------------------------------------
  @classmethod
  def from_hf_dict(cls, hf: dict[str, Any]) -> "ModelConfig":
    model_type = hf.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
      raise ConfigError(
          f"config.json model_type {model_type!r} is not supported; supported: "
          f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    n = hf["num_attention_heads"]
    head_dim = hf.get("head_dim") or hf["hidden_size"] // n
    scaling = None
    # transformers < 5 writes `rope_theta` + `rope_scaling`; >= 5 nests both in `rope_parameters`.
    rope_params = hf.get("rope_parameters") or {}
    rs = hf.get("rope_scaling") or (rope_params if rope_params.get("rope_type") not in
                                    (None, "default") else None)
    if rs:
      kind = rs.get("rope_type", rs.get("type"))
      if kind == "llama3":
        scaling = RopeScaling(
            factor=float(rs["factor"]),
            low_freq_factor=float(rs.get("low_freq_factor", 1.0)),
            high_freq_factor=float(rs.get("high_freq_factor", 4.0)),
            original_max_position_embeddings=int(rs.get("original_max_position_embeddings", 8192)))
      elif kind not in (None, "default"):
        raise ConfigError(f"rope_scaling type {kind!r} is not supported (only 'llama3')")
    rope_theta = hf.get("rope_theta", rope_params.get("rope_theta", 10000.0))
    if model_type == "qwen2":
      qkv_bias = True
    elif model_type == "llama":
      qkv_bias = bool(hf.get("attention_bias", False))
    else:
      qkv_bias = bool(hf.get("attention_bias", False))
    eos = hf.get("eos_token_id")
    if isinstance(eos, list):
      eos = eos[0] if eos else None
    return cls(
        model_type=model_type,
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=n,
        num_kv_heads=hf.get("num_key_value_heads") or n,
        head_dim=head_dim,
        rope_theta=float(rope_theta),
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", model_type != "llama")),
        qkv_bias=qkv_bias,
        qk_norm=model_type == "qwen3",
        rope_scaling=scaling,
        max_position_embeddings=int(hf.get("max_position_embeddings", 32768)),
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=eos,
    )

  @classmethod
  def from_hf_dir(cls, path: str) -> "ModelConfig":
    cfg_path = os.path.join(path, "config.json")
    if not os.path.exists(cfg_path):
      raise ConfigError(f"{path!r} has no config.json; pass a Hugging Face checkpoint directory")
    with open(cfg_path) as f:
      return cls.from_hf_dict(json.load(f))

  def to_hf_dict(self) -> dict[str, Any]:
    arch = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
            "llama": "LlamaForCausalLM"}[self.model_type]
    d = {
        "architectures": [arch],
        "model_type": self.model_type,
        "vocab_size": self.vocab_size,
        "hidden_size": self.hidden_size,
        "intermediate_size": self.intermediate_size,
        "num_hidden_layers": self.num_layers,
        "num_attention_heads": self.num_heads,
        "num_key_value_heads": self.num_kv_heads,
        "head_dim": self.head_dim,
        "rope_theta": self.rope_theta,
        "rms_norm_eps": self.rms_norm_eps,
        "tie_word_embeddings": self.tie_embeddings,
        "max_position_embeddings": self.max_position_embeddings,
        "hidden_act": "silu",
        "torch_dtype": "float32",
    }
    if self.model_type != "qwen2":
      d["attention_bias"] = self.qkv_bias
    if self.rope_scaling is not None:
      d["rope_scaling"] = {"rope_type": "llama3", **dataclasses.asdict(self.rope_scaling)}
    if self.bos_token_id is not None:
      d["bos_token_id"] = self.bos_token_id
    if self.eos_token_id is not None:
      d["eos_token_id"] = self.eos_token_id
    return d
