"""GGUF (llama.cpp) files -> (config, params), and their tokenizer -> a `tokenizer.json` directory.

Weights: each GGUF tensor is dequantized by `gguf.quants.dequantize` on demand, which gives it
the HF layout (`blk.3.attn_q.weight` [N*H, D] is `model.layers.3.self_attn.q_proj.weight`), so
the HF mapping table of `models/hf_mapping.py` builds the params. llama.cpp's converter permutes
the rows of LLaMA's Q and K projections (it turns HF's "rotate halves" rope into GGML's interleaved
rope); `unpermute_qk` undoes that. Qwen2/Qwen3 files are stored unpermuted (NeoX rope).

Tokenizer: the file stores vocabulary, merges, token types, special ids and the chat template as
metadata. For byte-level BPE vocabularies (`tokenizer.ggml.model == "gpt2"`: SmolLM2, Qwen2,
LLaMA-3) we rebuild the `tokenizers` pipeline the way transformers'
`integrations/gguf/gguf_tokenizer_mapping.py` does (vocab + merges into BPE, control tokens as
special added tokens, the split regex named by `tokenizer.ggml.pre`), with the pre-tokenizers
llama.cpp uses for those names. Anything else goes through transformers' own GGUF converter.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional

import jax.numpy as jnp
import numpy as np

from models import hf_io
from models.config import ConfigError, ModelConfig, RopeScaling
from models.decoder import Params
from models.layers import rope_inv_freq
from models.sharding import Sharder

SUPPORTED_ARCHS = ("llama", "qwen2", "qwen3")

# HF name template -> GGUF name template (llama.cpp `gguf.constants.TENSOR_NAMES`).
_B = "blk.{i}."
HF_TO_GGUF = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "model.layers.{i}.input_layernorm.weight": _B + "attn_norm.weight",
    "model.layers.{i}.self_attn.q_proj.weight": _B + "attn_q.weight",
    "model.layers.{i}.self_attn.k_proj.weight": _B + "attn_k.weight",
    "model.layers.{i}.self_attn.v_proj.weight": _B + "attn_v.weight",
    "model.layers.{i}.self_attn.o_proj.weight": _B + "attn_output.weight",
    "model.layers.{i}.self_attn.q_proj.bias": _B + "attn_q.bias",
    "model.layers.{i}.self_attn.k_proj.bias": _B + "attn_k.bias",
    "model.layers.{i}.self_attn.v_proj.bias": _B + "attn_v.bias",
    "model.layers.{i}.self_attn.q_norm.weight": _B + "attn_q_norm.weight",
    "model.layers.{i}.self_attn.k_norm.weight": _B + "attn_k_norm.weight",
    "model.layers.{i}.post_attention_layernorm.weight": _B + "ffn_norm.weight",
    "model.layers.{i}.mlp.gate_proj.weight": _B + "ffn_gate.weight",
    "model.layers.{i}.mlp.up_proj.weight": _B + "ffn_up.weight",
    "model.layers.{i}.mlp.down_proj.weight": _B + "ffn_down.weight",
}
_ROPE_FREQS = "rope_freqs.weight"  # LLaMA-3.1 files: per-frequency llama3 scaling factors


def _reader(path: str):
  """A `gguf.GGUFReader` (memory-mapped: nothing is read until a tensor is dequantised); a
  truncated or corrupt file is one CheckpointError naming it."""
  import gguf
  if not os.path.isfile(path):
    raise FileNotFoundError(f"GGUF file {path!r} does not exist")
  try:
    reader = gguf.GGUFReader(path)
  except Exception as e:  # the reader fails with ValueError, IndexError, struct errors...
    raise hf_io.CheckpointError(
        f"GGUF file {path!r} ({os.path.getsize(path)} bytes) is truncated or corrupt: "
        f"{type(e).__name__}: {' '.join(str(e).split())[:200]}; download it again") from None
  return reader


def _field(reader, key: str, default: Any = KeyError) -> Any:
  f = reader.fields.get(key)
  if f is None:
    if default is KeyError:
      raise ConfigError(f"GGUF metadata has no {key!r}; this file cannot be read as a model")
    return default
  return f.contents()


def _f32(x: float) -> float:
  """GGUF stores floats as float32 (1e-5 reads as 9.99999974e-06): take the shortest decimal."""
  return float(str(np.float32(x)))


def unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
  """Inverse of llama.cpp's `permute` on Q/K rows [n_heads * H, ...] (HF halves <- GGML pairs)."""
  h2 = w.shape[0] // n_heads // 2
  return w.reshape(n_heads, h2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------
def config_from_gguf(reader) -> ModelConfig:
  """ModelConfig from the `<arch>.*` and `tokenizer.ggml.*` metadata of a GGUF file."""
  arch = _field(reader, "general.architecture")
  if arch not in SUPPORTED_ARCHS:
    raise ConfigError(f"GGUF general.architecture {arch!r} is not supported; supported: "
                      f"{', '.join(SUPPORTED_ARCHS)}")
  a = lambda k, d=KeyError: _field(reader, f"{arch}.{k}", d)
  names = {t.name for t in reader.tensors}
  D, N = int(a("embedding_length")), int(a("attention.head_count"))
  head_dim = int(a("attention.key_length", None) or a("rope.dimension_count", None) or D // N)
  vocab = a("vocab_size", None) or len(reader.fields["tokenizer.ggml.tokens"].data)
  theta = _f32(a("rope.freq_base", 10000.0))
  cfg = ModelConfig(
      model_type=arch, vocab_size=int(vocab), hidden_size=D,
      intermediate_size=int(a("feed_forward_length")), num_layers=int(a("block_count")),
      num_heads=N, num_kv_heads=int(a("attention.head_count_kv", N)), head_dim=head_dim,
      rope_theta=theta, rms_norm_eps=_f32(a("attention.layer_norm_rms_epsilon", 1e-6)),
      tie_embeddings="output.weight" not in names,
      qkv_bias=arch == "qwen2" or "blk.0.attn_q.bias" in names, qk_norm=arch == "qwen3",
      max_position_embeddings=int(a("context_length", 32768)),
      bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id", None),
      eos_token_id=_field(reader, "tokenizer.ggml.eos_token_id", None))
  if _ROPE_FREQS in names:
    orig = int(a("rope.scaling.original_context_length", 8192))
    cfg = _with_llama3_scaling(cfg, _dequantize(reader, _ROPE_FREQS), orig)
  return cfg


def _with_llama3_scaling(cfg: ModelConfig, factors_h: np.ndarray, orig: int) -> ModelConfig:
  """LLaMA-3.1 GGUFs store 1/scale per frequency; recover the (published) llama3 parameters."""
  import dataclasses
  scaling = RopeScaling(factor=float(np.max(factors_h)), low_freq_factor=1.0,
                        high_freq_factor=4.0, original_max_position_embeddings=orig)
  base = np.asarray(rope_inv_freq(cfg.head_dim, cfg.rope_theta, None))
  ours = np.asarray(rope_inv_freq(cfg.head_dim, cfg.rope_theta, scaling))
  if not np.allclose(base / ours, factors_h.reshape(-1), rtol=1e-3):
    raise ConfigError(f"GGUF {_ROPE_FREQS} holds rope factors that are not llama3 scaling with "
                      f"factor {scaling.factor}, low/high 1/4, original context {orig}; "
                      "this rope variant is not supported")
  return dataclasses.replace(cfg, rope_scaling=scaling)


# --------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------
DEQUANT_CHUNK_BYTES = 32 << 20   # float32 rows dequantised at once (bounds the temporaries)


def _tensor(reader, name: str):
  return next(t for t in reader.tensors if t.name == name)


@dataclasses.dataclass(frozen=True)
class TensorInfo:
  """Where one GGUF tensor lies in the file: all a load needs once the metadata is parsed."""
  name: str
  shape: tuple[int, ...]        # HF order (GGUF lists ne0, the fastest dim, first)
  qtype: Any                    # gguf.GGMLQuantizationType
  offset: int                   # absolute file offset of its data
  row_items: int                # items of `item_dtype` per row (row = first HF dim)
  item_dtype: np.dtype          # uint8 for quantised blocks, else the value dtype

  @classmethod
  def of(cls, t) -> "TensorInfo":
    shape = tuple(int(d) for d in reversed(t.shape))
    rows = shape[0] if len(shape) > 1 else 1
    return cls(t.name, shape, t.tensor_type, int(t.data_offset),
               int(t.data.size) // rows, np.dtype(t.data.dtype))


def _dequantize_rows(info: TensorInfo, lo: int, hi: int, fd: int) -> np.ndarray:
  """Rows [lo, hi) of a GGUF tensor (HF layout, rows = the first HF dim) as float32, read with
  pread (the file's pages never count in resident memory) and dequantised a chunk of rows at
  a time so temporaries stay near DEQUANT_CHUNK_BYTES. A 1-D tensor is one row."""
  from gguf.quants import dequantize
  shape = info.shape if len(info.shape) > 1 else (1,) + info.shape
  if len(info.shape) == 1:
    lo_1d, hi_1d, lo, hi = lo, hi, 0, 1
  row_bytes = info.row_items * info.item_dtype.itemsize
  cols = int(np.prod(shape[1:]))
  out = np.empty((hi - lo, cols), np.float32)
  step = max(1, DEQUANT_CHUNK_BYTES // (4 * cols))
  for a in range(lo, hi, step):
    b = min(hi, a + step)
    n = (b - a) * row_bytes
    buf = os.pread(fd, n, info.offset + a * row_bytes)
    if len(buf) != n:
      raise ValueError(f"rows {a}-{b} end past the end of the file")
    raw = np.frombuffer(buf, info.item_dtype).reshape(b - a, info.row_items)
    out[a - lo:b - lo] = np.asarray(dequantize(raw, info.qtype), np.float32).reshape(b - a, cols)
  if len(info.shape) == 1:
    return out.reshape(-1)[lo_1d:hi_1d]
  return out.reshape((hi - lo,) + shape[1:])


def _dequantize(reader, name: str) -> np.ndarray:
  info = TensorInfo.of(_tensor(reader, name))
  fd = os.open(reader.data.filename, os.O_RDONLY)
  try:
    return _dequantize_rows(info, 0, info.shape[0], fd)
  finally:
    os.close(fd)


class GGUFSource:
  """HF name -> slices of a GGUF tensor (the `SafetensorsSource` interface of hf_io): a read
  dequantises only the rows it needs (llama Q/K rows un-permuted), a chunk at a time, so
  loading holds the params made so far plus one slice, not a float32 copy of the model."""

  def __init__(self, cfg: ModelConfig, reader, path: str):
    self.path = path
    self._fd = os.open(path, os.O_RDONLY)
    by_gguf = {}
    for hf_t, gg_t in HF_TO_GGUF.items():
      layers = range(cfg.num_layers) if "{i}" in hf_t else [None]
      by_gguf.update({gg_t.format(i=i): hf_t.format(i=i) for i in layers})
    self._t = {}
    for t in reader.tensors:
      if t.name == _ROPE_FREQS:
        continue  # consumed by config_from_gguf
      if t.name not in by_gguf:
        raise hf_io.CheckpointError(f"GGUF has unexpected tensor {t.name!r} that a "
                                    f"{cfg.model_type} model does not use")
      heads = None
      if cfg.model_type == "llama" and ".attn_q.weight" in t.name:
        heads = cfg.num_heads
      elif cfg.model_type == "llama" and ".attn_k.weight" in t.name:
        heads = cfg.num_kv_heads
      info = TensorInfo.of(t)
      self._t[by_gguf[t.name]] = (info, info.shape, heads)

  def keys(self):
    return self._t.keys()

  def shape(self, key):
    return self._t[key][1]

  def read(self, key, index) -> np.ndarray:
    info, shape, heads = self._t[key]
    index = tuple(index) + (slice(None),) * (len(shape) - len(index))
    lo, hi, stride = index[0].indices(shape[0])
    assert stride == 1, "shardings only produce unit-stride slices"
    try:
      if heads is None:
        rows = _dequantize_rows(info, lo, hi, self._fd)
      else:   # out row r is stored row perm[r]; a head's rows stay inside that head
        perm = unpermute_qk(np.arange(shape[0]), heads)[lo:hi]
        a, b = int(perm.min()), int(perm.max()) + 1
        rows = _dequantize_rows(info, a, b, self._fd)[perm - a]
    except (ValueError, IndexError, TypeError) as e:
      raise hf_io.CheckpointError(f"GGUF file {self.path!r}: tensor {info.name!r} cannot be read "
                                  f"({type(e).__name__}: {e}); the file is truncated or "
                                  "corrupt") from None
    return rows[(slice(None),) + index[1:]]

  def close(self):
    if self._fd is not None:
      os.close(self._fd)
      self._fd = None


def load_gguf(path: str, *, dtype=jnp.float32,
              sharder: Optional[Sharder] = None) -> tuple[ModelConfig, Params]:
  """Reads a llama/qwen2/qwen3 GGUF (any quantization `gguf` dequantizes) into params.

  Tensor by tensor: each param is dequantised a chunk of rows at a time, cast and placed
  before the next is read, so peak host memory stays near the final params (bench/
  load_memory.py measures it). With `sharder`, each device dequantises only the rows of its own
  slice; without, params land on the default device.
  """
  reader = _reader(path)
  cfg = config_from_gguf(reader)
  src = GGUFSource(cfg, reader, path)
  del reader   # the parsed metadata (vocabulary, merges) is large; the source keeps offsets only
  try:
    params = hf_io.params_from_source(cfg, src, dtype=dtype, sharder=sharder,
                                      what=f"GGUF {path!r}")
  finally:
    src.close()
  return cfg, params


# --------------------------------------------------------------------------------------------
# Tokenizer export
# --------------------------------------------------------------------------------------------
_GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# tokenizer.ggml.pre -> (regexes applied in order, NFC normalizer), as in llama.cpp's llama-vocab.
_PRE = {
    "gpt-2": ([_GPT2_SPLIT], False),
    "smollm": ([r"\p{N}", _GPT2_SPLIT], False),
    "starcoder": ([r"\p{N}", _GPT2_SPLIT], False),
    "llama-bpe": ([_LLAMA3_SPLIT], False),
    "llama3": ([_LLAMA3_SPLIT], False),
    "qwen2": ([_QWEN2_SPLIT], True),
}


def _byte_level_tokenizer(reader):
  """A `tokenizers.Tokenizer` for a byte-level BPE vocabulary stored in the GGUF."""
  from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
  from tokenizers import pre_tokenizers, processors
  tokens = _field(reader, "tokenizer.ggml.tokens")
  types = _field(reader, "tokenizer.ggml.token_type", [1] * len(tokens))
  merges = [tuple(m.split(" ", 1)) for m in _field(reader, "tokenizer.ggml.merges")]
  splits, nfc = _PRE[_field(reader, "tokenizer.ggml.pre", "gpt-2")]
  tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges,
                             fuse_unk=False, byte_fallback=False))
  if nfc:
    tok.normalizer = normalizers.NFC()
  tok.pre_tokenizer = pre_tokenizers.Sequence(
      [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in splits] +
      [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  tok.decoder = decoders.ByteLevel()
  bos_id = _field(reader, "tokenizer.ggml.bos_token_id", None)
  if _field(reader, "tokenizer.ggml.add_bos_token", False) and bos_id is not None:
    bos = tokens[bos_id]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1", special_tokens=[(bos, bos_id)])
  else:
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
  # 3 = CONTROL (special, never split), 4 = USER_DEFINED (kept whole, not special).
  tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                          for t, ty in zip(tokens, types) if ty == 3])
  tok.add_tokens([AddedToken(t, special=False, normalized=False)
                  for t, ty in zip(tokens, types) if ty == 4])
  return tok


def _tokenizer_config(reader) -> dict[str, Any]:
  tokens = _field(reader, "tokenizer.ggml.tokens")
  name = lambda key: None if _field(reader, key, None) is None else tokens[_field(reader, key)]
  arch = _field(reader, "general.architecture")
  cfg = {
      "tokenizer_class": "PreTrainedTokenizerFast",
      "bos_token": name("tokenizer.ggml.bos_token_id"),
      "eos_token": name("tokenizer.ggml.eos_token_id"),
      "unk_token": name("tokenizer.ggml.unknown_token_id"),
      "pad_token": name("tokenizer.ggml.padding_token_id"),
      "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
      "add_eos_token": bool(_field(reader, "tokenizer.ggml.add_eos_token", False)),
      "clean_up_tokenization_spaces": False,
      "model_max_length": int(_field(reader, f"{arch}.context_length", 32768)),
  }
  template = _field(reader, "tokenizer.chat_template", None)
  if template is not None:
    cfg["chat_template"] = template
  return cfg


def export_gguf_tokenizer(path: str, out_dir: str,
                          config: Optional[ModelConfig] = None) -> str:
  """Writes tokenizer.json, tokenizer_config.json (chat template, special tokens) and the
  model's config.json to `out_dir`, loadable offline by `tokenizers` and `AutoTokenizer`."""
  reader = _reader(path)
  os.makedirs(out_dir, exist_ok=True)
  config = config or config_from_gguf(reader)
  pre = _field(reader, "tokenizer.ggml.pre", "gpt-2")
  if _field(reader, "tokenizer.ggml.model", None) == "gpt2" and pre in _PRE:
    _byte_level_tokenizer(reader).save(os.path.join(out_dir, "tokenizer.json"))
    tok_cfg = _tokenizer_config(reader)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
      json.dump(tok_cfg, f, indent=2)
    special = {k: tok_cfg[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token")
               if tok_cfg[k] is not None}
    with open(os.path.join(out_dir, "special_tokens_map.json"), "w") as f:
      json.dump(special, f, indent=2)
  else:  # sentencepiece vocabularies and other pre-tokenizers: transformers' own converter
    from transformers import AutoTokenizer
    AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(path)),
                                  gguf_file=os.path.basename(path)).save_pretrained(out_dir)
  with open(os.path.join(out_dir, "config.json"), "w") as f:
    json.dump(config.to_hf_dict(), f, indent=2)
  return out_dir
