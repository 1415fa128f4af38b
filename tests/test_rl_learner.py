"""Batching, the fused learner step and checkpoints on a tiny random model (CPU, one device)."""
import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from ssp_jax import checkpointing
from ssp_jax.rl import batch as batch_lib
from ssp_jax.rl import learner as learner_lib
from ssp_jax.rl import losses
from ssp_jax.rl import step as step_lib
from ssp_jax.rl import train_state as ts
from ssp_jax.rl.config import check_rl_config
from ssp_jax.rl.registry import RLConfigError
from ssp_jax.types import Trajectory

from rl_helpers import CFG, make_batch, rl_cfg  # noqa: E402


# ---------------------------------------------------------------------------- batching
def test_make_batch_alignment_masks_and_buckets():
  t = Trajectory(prompt_ids=[5, 6, 7], response_ids=[8, 9, 10, 11], loss_mask=[1, 0, 0, 1],
                 logprobs=[-0.5, 0.0, 0.0, -0.25])
  b = batch_lib.make_batch([t], [1.5], [1], bucket=4)
  assert b.tokens.shape == (1, 8)
  np.testing.assert_array_equal(b.tokens[0], [5, 6, 7, 8, 9, 10, 11, 0])
  np.testing.assert_array_equal(b.loss_mask[0], [0, 0, 0, 1, 0, 0, 1, 0])
  np.testing.assert_array_equal(b.old_logp[0], [0, 0, 0, -0.5, 0, 0, -0.25, 0])
  assert batch_lib.bucket_length(129) == 256 and batch_lib.bucket_length(1) == 128
  with pytest.warns(UserWarning, match="truncated"):
    b = batch_lib.make_batch([t], [1.0], [0], bucket=4, max_len=5)
  np.testing.assert_array_equal(b.loss_mask[0], [0, 0, 0, 1, 0])
  with pytest.raises(ValueError, match="one advantage and one role"):
    batch_lib.make_batch([t], [1.0, 2.0], [0])


def test_split_mini_batches_keeps_prompts_together_and_pads():
  b = make_batch(7)
  parts = batch_lib.split_mini_batches(b, 2, row_multiple=4)
  assert len(parts) == 2 and all(p.num_rows == 4 for p in parts)
  seen = [set(p.prompt[p.prompt >= 0]) for p in parts]
  assert not (seen[0] & seen[1]) and seen[0] | seen[1] == set(b.prompt)
  assert sum(p.loss_mask.sum() for p in parts) == b.loss_mask.sum()
  assert batch_lib.num_mini_batches(256, 128) == 2


# ---------------------------------------------------------------------------- log-probs
@pytest.mark.parametrize("chunk", [3])  # 3 does not divide T: chunks of 2
def test_chunked_logprobs_equal_full_log_softmax(chunk):
  params = models.init_params(CFG, jax.random.PRNGKey(0))
  tok = jnp.asarray(make_batch().tokens)
  sc = learner_lib.StepConfig(compute_dtype="float32", logprob_chunk=chunk, temperature=0.7)
  logp, ent = jax.jit(lambda p, t: learner_lib.sequence_logprobs(CFG, p, t, sc))(params, tok)
  logits = models.decoder.forward_jit(CFG, params, tok) / 0.7
  ls = jax.nn.log_softmax(logits, -1)
  want = jnp.take_along_axis(ls[:, :-1], tok[:, 1:, None], -1)[..., 0]
  np.testing.assert_allclose(logp[:, 1:], want, atol=1e-5)
  np.testing.assert_allclose(ent[:, 1:], -(jnp.exp(ls) * ls).sum(-1)[:, :-1], atol=1e-5)
  assert np.all(np.asarray(logp[:, 0]) == 0)


def test_masked_tokens_get_zero_gradient_through_the_lm_head():
  """d loss / d h[t] is exactly 0 where h[t] predicts a mask-0 token (its only use)."""
  params = models.init_params(CFG, jax.random.PRNGKey(1))
  b = make_batch()
  tok = jnp.asarray(b.tokens)
  sc = learner_lib.StepConfig(compute_dtype="float32", logprob_chunk=8)
  h = models.hidden_states(CFG, params, tok)
  w = learner_lib.lm_head_weight(CFG, params)

  def loss(h):
    tgt = jnp.concatenate([tok[:, 1:], tok[:, :1] * 0], 1)
    lp, _ = learner_lib.chunked_logprobs(w, h, tgt, chunk=sc.logprob_chunk)
    lp = jnp.concatenate([lp[:, :1] * 0, lp[:, :-1]], 1)
    # on-policy (ratio 1), so no token is clipped and every loss token has a gradient
    return losses.policy_loss(lp, jax.lax.stop_gradient(lp), None, b.advantages,
                              b.loss_mask, kl_coef=0.0)[0]

  g = np.asarray(jax.grad(loss)(h))           # [B, T, D]; h[t] scores token t + 1
  scores_masked = b.loss_mask[:, 1:] == 0
  assert np.all(g[:, :-1][scores_masked] == 0.0)
  assert np.all(np.abs(g[:, :-1][~scores_masked]).sum(-1) > 0)


def _head_grads(compute_dtype, logits_grad_dtype):
  rng = np.random.default_rng(4)
  dt = jnp.dtype(compute_dtype)
  h = jnp.asarray(rng.normal(size=(2, 8, CFG.hidden_size)), dt)
  w = jnp.asarray(rng.normal(size=(CFG.hidden_size, CFG.vocab_size)) * 0.1, dt)
  tgt = jnp.asarray(rng.integers(0, CFG.vocab_size, (2, 8)), jnp.int32)

  def loss(h, w):
    lp, ent = learner_lib.chunked_logprobs(w, h, tgt, chunk=4,
                                           logits_grad_dtype=logits_grad_dtype)
    return jnp.sum(lp * jnp.arange(1, 9)) + 0.1 * jnp.sum(ent)
  f = jax.grad(loss, argnums=(0, 1))
  return f(h, w), str(jax.make_jaxpr(f)(h, w))


def test_logits_grad_in_the_compute_dtype():
  """rl.logits_grad_dtype: "compute" rounds the fp32 logits' cotangent to the compute dtype
  before the output projection's two backward GEMMs (no fp32 GEMM on a bf16 model); "float32"
  keeps it. Same gradients at fp32 compute, within bf16 rounding at bf16."""
  (g32, _), (c32, _) = _head_grads("float32", "float32"), _head_grads("float32", "compute")
  for a, b in zip(g32, c32):
    np.testing.assert_array_equal(a, b)
  (gf, jf), (gc, jc) = _head_grads("bfloat16", "float32"), _head_grads("bfloat16", "compute")
  for a, b in zip(gf, gc):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    np.testing.assert_allclose(b, a, rtol=0, atol=2e-2 * np.abs(a).max())
  mixed = lambda j: len(re.findall(r"f32\[2,4,%d\] = dot_general" % CFG.vocab_size, j))
  assert mixed(jf) >= 1 and mixed(jc) >= 1   # the forward logits are fp32 in both
  bf16_cotangent = lambda j: len(re.findall(
      r"bf16\[2,4,%d\] = convert_element_type" % CFG.vocab_size, j))
  assert bf16_cotangent(jc) >= 1 and bf16_cotangent(jf) == 0


def test_one_cast_per_update_gives_the_gradients_of_a_cast_per_micro_batch():
  """accumulate_grads casts the params to the compute dtype once and differentiates with
  respect to that copy: the same gradients, to the bit, as through a cast in each micro-batch."""
  learner = learner_lib.Learner(CFG, rl_cfg(compute_dtype="bfloat16", micro_batch_size=2))
  sc, p = learner.sc, learner.state["params"]
  mb = {k: jnp.asarray(v) for k, v in learner_lib.to_micro(make_batch().step_inputs(), 2).items()}
  got, _ = jax.jit(lambda p, mb: learner_lib.accumulate_grads(
      p, learner.ref_params, mb, CFG, sc, None, None))(p, mb)
  loss_w, metric_w = step_lib.loss_weights(mb, sc)

  def per_micro(p, i):
    x = {k: v[i] for k, v in mb.items()}
    x.update(loss_w=loss_w[i], metric_w=metric_w[i])
    ref = learner_lib.sequence_logprobs(CFG, learner.ref_params, x["tokens"], sc, None,
                                        remat="none")[0]
    return jax.grad(step_lib.micro_loss, has_aux=True)(p, ref, x, CFG, sc, None)[0]
  want = jax.jit(lambda p: jax.tree.map(lambda *g: sum(g), *[
      per_micro(p, i) for i in range(mb["tokens"].shape[0])]))(p)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    assert a.dtype == jnp.float32
    np.testing.assert_array_equal(a, b)


def test_empty_micro_batches_leave_gradients_and_metrics_unchanged():
  """Micro-batches without loss tokens (the power-of-two padding of micro_batches_bucket) are
  skipped by the cond that carries the accumulator through: the same sums, to the bit."""
  learner = learner_lib.Learner(CFG, rl_cfg(micro_batch_size=2))
  sc, p = learner.sc, learner.state["params"]
  mb = {k: jnp.asarray(v) for k, v in learner_lib.to_micro(make_batch().step_inputs(), 2).items()}
  padded = {k: jnp.concatenate([v, jnp.zeros_like(v[:3])]) for k, v in mb.items()}
  f = jax.jit(lambda p, mb: learner_lib.accumulate_grads(
      p, learner.ref_params, mb, CFG, sc, None, None))
  (g0, m0), (g1, m1) = f(p, mb), f(p, padded)
  assert padded["tokens"].shape[0] == mb["tokens"].shape[0] + 3
  for a, b in zip(jax.tree.leaves((g0, m0)), jax.tree.leaves((g1, m1))):
    np.testing.assert_array_equal(a, b)
  assert any(np.abs(np.asarray(a)).max() > 0 for a in jax.tree.leaves(g0))


def test_observation_old_and_ref_logprobs_change_nothing_in_the_step():
  learner = learner_lib.Learner(CFG, rl_cfg(recompute_old_logp=False))
  b = make_batch()
  noise = np.random.default_rng(3).normal(size=b.old_logp.shape).astype(np.float32)
  b2 = b.replace(old_logp=np.where(b.loss_mask > 0, b.old_logp, noise * 100))
  sc = learner.sc
  p = learner.state["params"]
  p_sh = learner.state_shardings["params"]
  grad_fn = jax.jit(lambda p, mb: learner_lib.accumulate_grads(
      p, learner.ref_params, mb, CFG, sc, None, p_sh))
  grads = []
  for bb in (b, b2):
    mb = {k: jnp.asarray(v) for k, v in learner_lib.to_micro(bb.step_inputs(), 2).items()}
    grads.append(grad_fn(p, mb))
  for a, c in zip(jax.tree.leaves(grads[0]), jax.tree.leaves(grads[1])):
    np.testing.assert_array_equal(a, c)


# ---------------------------------------------------------------------------- the step
def test_updates_decrease_the_loss_and_change_params():
  learner = learner_lib.Learner(CFG, rl_cfg(recompute_old_logp=False))
  b = make_batch()
  b = b.replace(old_logp=np.where(b.loss_mask > 0, learner.logprobs(b), 0.0))  # fixed behaviour
  p0 = jax.device_get(learner.state["params"])
  losses = [learner.update(b)[0]["loss"] for _ in range(6)]
  assert losses[-1] < losses[0] - 1e-3, losses
  p1 = jax.device_get(learner.state["params"])
  assert any(not np.array_equal(a, c) for a, c in zip(jax.tree.leaves(p0), jax.tree.leaves(p1)))
  assert int(learner.state["step"]) == 6 and int(learner.state["nonfinite_total"]) == 0


def test_two_mini_batches_second_is_off_policy():
  learner = learner_lib.Learner(CFG, rl_cfg(mini_batch_size=3))
  m = learner.update(make_batch(8))        # 5 prompts, 3 per mini-batch
  assert len(m) == 2
  assert m[0]["ppo_kl"] == 0.0 and m[0]["clipfrac"] == 0.0    # recomputed old == current
  assert m[1]["ppo_kl"] != 0.0                                # the policy moved in between


@pytest.mark.parametrize("pack", [False, True])
def test_fused_old_logp_equals_a_separate_old_logp_pass(pack):
  """One mini-batch: old log-probs from the step's own forward give the update a separate
  recompute pass gives (the ratio is 1 either way), so params match after two updates."""
  out = {}
  for fuse in (False, True):
    learner = learner_lib.Learner(CFG, rl_cfg(fuse_old_logp=fuse, pack=pack))
    ms = [learner.update(make_batch(seed=s))[0] for s in (0, 1)]
    out[fuse] = ms, jax.device_get(learner.state["params"])
  (m0, p0), (m1, p1) = out[False], out[True]
  for a, b in zip(m0, m1):
    assert a["ppo_kl"] == 0.0 and b["ppo_kl"] == 0.0 and b["clipfrac"] == 0.0
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a["grad_norm"], b["grad_norm"], rtol=1e-4)
  for a, b in zip(jax.tree.leaves(p0), jax.tree.leaves(p1)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_nonfinite_update_is_skipped_and_counted():
  learner = learner_lib.Learner(CFG, rl_cfg(max_nonfinite_steps=2))
  bad = make_batch()
  bad = bad.replace(advantages=np.where(np.arange(bad.num_rows) == 1, np.nan, bad.advantages))
  p0 = jax.device_get(learner.state["params"])
  o0 = jax.device_get(learner.state["opt_state"])
  m = learner.update(bad)[0]
  assert m["update_ok"] == 0.0 and not np.isfinite(m["loss"])
  for a, c in zip(jax.tree.leaves((p0, o0)), jax.tree.leaves(
      jax.device_get((learner.state["params"], learner.state["opt_state"])))):
    np.testing.assert_array_equal(a, c)
  assert int(learner.state["nonfinite"]) == 1 and not learner.should_stop()
  learner.update(bad)
  assert learner.should_stop()
  assert "2 consecutive" in ts.nonfinite_message(learner.state, 2)
  learner.update(make_batch())
  assert ts.host_scalars(learner.state) == {"step": 3, "nonfinite": 0, "nonfinite_total": 2}


def test_config_errors_name_the_field():
  """The `rl` section is checked in one place (`check_rl_config`, before any model is loaded)."""
  roles = ("proposer", "solver")
  check_rl_config(rl_cfg(), roles)
  with pytest.raises(RLConfigError, match=r"^config\.rl\.remat='some' is unknown; known: "):
    check_rl_config(rl_cfg(remat="some"), roles)
  with pytest.raises(RLConfigError, match=r"^config\.rl\.kl_type='k9' is unknown; known: k1, "):
    check_rl_config(rl_cfg(kl_type="k9"), roles)
  with pytest.raises(RLConfigError, match=r"config\.rl\.compute_dtype='f32' is not a dtype"):
    check_rl_config(rl_cfg(compute_dtype="f32"), roles)
  with pytest.raises(RLConfigError, match=r"config\.rl\.update_schedule='solver_first'"):
    check_rl_config(rl_cfg(update_schedule="solver_first"), roles)
  for bad in ("unroll", "scan:0", "scan:two"):
    with pytest.raises(RLConfigError, match=rf"config\.rl\.layer_loop='{bad}' is unknown; use "
                                            r"'scan', 'scan:N' \(N >= 1 layers an iteration\)"):
      check_rl_config(rl_cfg(layer_loop=bad), roles)


def test_unrolled_layer_loop_gives_the_scans_update():
  """rl.layer_loop reaches the step: "unrolled" and "scan:2" give the scan's loss and gradient
  norm."""
  b = make_batch()
  out = {}
  for loop in ("scan", "unrolled", "scan:2"):
    learner = learner_lib.Learner(CFG, rl_cfg(layer_loop=loop, recompute_old_logp=False))
    assert learner.sc.layer_loop == loop
    out[loop] = learner.update(b)[0]
  for k in ("loss", "grad_norm"):
    np.testing.assert_allclose(out["unrolled"][k], out["scan"][k], rtol=1e-4)
    np.testing.assert_allclose(out["scan:2"][k], out["scan"][k], rtol=1e-4)


def test_learners_own_their_compiled_steps():
  """No module-global cache: each learner compiles its own step variants and keeps them."""
  assert not [k for k, v in vars(learner_lib).items() if isinstance(v, dict) and k.isupper()]
  a, b = learner_lib.Learner(CFG, rl_cfg()), learner_lib.Learner(CFG, rl_cfg())
  a.update(make_batch())
  (key, fns), = a.steps._fns.items()          # one variant compiled, kept on the learner
  assert a.steps.get(*key) is fns and not b.steps._fns


# ---------------------------------------------------------------------------- checkpoints
def _params_equal(a, b):
  return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(jax.device_get(a)),
                                                  jax.tree.leaves(jax.device_get(b))))


def test_save_restore_continue_is_bitwise_equal(tmp_path):
  batches = [make_batch(seed=s) for s in range(5)]
  a = learner_lib.Learner(CFG, rl_cfg())
  replay = {"items": [1, 2]}
  ck = checkpointing.Checkpointer(str(tmp_path / "ck"), save_every=2, model_config=CFG)
  ck.register("replay", lambda: dict(replay), replay.update)
  for i, b in enumerate(batches[:2]):
    a.update(b)
  assert not ck.save(1, a.state) and ck.save(2, a.state)
  replay["items"] = ["changed"]
  for b in batches[2:]:
    a.update(b)
  ck.close()

  fresh = learner_lib.Learner(CFG, rl_cfg())   # same seed -> same reference policy
  ck2 = checkpointing.Checkpointer(str(tmp_path / "ck"))
  ck2.register("replay", lambda: dict(replay), replay.update)
  fresh.state = ck2.restore(fresh.abstract_state, fresh.state_shardings)
  assert replay["items"] == [1, 2] and ts.host_scalars(fresh.state)["step"] == 2
  for b in batches[2:]:
    fresh.update(b)
  assert _params_equal(fresh.state["params"], a.state["params"])
  assert _params_equal(fresh.state["opt_state"], a.state["opt_state"])
  ck2.close()


def test_keep_last_k_and_half_written_checkpoint_is_ignored(tmp_path):
  learner = learner_lib.Learner(CFG, rl_cfg())
  d = str(tmp_path / "ck")
  with checkpointing.Checkpointer(d, keep=2) as ck:
    for step in (1, 2, 3):
      ck.save(step, learner.state)
  # A crash mid-save leaves orbax's temporary directory behind, with partial contents.
  tmp = os.path.join(d, "4.orbax-checkpoint-tmp-1700000000")
  os.makedirs(os.path.join(tmp, "params"))
  with open(os.path.join(tmp, "params", "partial"), "wb") as f:
    f.write(b"\0" * 10)
  ck = checkpointing.Checkpointer(d, keep=2)
  assert ck.all_steps() == [2, 3] and ck.latest_step() == 3
  st = ck.restore(learner.abstract_state, learner.state_shardings)
  assert _params_equal(st["params"], learner.state["params"])
  with pytest.raises(FileNotFoundError, match="no committed checkpoint 7"):
    ck.restore(learner.abstract_state, learner.state_shardings, step=7)
  ck.close()


def test_export_to_hf_round_trips(tmp_path):
  learner = learner_lib.Learner(CFG, rl_cfg())
  learner.update(make_batch())
  d = str(tmp_path / "ck")
  with checkpointing.Checkpointer(d, model_config=CFG) as ck:
    ck.save(1, learner.state)
  assert checkpointing.export_checkpoint_to_hf(d, str(tmp_path / "hf")) == 1
  cfg2, params = models.load_hf_checkpoint(str(tmp_path / "hf"))
  assert cfg2 == CFG
  assert _params_equal(params, learner.state["params"])
  from ssp_jax import cli
  assert cli.main(["export", "--checkpoint", d, "--out", str(tmp_path / "hf2"),
                   "--dtype", "bfloat16"]) == 0
  with open(tmp_path / "hf2" / "config.json") as f:
    assert json.load(f)["torch_dtype"] == "bfloat16"
  assert cli.main(["export", "--checkpoint", str(tmp_path / "none"), "--out", "x"]) == 2
