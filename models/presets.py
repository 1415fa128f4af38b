"""Named architecture presets. Shapes are the published ones; weights come from checkpoints."""
from __future__ import annotations

from models.config import ModelConfig, RopeScaling


def _qwen25(D, F, L, N, K, tie, V=151936):
  return ModelConfig(model_type="qwen2", vocab_size=V, hidden_size=D, intermediate_size=F,
                     num_layers=L, num_heads=N, num_kv_heads=K, head_dim=D // N,
                     rope_theta=1e6, rms_norm_eps=1e-6, tie_embeddings=tie, qkv_bias=True)


PRESETS = {
    # Published counts: 0.49B, 1.54B, 3.09B, 7.62B, 14.7B, 32.5B.
    "qwen2.5-0.5b": _qwen25(896, 4864, 24, 14, 2, True),
    "qwen2.5-1.5b": _qwen25(1536, 8960, 28, 12, 2, True),
    "qwen2.5-3b": _qwen25(2048, 11008, 36, 16, 2, True),
    "qwen2.5-7b": _qwen25(3584, 18944, 28, 28, 4, False, V=152064),
    "qwen2.5-14b": _qwen25(5120, 13824, 48, 40, 8, False, V=152064),
    "qwen2.5-32b": _qwen25(5120, 27648, 64, 40, 8, False, V=152064),
    # Published 8.19B.
    "qwen3-8b": ModelConfig(model_type="qwen3", vocab_size=151936, hidden_size=4096,
                            intermediate_size=12288, num_layers=36, num_heads=32,
                            num_kv_heads=8, head_dim=128, rope_theta=1e6, rms_norm_eps=1e-6,
                            tie_embeddings=False, qkv_bias=False, qk_norm=True,
                            max_position_embeddings=40960),
    # Published 8.03B.
    "llama-3.1-8b": ModelConfig(model_type="llama", vocab_size=128256, hidden_size=4096,
                                intermediate_size=14336, num_layers=32, num_heads=32,
                                num_kv_heads=8, head_dim=128, rope_theta=5e5,
                                rms_norm_eps=1e-5, tie_embeddings=False, qkv_bias=False,
                                rope_scaling=RopeScaling(8.0, 1.0, 4.0, 8192),
                                max_position_embeddings=131072,
                                bos_token_id=128000, eos_token_id=128009),
    # SmolLM2-135M (the embedded default model's shape; LLaMA family).
    "smollm2-135m": ModelConfig(model_type="llama", vocab_size=49152, hidden_size=576,
                                intermediate_size=1536, num_layers=30, num_heads=9,
                                num_kv_heads=3, head_dim=64, rope_theta=1e5,
                                rms_norm_eps=1e-5, tie_embeddings=True, qkv_bias=False,
                                max_position_embeddings=8192),
}

PUBLISHED_PARAMS = {
    "qwen2.5-0.5b": 0.49e9, "qwen2.5-1.5b": 1.54e9, "qwen2.5-3b": 3.09e9,
    "qwen2.5-7b": 7.62e9, "qwen2.5-14b": 14.7e9, "qwen2.5-32b": 32.5e9,
    "qwen3-8b": 8.19e9, "llama-3.1-8b": 8.03e9, "smollm2-135m": 0.135e9,
}


def get_preset(name: str) -> ModelConfig:
  try:
    return PRESETS[name]
  except KeyError:
    raise KeyError(f"unknown model preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None
