"""Pure-JAX model zoo: Qwen2/Qwen2.5, Qwen3, LLaMA-3.x decoders and a BERT encoder."""
from models.config import ConfigError, ModelConfig, RopeScaling
from models.decoder import (forward, forward_with_cache, hidden_states, init_cache, init_params,
                            logits_from_hidden, param_logical_axes, param_shapes)
from models.presets import PRESETS, get_preset
from models.sharding import DEFAULT_RULES, Sharder, make_mesh
from models.hf_io import CheckpointError, load_hf_checkpoint, save_hf_checkpoint
from models.gguf_io import export_gguf_tokenizer, load_gguf
from models.checkpoint import default_model_path, load_checkpoint
