"""Decoder parity with `transformers` (torch CPU) on tiny random checkpoints, plus properties.

Every checkpoint is made here with `save_pretrained` from a randomly initialised HF model, so the
tests need no network. Tolerance: max abs logit difference < 1e-4 in fp32.
"""
import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file, save_file

import models
from models import hf_io
from models.config import ConfigError
from models.presets import PRESETS, PUBLISHED_PARAMS
from models_tiny_hf import D, N, V, make_tiny_hf, torch_logits

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
CASES = {
    # name: (model_type, extra HF config)
    "qwen2_gqa_tied": ("qwen2", dict(num_key_value_heads=2, tie_word_embeddings=True)),
    "qwen2_mqa_untied": ("qwen2", dict(num_key_value_heads=1, tie_word_embeddings=False)),
    "qwen3_headdim24": ("qwen3", dict(num_key_value_heads=2, head_dim=24,
                                       tie_word_embeddings=True)),
    "llama3_scaled_mha_untied": ("llama", dict(num_key_value_heads=4, rope_theta=5e5,
                                               rope_scaling=LLAMA3_SCALING,
                                               tie_word_embeddings=False)),
    "llama_mqa_tied": ("llama", dict(num_key_value_heads=1, tie_word_embeddings=True)),
}
TOL = 1e-4


# The properties (cache, padding, causality) run on one case per family to keep CPU time low.
PROPERTY_CASES = ("llama3_scaled_mha_untied", "qwen2_mqa_untied", "qwen3_headdim24")
_BUILT = {}


def _build(name, tmp_path_factory):
  """(case name, checkpoint dir, torch model, our config, our params), built once per case."""
  if name not in _BUILT:
    model_type, extra = CASES[name]
    path = str(tmp_path_factory.mktemp(name))
    model = make_tiny_hf(path, model_type, **extra)
    _BUILT[name] = (name, path, model, *models.load_hf_checkpoint(path))
  return _BUILT[name]


@pytest.fixture(scope="module", params=sorted(CASES))
def tiny(request, tmp_path_factory):
  return _build(request.param, tmp_path_factory)


@pytest.fixture(scope="module", params=PROPERTY_CASES)
def tiny_prop(request, tmp_path_factory):
  return _build(request.param, tmp_path_factory)


def _tokens(B=3, T=13, seed=0):
  return jnp.asarray(np.random.RandomState(seed).randint(0, V, (B, T)), jnp.int32)


_fwd = jax.jit(models.forward, static_argnums=0,
               static_argnames=("dtype", "remat", "attn_impl", "sharder"))
_fwd_cache = jax.jit(models.forward_with_cache, static_argnums=0,
                     static_argnames=("dtype", "sharder", "return_hidden"))


# --------------------------------------------------------------------------------------------
def test_config_read(tiny):
  name, _, model, cfg, params = tiny
  hf = model.config
  assert cfg.model_type == hf.model_type
  assert cfg.num_kv_heads == hf.num_key_value_heads
  assert cfg.tie_embeddings == hf.tie_word_embeddings
  assert ("lm_head" in params) == (not hf.tie_word_embeddings)
  assert cfg.qkv_bias == (hf.model_type == "qwen2")
  assert cfg.qk_norm == (hf.model_type == "qwen3")
  assert cfg.head_dim == (24 if name.startswith("qwen3") else D // N)
  assert (cfg.rope_scaling is not None) == ("scaled" in name)


def test_logits_parity(tiny):
  name, _, model, cfg, params = tiny
  tokens = _tokens()
  ours = np.asarray(_fwd(cfg, params, tokens))
  ref = torch_logits(model, tokens)
  diff = float(np.abs(ours - ref).max())
  print(f"parity {name}: max abs diff {diff:.2e} (max |logit| {np.abs(ref).max():.1f})")
  assert ours.dtype == np.float32 and ours.shape == (3, 13, V)
  assert diff < TOL, name


def test_bf16_forward_close(tiny):
  _, _, model, cfg, params = tiny
  tokens = _tokens()
  ours = np.asarray(_fwd(cfg, params, tokens, dtype=jnp.bfloat16))
  ref = torch_logits(model, tokens)
  assert ours.dtype == np.float32
  # bf16 has ~3 significant digits: compare the argmax agreement and the scale of the error.
  assert np.abs(ours - ref).max() < 0.1 * np.abs(ref).max()


def test_save_roundtrip_transformers(tiny, tmp_path):
  name, _, model, cfg, params = tiny
  out = str(tmp_path / "saved")
  models.save_hf_checkpoint(out, cfg, params)
  reloaded, info = transformers.AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
  assert not info["missing_keys"] and not info["unexpected_keys"], info
  tokens = _tokens(seed=1)
  diff = np.abs(torch_logits(reloaded.eval(), tokens) - torch_logits(model, tokens)).max()
  assert diff < 1e-6, name
  cfg2, params2 = models.load_hf_checkpoint(out)
  assert cfg2 == cfg
  jax.tree.map(np.testing.assert_array_equal, params2, params)


def test_multi_file_index_and_bf16(tiny, tmp_path):
  _, _, model, cfg, params = tiny
  out = str(tmp_path / "sharded")
  bf = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
  models.save_hf_checkpoint(out, cfg, bf, max_shard_bytes=20_000)
  files = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
  assert len(files) > 2 and os.path.exists(os.path.join(out, "model.safetensors.index.json"))
  with open(os.path.join(out, "config.json")) as f:
    assert json.load(f)["torch_dtype"] == "bfloat16"
  cfg2, p32 = models.load_hf_checkpoint(out, dtype=jnp.float32)
  _, p16 = models.load_hf_checkpoint(out, dtype=jnp.bfloat16)
  assert jax.tree.leaves(p16)[0].dtype == jnp.bfloat16
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), p32, bf)
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
  tokens = _tokens(seed=2)
  np.testing.assert_allclose(torch_logits(reloaded, tokens),
                             np.asarray(_fwd(cfg2, p32, tokens)), atol=TOL)


# --------------------------------------------------------------------------------------------
# Properties: KV cache, padding, causality
# --------------------------------------------------------------------------------------------
def test_kv_cache_decode_equals_full_forward(tiny_prop):
  name, _, _, cfg, params = tiny_prop
  B, T, P = 2, 12, 5
  tokens = _tokens(B, T, seed=3)
  full = np.asarray(_fwd(cfg, params, tokens))
  cache = models.init_cache(cfg, B, 16, dtype=jnp.float32)
  logits, cache = _fwd_cache(cfg, params, tokens[:, :P], jnp.zeros((B,), jnp.int32), cache)
  steps = [np.asarray(logits)]
  for t in range(P, T):
    logits, cache = _fwd_cache(cfg, params, tokens[:, t:t + 1], jnp.full((B,), t, jnp.int32),
                               cache)
    steps.append(np.asarray(logits))
  np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5, err_msg=name)


def _padded(rows, T, left):
  """Pads int rows to T with token 0 (segment 0); real tokens get positions 0..n-1."""
  tok, seg, pos = (np.zeros((len(rows), T), np.int32) for _ in range(3))
  for b, r in enumerate(rows):
    n = len(r)
    sl = slice(T - n, T) if left else slice(0, n)
    tok[b, sl], seg[b, sl], pos[b, sl] = r, 1, np.arange(n)
  return jnp.asarray(tok), jnp.asarray(seg), jnp.asarray(pos)


@pytest.mark.parametrize("left", [True, False], ids=["left", "right"])
def test_padding_does_not_change_logits(tiny_prop, left):
  name, _, model, cfg, params = tiny_prop
  rng = np.random.RandomState(4)
  rows = [rng.randint(1, V, n) for n in (9, 4, 7)]
  tok, seg, pos = _padded(rows, 10, left)
  batch = np.asarray(_fwd(cfg, params, tok, positions_BT=pos, segment_ids_BT=seg))
  for b, r in enumerate(rows):
    alone = torch_logits(model, r[None])[0]  # the unpadded row (our forward equals it, above)
    got = batch[b, 10 - len(r):] if left else batch[b, :len(r)]
    np.testing.assert_allclose(got, alone, atol=TOL, err_msg=f"{name} row {b}")


def test_padded_prefill_then_decode_with_cache(tiny_prop):
  """Right-padded prefill, then each row decodes from its own length (per-row start)."""
  name, _, model, cfg, params = tiny_prop
  rng = np.random.RandomState(5)
  rows = [rng.randint(1, V, n) for n in (6, 3)]
  nxt = rng.randint(1, V, (2, 2))
  tok, _, _ = _padded(rows, 6, left=False)
  cache = models.init_cache(cfg, 2, 12, dtype=jnp.float32)
  _, cache = _fwd_cache(cfg, params, tok, jnp.zeros((2,), jnp.int32), cache)
  start = jnp.asarray([len(r) for r in rows], jnp.int32)
  for j in range(2):
    logits, cache = _fwd_cache(cfg, params, jnp.asarray(nxt[:, j:j + 1], jnp.int32),
                               start + j, cache)
    for b, r in enumerate(rows):
      ref = torch_logits(model, np.concatenate([r, nxt[b, :j + 1]])[None])[0, -1]
      np.testing.assert_allclose(np.asarray(logits)[b, 0], ref, atol=TOL, err_msg=name)


def test_causality(tiny_prop):
  name, _, _, cfg, params = tiny_prop
  tokens = np.asarray(_tokens(2, 10, seed=6))
  base = np.asarray(_fwd(cfg, params, jnp.asarray(tokens)))
  for t in (3, 7):
    changed = tokens.copy()
    changed[:, t] = (changed[:, t] + 1) % V
    out = np.asarray(_fwd(cfg, params, jnp.asarray(changed)))
    np.testing.assert_allclose(out[:, :t], base[:, :t], atol=1e-6, err_msg=name)
    assert np.abs(out[:, t:] - base[:, t:]).max() > 1e-3  # and the change does matter


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------
@pytest.fixture()
def qwen2_dir(tmp_path):
  path = str(tmp_path / "qwen2")
  make_tiny_hf(path, "qwen2", num_key_value_heads=2, tie_word_embeddings=False)
  return path


def _edit_tensors(path, fn):
  f = os.path.join(path, "model.safetensors")
  tensors = load_file(f)
  fn(tensors)
  save_file(tensors, f, metadata={"format": "pt"})


def test_error_missing_tensor(qwen2_dir):
  _edit_tensors(qwen2_dir, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
  msg = r"missing tensor 'model\.layers\.1\.mlp\.up_proj\.weight'"
  with pytest.raises(hf_io.CheckpointError, match=msg):
    models.load_hf_checkpoint(qwen2_dir)


def test_error_extra_tensor(qwen2_dir):
  _edit_tensors(qwen2_dir, lambda t: t.update({"model.layers.0.mlp.extra.weight":
                                               np.zeros((2, 2), np.float32)}))
  with pytest.raises(hf_io.CheckpointError,
                     match=r"unexpected tensor 'model\.layers\.0\.mlp\.extra\.weight'"):
    models.load_hf_checkpoint(qwen2_dir)


def test_error_shape_mismatch(qwen2_dir):
  _edit_tensors(qwen2_dir, lambda t: t.update({"model.layers.0.self_attn.k_proj.weight":
                                               np.zeros((48, D), np.float32)}))
  with pytest.raises(hf_io.CheckpointError,
                     match=r"'model\.layers\.0\.self_attn\.k_proj\.weight' has shape \[48, 64\], "
                           r"expected \[32, 64\]"):
    models.load_hf_checkpoint(qwen2_dir)


def test_error_bad_model_type(qwen2_dir):
  cfg_path = os.path.join(qwen2_dir, "config.json")
  with open(cfg_path) as f:
    hf = json.load(f)
  hf["model_type"] = "gpt2"
  with open(cfg_path, "w") as f:
    json.dump(hf, f)
  with pytest.raises(ConfigError, match=r"model_type 'gpt2' is not supported.*qwen2"):
    models.load_hf_checkpoint(qwen2_dir)


def test_error_not_a_checkpoint(tmp_path):
  with pytest.raises(ConfigError, match="no config.json"):
    models.load_hf_checkpoint(str(tmp_path))


# --------------------------------------------------------------------------------------------
# Presets (shapes only, never materialized)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_preset_param_counts(name):
  cfg = PRESETS[name]
  shapes = jax.eval_shape(functools.partial(models.init_params, cfg), jax.random.PRNGKey(0))
  count = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))
  assert count == cfg.num_params()
  assert abs(count / PUBLISHED_PARAMS[name] - 1) < 0.02, (name, count)
  n_layer_params = len(shapes["layers"])  # every param maps to HF tensors, one per layer if stacked
  n_hf = len(jax.tree.leaves(shapes)) + (cfg.num_layers - 1) * n_layer_params
  assert len(hf_io.expected_hf_shapes(cfg)) == n_hf
