"""The fused step on a fake 8-device CPU mesh: same result as one device, state stays sharded
as the rules say, and checkpoints restore onto a different mesh shape."""
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "").replace(
    "--xla_force_host_platform_device_count=8", "") + " --xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import models  # noqa: E402
from models.sharding import Sharder  # noqa: E402
from ssp_jax import checkpointing  # noqa: E402
from ssp_jax.rl import learner as learner_lib  # noqa: E402
from ssp_jax.rl import train_state as ts  # noqa: E402
from rl_helpers import CFG, make_batch, rl_cfg  # noqa: E402

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")


def mesh_sharder(data, tensor):
  devs = jax.devices()[:data * tensor]
  return Sharder(models.make_mesh((("data", data), ("tensor", tensor)), devices=devs))


def _leaves(tree):
  return jax.tree.leaves(jax.device_get(tree))


def _check_sharded_as_rules(learner):
  sh = learner.sharder
  logical = models.param_logical_axes(CFG)
  want = jax.tree.map(lambda ax: sh.spec(ax), logical,
                      is_leaf=lambda x: isinstance(x, tuple) and all(
                          a is None or isinstance(a, str) for a in x))
  got = jax.tree.map(lambda p: p.sharding.spec, learner.state["params"])
  assert got == want
  assert got["embed"] == jax.sharding.PartitionSpec("tensor", "data")   # vocab x embed
  adam = learner.state["opt_state"][1][0]
  for moments in (adam.mu, adam.nu):
    assert jax.tree.map(lambda p: p.sharding.spec, moments) == want
  # a sharded leaf really is split: each device holds a slice
  emb = learner.state["params"]["embed"]
  assert emb.addressable_shards[0].data.shape == (CFG.vocab_size // 2, CFG.hidden_size // 4)


def test_mesh_step_equals_single_device_and_stays_sharded():
  rl = rl_cfg(micro_batch_size=4, recompute_old_logp=False)
  single = learner_lib.Learner(CFG, rl)
  multi = learner_lib.Learner(CFG, rl, mesh_sharder(4, 2))
  _check_sharded_as_rules(multi)
  for seed in range(2):
    b = make_batch(8, seed=seed)
    m1 = single.update(b)
    m8 = multi.update(b)
    for a, c in zip(m1, m8):
      for k in a:
        np.testing.assert_allclose(a[k], c[k], rtol=2e-4, atol=1e-6, err_msg=k)
  _check_sharded_as_rules(multi)
  flat1 = jax.tree_util.tree_flatten_with_path(jax.device_get(single.state["params"]))[0]
  flat8 = jax.tree.leaves(jax.device_get(multi.state["params"]))
  for (path, a), c in zip(flat1, flat8):
    if "bk" in jax.tree_util.keystr(path):
      # softmax is invariant to the key bias: its true gradient is 0 and Adam scales the
      # rounding noise (different on each mesh) up to +-lr, so it is compared loosely.
      np.testing.assert_allclose(a, c, atol=3 * rl.lr)
    else:
      # Adam turns rounding noise in near-zero gradients into O(lr) steps; a 0.2% of lr slack
      # still catches any real difference (a wrong gradient moves a param by ~lr per update).
      np.testing.assert_allclose(a, c, rtol=1e-4, atol=2e-3 * rl.lr,
                                 err_msg=jax.tree_util.keystr(path))


def test_restore_onto_a_different_mesh_shape(tmp_path):
  src = learner_lib.Learner(CFG, rl_cfg(micro_batch_size=4, recompute_old_logp=False),
                            mesh_sharder(4, 2))
  src.update(make_batch(8))
  with checkpointing.Checkpointer(str(tmp_path / "ck")) as ck:
    ck.save(1, src.state)
  for data, tensor in ((8, 1), (2, 2), (1, 1)):
    abstract, shardings = ts.state_shardings(CFG, src.tx, mesh_sharder(data, tensor))
    with checkpointing.Checkpointer(str(tmp_path / "ck")) as ck:
      st = ck.restore(abstract, shardings)
    assert st["params"]["embed"].sharding == shardings["params"]["embed"]
    assert st["opt_state"][1][0].mu["embed"].sharding == shardings["params"]["embed"]
    for a, c in zip(_leaves(st), _leaves(src.state)):
      np.testing.assert_array_equal(a, c)
