"""Sharded decoder on a fake 8-device CPU mesh (data=4 x tensor=2): loading, placement, forward."""
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "").replace(
    "--xla_force_host_platform_device_count=8", "") + " --xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import models  # noqa: E402
from models import hf_io  # noqa: E402
from models.decoder import CACHE_LOGICAL  # noqa: E402
from models_tiny_hf import make_tiny_hf, torch_logits, write_tiny_gguf  # noqa: E402

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")


@pytest.fixture(scope="module")
def sharder():
  return models.Sharder(models.make_mesh((("data", 4), ("tensor", 2))))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
  """A qwen3-style checkpoint whose every sharded dim divides the mesh (V=98, K=2)."""
  path = str(tmp_path_factory.mktemp("qwen3_mesh"))
  model = make_tiny_hf(path, "qwen3", vocab_size=98, num_key_value_heads=2, head_dim=24,
                       tie_word_embeddings=False)
  return path, model


def _shard_shape(shape, spec, mesh):
  out = []
  for dim, s in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
    names = () if s is None else (s,) if isinstance(s, str) else s
    out.append(dim // int(np.prod([mesh.shape[a] for a in names])))
  return tuple(out)


def _assert_sharded_as_rules(cfg, params, sharder):
  logical = models.param_logical_axes(cfg)
  flat_p = jax.tree_util.tree_flatten_with_path(params)[0]
  flat_l = jax.tree.leaves(logical, is_leaf=lambda x: isinstance(x, tuple))
  sharded = 0
  for (path, arr), axes in zip(flat_p, flat_l):
    spec = sharder.spec(axes)
    assert arr.sharding.spec == spec, (jax.tree_util.keystr(path), arr.sharding.spec, spec)
    want = _shard_shape(arr.shape, spec, sharder.mesh)
    assert len(arr.addressable_shards) == 8
    for shard in arr.addressable_shards:
      assert shard.data.shape == want, (jax.tree_util.keystr(path), shard.data.shape, want)
    sharded += want != arr.shape
  # embed, (lm_head), wq, wk, wv, wo, w_gate, w_up, w_down are split; norms and biases not
  assert sharded == 8 + (not cfg.tie_embeddings)


def test_rules_map_to_expected_specs(sharder):
  P = jax.sharding.PartitionSpec
  assert sharder.spec(("layers", "embed", "q_heads", "head_dim")) == P(None, "data", "tensor", None)
  assert sharder.spec(("vocab", "embed")) == P("tensor", "data")
  assert sharder.spec(("layers", "mlp", "embed")) == P(None, "tensor", "data")


def test_sharded_load_places_params_as_rules_say(ckpt, sharder):
  cfg, params = models.load_hf_checkpoint(ckpt[0], sharder=sharder)
  _assert_sharded_as_rules(cfg, params, sharder)
  _, single = models.load_hf_checkpoint(ckpt[0])
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
               params, single)
  # A wq shard: [L, D/4, N/2, H] -- the hidden dim over data (FSDP), heads over tensor.
  assert params["layers"]["wq"].addressable_shards[0].data.shape == (2, 16, 2, 24)
  _, by_mesh = models.load_hf_checkpoint(ckpt[0], mesh=sharder.mesh)  # default rules
  _assert_sharded_as_rules(cfg, by_mesh, sharder)


def test_sharded_gguf_load(tmp_path, sharder):
  model = make_tiny_hf(str(tmp_path / "hf"), "llama", vocab_size=98, num_key_value_heads=2)
  path = str(tmp_path / "tiny.gguf")
  write_tiny_gguf(path, model, "llama")
  cfg, params = models.load_gguf(path, sharder=sharder)
  _assert_sharded_as_rules(cfg, params, sharder)
  tokens = np.random.RandomState(2).randint(0, 98, (8, 7))
  got = models.forward(cfg, params, jnp.asarray(tokens, jnp.int32), sharder=sharder)
  np.testing.assert_allclose(np.asarray(got), torch_logits(model, tokens), atol=1e-4)


def test_sharded_load_reads_only_each_devices_shard(ckpt, sharder, monkeypatch):
  reads = []
  orig = hf_io.SafetensorsSource.read

  def spy(self, key, index):
    out = orig(self, key, index)
    reads.append((key, out.shape))
    return out
  monkeypatch.setattr(hf_io.SafetensorsSource, "read", spy)
  cfg, _ = models.load_hf_checkpoint(ckpt[0], sharder=sharder)
  full = hf_io.expected_hf_shapes(cfg)
  q = [shape for key, shape in reads if key == "model.layers.0.self_attn.q_proj.weight"]
  # q_proj [N*H, D] = [96, 64]: each device reads its [N/2*H, D/4] = [48, 16] block, 8 reads.
  assert q == [(48, 16)] * 8, q
  big = [k for k, s in reads if len(full[k]) == 2 and s == full[k]]
  assert not big, f"whole 2-D tensors read by one device: {big[:3]}"


def test_mesh_that_does_not_divide_heads_is_a_clear_error(tmp_path, sharder):
  path = str(tmp_path / "mqa")
  make_tiny_hf(path, "qwen2", vocab_size=98, num_key_value_heads=1)
  msg = r"\['layers'\]\['(bk|bv|wk|wv)'\]: dim 'kv_heads' of size 1 is not divisible.*size 2"
  with pytest.raises(ValueError, match=msg):
    models.load_hf_checkpoint(path, sharder=sharder)


def test_sharded_forward_equals_single_device(ckpt, sharder):
  path, model = ckpt
  cfg, single = models.load_hf_checkpoint(path)
  params = jax.device_put(single, sharder.tree_shardings(models.param_logical_axes(cfg)))
  _assert_sharded_as_rules(cfg, params, sharder)
  tokens = jnp.asarray(np.random.RandomState(0).randint(0, 98, (8, 12)), jnp.int32)
  tokens_sh = jax.device_put(tokens, sharder.sharding(("act_batch", "act_len")))
  fwd = jax.jit(models.forward, static_argnums=0, static_argnames=("sharder",))
  got = fwd(cfg, params, tokens_sh, sharder=sharder)
  assert got.sharding.spec == sharder.spec(("act_batch", "act_len", "act_vocab"))
  ref = np.asarray(fwd(cfg, single, tokens))
  np.testing.assert_allclose(np.asarray(got), ref, atol=1e-5)
  np.testing.assert_allclose(ref, torch_logits(model, tokens), atol=1e-4)


def test_sharded_kv_cache_decode_equals_single_device(ckpt, sharder):
  cfg, single = models.load_hf_checkpoint(ckpt[0])
  params = jax.device_put(single, sharder.tree_shardings(models.param_logical_axes(cfg)))
  tokens = jnp.asarray(np.random.RandomState(1).randint(0, 98, (4, 6)), jnp.int32)
  step = jax.jit(models.forward_with_cache, static_argnums=0, static_argnames=("sharder",))
  outs = []
  for p, sh in ((single, None), (params, sharder)):
    cache = models.init_cache(cfg, 4, 8, dtype=jnp.float32)
    if sh is not None:
      cache = jax.device_put(cache, sh.sharding(CACHE_LOGICAL))
    logits, cache = step(cfg, p, tokens[:, :4], jnp.zeros((4,), jnp.int32), cache, sharder=sh)
    seq = [np.asarray(logits)]
    for t in (4, 5):
      logits, cache = step(cfg, p, tokens[:, t:t + 1], jnp.full((4,), t, jnp.int32), cache,
                           sharder=sh)
      seq.append(np.asarray(logits))
    outs.append(np.concatenate(seq, axis=1))
  np.testing.assert_allclose(outs[1], outs[0], atol=1e-5)


def test_sharded_load_with_custom_rules_slicing_inner_dims(ckpt):
  """head_dim over `tensor` cuts inside HF's packed N*H rows; vocab over `data`."""
  rules = dict(models.DEFAULT_RULES)
  rules.update(q_heads=None, kv_heads=None, head_dim="tensor", vocab="data", embed=None)
  sharder = models.Sharder(models.make_mesh((("data", 2), ("tensor", 4))), tuple(rules.items()))
  cfg, params = models.load_hf_checkpoint(ckpt[0], sharder=sharder)
  assert params["layers"]["wq"].addressable_shards[0].data.shape == (2, 64, 4, 6)
  _, single = models.load_hf_checkpoint(ckpt[0])
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
               params, single)
