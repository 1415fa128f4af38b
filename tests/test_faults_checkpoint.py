"""Issue 16 drills on orbax checkpoints: a damaged latest checkpoint falls back to the newest
intact one with a warning naming what was wrong (real orbax, real files cut short)."""
import logging
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssp_jax.checkpointing import Checkpointer, CheckpointCorrupt


def _state(v: float) -> dict:
  return {"params": {"w": jnp.full((64, 64), v, jnp.float32)},
          "opt_state": {"m": jnp.full((64, 64), -v, jnp.float32)},
          "rng": jnp.zeros((2,), jnp.uint32), "step": jnp.asarray(int(v), jnp.int32),
          "nonfinite": jnp.asarray(0, jnp.int32), "nonfinite_total": jnp.asarray(0, jnp.int32)}


def _abstract():
  st = _state(0)
  dev = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return (jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), st),
          jax.tree.map(lambda a: dev, st))


def _write(root, steps):
  ck = Checkpointer(root, async_save=False, keep=5)
  seen = {}
  ck.register("counter", lambda: {"at": seen.get("now")}, lambda v: seen.update(restored=v))
  for s in steps:
    seen["now"] = s
    ck.save(s, _state(float(s)), force=True)
  ck.close()


def _data_files(step_dir):
  out = []
  for d, _, files in os.walk(os.path.join(step_dir, "params")):
    out += [os.path.join(d, f) for f in files]
  return sorted(out, key=os.path.getsize)


def _truncate_largest(step_dir):
  victim = _data_files(step_dir)[-1]
  size = os.path.getsize(victim)
  with open(victim, "r+b") as f:
    f.truncate(size // 3)
  return victim


def test_truncated_latest_falls_back_with_warning(tmp_path, caplog):
  root = str(tmp_path / "ckpt")
  _write(root, [1, 2])
  _truncate_largest(os.path.join(root, "2"))
  ck = Checkpointer(root, async_save=False)
  seen = {}
  ck.register("counter", lambda: {}, lambda v: seen.update(restored=v))
  abstract, shard = _abstract()
  with caplog.at_level(logging.WARNING, logger="ssp_jax.checkpointing"):
    step, state = ck.restore_newest_intact(abstract, shard)
  assert step == 1
  np.testing.assert_array_equal(np.asarray(state["params"]["w"]), 1.0)
  assert seen["restored"] == {"at": 1}      # components come from the same (intact) step
  warn = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
  assert any("checkpoint 2" in w and "unreadable" in w for w in warn), warn
  # the damaged step is moved aside, so the resumed run can write step 2 again
  assert ck.all_steps() == [1]
  assert any(n.startswith("2.corrupt-") for n in os.listdir(root))
  assert ck.save(2, _state(2.0), force=True)
  ck.close()


def test_missing_data_file_falls_back(tmp_path):
  root = str(tmp_path / "ckpt")
  _write(root, [1, 2, 3])
  for f in _data_files(os.path.join(root, "3")):
    os.remove(f)
  ck = Checkpointer(root, async_save=False)
  step, _ = ck.restore_newest_intact(*_abstract())
  ck.close()
  assert step == 2


def test_every_checkpoint_damaged_names_each(tmp_path):
  root = str(tmp_path / "ckpt")
  _write(root, [1, 2])
  for s in ("1", "2"):
    _truncate_largest(os.path.join(root, s))
  ck = Checkpointer(root, async_save=False)
  with pytest.raises(CheckpointCorrupt, match=r"no checkpoint in .* restores: 2 \(.*; 1 \("):
    ck.restore_newest_intact(*_abstract())
  ck.close()
