"""Advantage estimators and the policy loss against hand-computed values."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssp_jax import rl
from ssp_jax.rl import advantages as adv_lib
from ssp_jax.rl import losses
from ssp_jax.rl.config import get_rl_config
from ssp_jax.rl.registry import RLConfigError
from ssp_jax.rl.roles import RoleTable


# ---------------------------------------------------------------------------- advantages
def test_grpo_matches_hand_values_ddof1():
  r = np.array([1.0, 0.0, 0.0, 1.0, 1.0], np.float32)
  g = np.array([7, 7, 7, 3, 3])
  a = rl.grpo_advantages(r, g)
  # group 7: mean 1/3, std(ddof=1) = sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3)
  s = math.sqrt(1 / 3)
  np.testing.assert_allclose(a[:3], [(2 / 3) / (s + 1e-6), (-1 / 3) / (s + 1e-6),
                                     (-1 / 3) / (s + 1e-6)], rtol=1e-6)
  # group 3: all equal -> 0 (0 / (0 + eps)), never NaN
  np.testing.assert_array_equal(a[3:], [0.0, 0.0])
  assert isinstance(a, np.ndarray) and a.dtype == np.float32


def test_grpo_group_of_one_is_raw_reward_as_verl():
  r = np.array([0.8, 0.25, -1.0], np.float32)
  a = rl.grpo_advantages(r, np.array([0, 1, 2]))
  np.testing.assert_allclose(a, r / (1 + 1e-6), rtol=1e-7)
  np.testing.assert_allclose(rl.grpo_advantages(r, np.array([0, 1, 2]), std_normalize=False), r)


def test_grpo_mean_only_and_jax_inputs_under_jit():
  r = jnp.array([1.0, 0.0, 1.0, 1.0])
  g = jnp.array([0, 0, 0, 5])
  a = jax.jit(lambda r, g: rl.grpo_advantages(r, g, std_normalize=False))(r, g)
  np.testing.assert_allclose(a, [1 / 3, -2 / 3, 1 / 3, 1.0], rtol=1e-6)
  assert isinstance(a, jax.Array)
  np.testing.assert_allclose(rl.grpo_advantages(r, g), rl.grpo_advantages(np.asarray(r),
                                                                           np.asarray(g)),
                             rtol=1e-6)


def test_reinforce_and_rloo():
  r = np.array([1.0, 0.0, 0.0, 0.5], np.float32)
  g = np.array([0, 0, 0, 1])
  np.testing.assert_array_equal(rl.reinforce_advantages(r, g), r)
  # rloo: r_i - mean of the others in the group; group of one keeps r
  np.testing.assert_allclose(rl.rloo_advantages(r, g), [1.0, -0.5, -0.5, 0.5], rtol=1e-6)


def test_role_table_uses_each_roles_estimator_and_weight():
  r = np.array([0.6, 1.0, 0.0, 1.0, 0.0], np.float32)
  g = np.array([0, 0, 0, 1, 1])      # the proposer row's id collides with a solver group
  rl_cfg = get_rl_config(roles={"proposer": "reinforce", "solver": "grpo"})
  rl_cfg.roles.solver.loss_weight = 0.5
  table = RoleTable.from_config(rl_cfg, ("proposer", "solver"))
  ids = table.ids(["proposer"] + ["solver"] * 4)
  assert ids.tolist() == [0, 1, 1, 1, 1]
  a = table.advantages(r, g, ids)
  assert a[0] == pytest.approx(0.6)   # not mixed into the solver group 0
  s = math.sqrt(0.5)
  np.testing.assert_allclose(a[1:], np.array([0.5, -0.5, 0.5, -0.5]) / (s + 1e-6), rtol=1e-6)
  assert table.loss_weights(ids).tolist() == [1.0, 0.5, 0.5, 0.5, 0.5]
  with pytest.raises(RLConfigError, match="role 'judge', which the game did not declare"):
    table.ids(["judge"])
  # a game's third role is data: its own name, estimator and weight
  three = RoleTable.from_config(get_rl_config(roles={"a": "grpo", "b": "rloo", "c": "reinforce"}),
                                ("c", "b", "a"))
  assert [x.estimator for x in three.roles] == ["reinforce", "rloo", "grpo"]
  with pytest.raises(KeyError, match="known: grpo, reinforce, rloo"):
    adv_lib.compute_advantages("gae", r, g)


# ---------------------------------------------------------------------------- policy loss
def _loss(logp, old, ref, a, m, **kw):
  loss, met = rl.policy_loss(jnp.asarray(logp, jnp.float32), jnp.asarray(old, jnp.float32),
                             None if ref is None else jnp.asarray(ref, jnp.float32),
                             jnp.asarray(a, jnp.float32), jnp.asarray(m, jnp.float32), **kw)
  return float(loss), {k: float(v) for k, v in met.items()}


def test_ppo_clip_low_high_and_dual_clip_hand_values():
  # one sequence per case, one token each; ratios 1.5, 0.5, 5.0, 0.5 for A = +1, +1, -1, -1
  lr = np.log([1.5, 0.5, 5.0, 0.5])[:, None]
  logp, old = lr, np.zeros_like(lr)
  a = np.array([1.0, 1.0, -1.0, -1.0])
  m = np.ones_like(lr)
  per_tok = []
  for k in range(4):
    loss, _ = _loss(logp[k:k + 1], old[k:k + 1], None, a[k:k + 1], m[k:k + 1], kl_coef=0.0)
    per_tok.append(loss)
  # A>0, r=1.5: max(-1.5, -1.285) = -1.285 (clipped high at 1.285)
  # A>0, r=0.5: max(-0.5, -0.8)   = -0.5  (low clip does not bind for A>0)
  # A<0, r=5.0: max(5, 1.285) = 5, dual clip min(3, 5) = 3
  # A<0, r=0.5: max(0.5, 0.8) = 0.8 (clipped low at 0.8)
  np.testing.assert_allclose(per_tok, [-1.285, -0.5, 3.0, 0.8], rtol=1e-5)
  loss, met = _loss(logp, old, None, a, m, kl_coef=0.0)
  assert loss == pytest.approx(np.mean([-1.285, -0.5, 3.0, 0.8]), rel=1e-5)
  assert met["clipfrac"] == pytest.approx(2 / 4)        # cases 1 and 4 (veRL: loss2 > loss1)
  assert met["clipfrac_lower"] == pytest.approx(1 / 4)  # case 3
  # without dual clip, case 3 costs the full 5
  loss_nodual, _ = _loss(logp[2:3], old[2:3], None, a[2:3], m[2:3], kl_coef=0.0, dual_clip=None)
  assert loss_nodual == pytest.approx(5.0, rel=1e-5)


def test_extreme_ratios_are_clamped_and_finite():
  logp = np.array([[0.0, -1e4, 1e4]])
  old = np.array([[-1e4, 0.0, -1e4]])
  for a in (1.0, -1.0):
    loss, met = _loss(logp, old, old, [a], np.ones_like(logp), dual_clip=None)
    assert np.isfinite(loss) and all(np.isfinite(v) for v in met.values())
  # A = -1, no dual clip: exp(20) on the two huge ratios, 0.8 on the tiny one
  loss, _ = _loss(logp, old, None, [-1.0], np.ones_like(logp), dual_clip=None, kl_coef=0.0)
  assert loss == pytest.approx((2 * math.exp(20) + 0.8) / 3, rel=1e-5)


def test_k3_and_k1_kl_hand_values():
  logp = np.array([[-1.0, -2.0, -0.5, 0.0]])
  ref = np.array([[-1.5, -1.0, -0.5, -40.0]])
  d = ref - logp
  k3 = np.clip(np.exp(np.clip(d, -20, 20)) - np.clip(d, -20, 20) - 1, -10, 10)
  assert k3[0, 3] == 10.0  # exp(-20) + 20 - 1 > 10 -> clamped
  np.testing.assert_allclose(losses.kl_k3(jnp.asarray(logp), jnp.asarray(ref)), k3, rtol=1e-6)
  # same ratio -> pg part is -A per token; with A = 0 the loss is kl_coef * mean kl
  loss, met = _loss(logp, logp, ref, [0.0], np.ones_like(logp), kl_coef=0.5)
  assert loss == pytest.approx(0.5 * k3.mean(), rel=1e-6)
  assert met["kl_loss"] == pytest.approx(k3.mean(), rel=1e-6)
  loss, _ = _loss(logp, logp, ref, [0.0], np.ones_like(logp), kl_coef=1.0, kl_type="k1")
  assert loss == pytest.approx((logp - ref).mean(), rel=1e-6)


def test_aggregations_and_fully_masked_rows():
  logp = np.zeros((3, 4))
  adv = np.array([1.0, 2.0, 5.0])
  m = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], np.float32)
  # ratio 1 everywhere: per-token loss = -A
  loss, _ = _loss(logp, logp, None, adv, m, kl_coef=0.0, agg="token-mean")
  assert loss == pytest.approx(-(3 * 1 + 1 * 2) / 4)
  loss, _ = _loss(logp, logp, None, adv, m, kl_coef=0.0, agg="seq-mean-token-mean")
  assert loss == pytest.approx(-(1 + 2) / 2)    # row 3 (fully masked) is left out
  loss, _ = _loss(logp, logp, None, adv, m, kl_coef=0.0, agg="seq-mean-token-sum")
  assert loss == pytest.approx(-(3 + 2) / 2)
  for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
    loss, met = _loss(logp, logp, logp, adv, np.zeros_like(m), agg=agg)
    assert loss == 0.0 and all(v == 0.0 for v in met.values())


def test_loss_agg_on_hand_computed_rows_of_different_lengths_padded_and_packed():
  """veRL's two names: token-mean (exact token mean of the mini-batch) and seq-mean-token-mean
  (mean over trajectories of per-trajectory token means), on trajectories of 1, 2 and 4 loss
  tokens with per-token losses chosen by hand; the packed layout gives the same numbers."""
  # ratio 1 everywhere (logp == old): per-token loss = -A. Trajectories a, b, c.
  # a: 4 loss tokens, A = 1; b: 2 loss tokens, A = -2; c: 1 loss token, A = 4.
  token_mean = -(4 * 1 + 2 * -2 + 1 * 4) / 7            # = -4/7
  seq_mean = -(1 + -2 + 4) / 3                           # = -1
  assert token_mean == pytest.approx(-4 / 7) and seq_mean == pytest.approx(-1.0)
  # padded: one row each, T = 6 (a prompt token first, padding after)
  m = np.array([[0, 1, 1, 1, 1, 0], [0, 1, 1, 0, 0, 0], [0, 1, 0, 0, 0, 0]], np.float32)
  z = np.zeros_like(m)
  loss, _ = _loss(z, z, None, [1.0, -2.0, 4.0], m, kl_coef=0.0, agg="token-mean")
  assert loss == pytest.approx(token_mean, rel=1e-6)
  loss, _ = _loss(z, z, None, [1.0, -2.0, 4.0], m, kl_coef=0.0, agg="seq-mean-token-mean")
  assert loss == pytest.approx(seq_mean, rel=1e-6)
  # packed: a and c in row 0 (segments 1, 2), b in row 1; per-token advantages and each
  # token's trajectory size (seq_tokens) replace the per-row ones
  mp = np.array([[0, 1, 1, 1, 1, 0, 1, 0], [0, 1, 1, 0, 0, 0, 0, 0]], np.float32)
  adv = np.array([[1, 1, 1, 1, 1, 4, 4, 0], [-2, -2, -2, 0, 0, 0, 0, 0]], np.float32)
  st = np.array([[4, 4, 4, 4, 4, 1, 1, 0], [2, 2, 2, 0, 0, 0, 0, 0]], np.float32)
  zp = np.zeros_like(mp)
  for agg, want in (("token-mean", token_mean), ("seq-mean-token-mean", seq_mean),
                    ("seq-mean-token-sum", -(4 * 1 + 2 * -2 + 1 * 4) / 3)):
    loss, _ = _loss(zp, zp, None, adv, mp, kl_coef=0.0, agg=agg, seq_tokens=st)
    assert loss == pytest.approx(want, rel=1e-6), agg
    padded, _ = _loss(z, z, None, [1.0, -2.0, 4.0], m, kl_coef=0.0, agg=agg)
    assert padded == pytest.approx(want, rel=1e-6), agg
  # without seq_tokens a packed row would count as one sequence: a different (wrong) number
  loss, _ = _loss(zp, zp, None, adv, mp, kl_coef=0.0, agg="seq-mean-token-mean")
  assert loss != pytest.approx(seq_mean)


def test_masked_tokens_get_exactly_zero_gradient_even_with_nan_inputs():
  rng = np.random.default_rng(0)
  logp = jnp.asarray(-rng.random((2, 5)), jnp.float32)
  old = np.asarray(-rng.random((2, 5)), np.float32)
  ref = np.asarray(-rng.random((2, 5)), np.float32)
  m = np.array([[0, 1, 1, 0, 1], [1, 0, 0, 1, 0]], np.float32)
  adv = jnp.array([0.7, -1.3])
  old_bad = np.where(m > 0, old, np.nan)
  ref_bad = np.where(m > 0, ref, np.inf)

  def f(lp, o, r):
    return rl.policy_loss(lp, o, r, adv, m)[0]

  g = jax.grad(f)(logp, old_bad, ref_bad)
  assert np.all(np.asarray(g)[m == 0] == 0.0)
  assert np.all(np.asarray(g)[m == 1] != 0.0)
  # observation tokens' old / ref log-probs change nothing
  assert float(f(logp, old_bad, ref_bad)) == float(f(logp, old, ref))
  logp_bad = jnp.where(m > 0, logp, jnp.nan)
  assert float(f(logp_bad, old, ref)) == float(f(logp, old, ref))


def test_row_weights_and_entropy_metric():
  logp = np.zeros((2, 2))
  m = np.ones((2, 2))
  ent = np.array([[1.0, 2.0], [3.0, 4.0]])
  loss, met = _loss(logp, logp, None, [1.0, 1.0], m, kl_coef=0.0, entropy=ent,
                    row_weights=[2.0, 0.0])
  assert loss == pytest.approx(-2.0 * 2 / 4)
  assert met["entropy"] == pytest.approx(2.5)
  loss, _ = _loss(logp, logp, None, [0.0, 0.0], m, kl_coef=0.0, entropy=ent, entropy_coef=0.1)
  assert loss == pytest.approx(-0.25)


def test_registries_name_unknown_choices():
  with pytest.raises(KeyError, match="known: seq-mean-token-mean, seq-mean-token-sum"):
    rl.policy_loss(jnp.zeros((1, 1)), jnp.zeros((1, 1)), None, jnp.zeros(1), jnp.ones((1, 1)),
                   kl_coef=0.0, agg="sum")
  with pytest.raises(ValueError, match="ref_logp"):
    rl.policy_loss(jnp.zeros((1, 1)), jnp.zeros((1, 1)), None, jnp.zeros(1), jnp.ones((1, 1)))
