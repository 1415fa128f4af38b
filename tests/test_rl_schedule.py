"""`rl.update_schedule`: the fused update against the original's proposer-then-solver calls
("by_role" in SSP's update order), on a tiny model with an SSP-shaped batch (proposer prompts of
1 row, solver prompts of 2 rows)."""
import jax
import numpy as np
import pytest

from rl_helpers import CFG, rl_cfg, trajectories
from ssp_jax.rl import batch as batch_lib
from ssp_jax.rl import train_state as ts
from ssp_jax.rl.learner import Learner
from ssp_jax.rl.roles import RoleTable
from ssp_jax.rl.schedule import run_updates as run_table_updates
from ssp_jax.ssp import game as ssp_game

P, S, N = 4, 4, 2          # proposer prompts, solver prompts, solver rows per prompt
LR, WARMUP = 1e-2, 5


def ssp_batch():
  """Rows 0..P-1: proposer (prompts 0..P-1); then S prompts of N solver rows each."""
  n = P + S * N
  roles = [0] * P + [1] * (S * N)
  prompt = list(range(P)) + [P + i // N for i in range(S * N)]
  adv = np.random.default_rng(3).normal(size=n)
  return batch_lib.make_batch(trajectories(n, seed=4), adv, roles, prompt_index=prompt,
                              bucket=16)


def run_updates(learner, batch, schedule):
  """The training loop's call with SSP's roles and update order."""
  table = RoleTable.from_config(learner.rl, ssp_game.ROLES)
  return run_table_updates(learner, batch, schedule, table, ssp_game.UPDATE_ORDER)


class RecordingLearner(Learner):
  """The real learner; remembers every old-log-prob pass it ran (one per mini-batch) with the
  number of optimizer steps taken before it."""
  seen: list

  def logprobs(self, batch, loss_only=False):
    out = super().logprobs(batch, loss_only)
    self.seen.append((int(self.state["step"]), out))
    return out


def make(cls=Learner, **kw):
  learner = cls(CFG, rl_cfg(mini_batch_size=2, lr=LR, warmup_steps=WARMUP, **kw))
  learner.seen = []
  return learner


def rows(batch, role):
  return batch.take_rows(np.flatnonzero(batch.role == role))


def test_optimizer_steps_per_role_and_lr_once_per_call():
  batch = ssp_batch()
  fused = make()
  ups = run_updates(fused, batch, "fused")
  # 8 prompts / mini-batch 2 = 4 steps (P, P, S, S); the LR schedule steps per optimizer step
  assert len(ups) == 4 and int(fused.state["step"]) == 4
  assert [u["lr"] for u in ups] == pytest.approx([LR * k / WARMUP for k in (1, 2, 3, 4)])
  assert ts.schedule_count(fused.state) == 4
  seq = make()
  ups = run_updates(seq, batch, "by_role")
  # veRL mini-batch = 2 prompts x 2 rows = 4 rows: proposer 4 rows -> 1 step, solver 8 -> 2
  assert [("proposer" if "role_proposer" in u else "solver") for u in ups] == \
      ["proposer", "solver", "solver"]
  assert int(seq.state["step"]) == 3
  # one LR-schedule step per update call: lr/5 for the proposer, 2 lr/5 for both solver steps
  assert [u["lr"] for u in ups] == pytest.approx([LR / WARMUP] + [2 * LR / WARMUP] * 2)
  assert ts.schedule_count(seq.state) == 2
  # Adam's own step count (bias correction) still counts optimizer steps
  adam = [x for x in jax.tree.leaves(seq.state["opt_state"],
                                     is_leaf=lambda x: hasattr(x, "mu")) if hasattr(x, "mu")]
  assert int(adam[0].count) == 3
  with pytest.raises(ValueError, match="update_schedule"):
    run_updates(seq, batch, "solver_first")
  # the schedule's name before roles were data still runs the same steps
  old = make()
  ups_old = run_updates(old, batch, "proposer_then_solver")
  assert [("proposer" if "role_proposer" in u else "solver") for u in ups_old] == \
      ["proposer", "solver", "solver"]
  np.testing.assert_allclose([u["loss"] for u in ups_old], [u["loss"] for u in ups], rtol=1e-6)


def test_solver_old_logprobs_come_after_the_proposer_update():
  batch = ssp_batch()
  # padded layout, so that a pass's rows are the mini-batch's rows in order; every old
  # log-prob pass separate (not taken from the step's forward), so each one is recorded
  seq = make(RecordingLearner, pack=False, fuse_old_logp=False)
  initial = seq.logprobs(batch)
  seq.seen.clear()
  ups = run_updates(seq, batch, "by_role")
  # one pass per mini-batch: the proposer's before any step, both solver ones after its step
  assert [step for step, _ in seq.seen] == [0, 1, 1]
  solver_old = seq.seen[1][1]            # solver mini-batch 1: its first 2 prompts (4 rows)
  ref = make(pack=False, fuse_old_logp=False)   # the same proposer update, a fresh learner
  ref.update(rows(batch, 0), num_mini_batches=1, lr_once=True)
  solver_rows = rows(batch, 1)
  first = solver_rows.take_rows(np.arange(4))
  expect = ref.logprobs(first)
  mask = first.loss_mask > 0
  np.testing.assert_allclose(solver_old[:4][mask], expect[mask], atol=1e-5)
  # ... which differ from the log-probs before any update (the weights moved)
  before = initial[batch.role == 1][:4]
  assert np.abs(solver_old[:4][mask] - before[mask]).max() > 1e-3
  # so the solver's first update is on-policy (ratio 1): no policy drift
  assert abs(ups[1]["ppo_kl"]) < 1e-6 and ups[1]["clipfrac"] == 0.0

  fused = make(RecordingLearner)
  ups = run_updates(fused, batch, "fused")
  assert [step for step, _ in fused.seen] == [0] * 4   # all passes before the 4 steps
  # fused: the solver's first mini-batch (update 3) starts two updates off-policy
  assert abs(ups[2]["ppo_kl"]) > 1e-4
