"""rl.logprob_positions="loss" (the output projection only at the loss tokens) gives the update
that scoring every position gives: same losses, metrics and new params, padded and packed, with
one or several mini-batches (the separate old-log-prob pass scores the loss tokens too)."""
import jax
import numpy as np
import pytest

from ssp_jax.rl import learner as learner_lib
from ssp_jax.rl.step import score_positions

from rl_helpers import CFG, make_batch, rl_cfg


def test_score_positions_lists_each_rows_loss_tokens_in_a_power_of_two():
  mask = np.zeros((2, 2, 300), np.float32)
  mask[0, 0, [5, 9, 290]] = 1
  mask[1, 1, 10:80] = 1                       # 70 loss tokens: the widest row
  idx = score_positions(mask)
  assert idx.shape == (2, 2, 128) and idx.dtype == np.int32
  np.testing.assert_array_equal(idx[0, 0, :4], [5, 9, 290, -1])
  np.testing.assert_array_equal(idx[1, 1, :70], np.arange(10, 80))
  assert (idx[1, 1, 70:] == -1).all() and (idx[0, 1] == -1).all()
  assert score_positions(mask[..., :100]).shape[-1] == 100   # never more than T
  assert score_positions(np.zeros((1, 1, 32))).shape[-1] == 32


def _update(positions, **kw):
  learner = learner_lib.Learner(CFG, rl_cfg(logprob_positions=positions, **kw))
  metrics = learner.update(make_batch(8, seed=3))
  return metrics, jax.tree.leaves(jax.device_get(learner.state["params"]))


@pytest.mark.parametrize("kw", [dict(pack=False), dict(pack=True, pack_len=64),
                                dict(pack=True, pack_len=64, mini_batch_size=2)],
                         ids=["padded", "packed", "packed-2-mini-batches"])
def test_loss_positions_update_equals_scoring_every_position(kw):
  got, p_got = _update("loss", **kw)
  want, p_want = _update("all", **kw)
  assert len(got) == len(want) >= 1
  for g, w in zip(got, want):
    for k in ("loss", "pg_loss", "kl_loss", "entropy", "ppo_kl", "grad_norm", "loss_tokens"):
      # ppo_kl is a mean of log-prob differences (log-probs ~ -10): fp32 rounding ~1e-6
      np.testing.assert_allclose(g[k], w[k], rtol=1e-5, atol=1e-6 if k == "ppo_kl" else 1e-7,
                                 err_msg=k)
  assert any(abs(g["loss"]) > 1e-4 for g in got)   # the update did something
  # Adam moves a weight by ~lr whatever its gradient's size, so a gradient within rounding of 0
  # may step either way: the params to lr / 100 (rl_cfg's lr is 1e-2)
  for a, b in zip(p_got, p_want):
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)


def test_logprobs_at_the_loss_tokens_equal_every_position_there():
  learner = learner_lib.Learner(CFG, rl_cfg(pack=False))
  batch = make_batch(6, seed=4)
  every = learner.logprobs(batch)
  loss = learner.logprobs(batch, loss_only=True)
  keep = batch.loss_mask > 0
  np.testing.assert_allclose(loss[keep], every[keep], rtol=1e-5, atol=1e-6)
  assert (loss[~keep] == 0).all() and (every[~keep] != 0).any()
