"""From a step's rows to optimizer updates, the same for every game.

`step_batch` turns the rows a game played (trajectories, rewards, role names, groups) into the
training batch, with the advantages of each role's estimator (`ssp_jax.rl.roles.RoleTable`);
`run_updates` applies it under `rl.update_schedule`:
  fused    one `Learner.update` call over all roles
  by_role  one call per role in the game's update order (SSP: proposer, then solver, the
           original's), each recomputing its old log-probs with the weights the previous call
           left, the LR schedule stepping once per call
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from ssp_jax.rl import batch as batch_lib
from ssp_jax.rl.config import BY_ROLE, UPDATE_SCHEDULES
from ssp_jax.rl.roles import RoleTable
from ssp_jax.types import Trajectory


def step_batch(table: RoleTable, trajectories: Sequence[Trajectory], rewards_N, roles_N,
               groups_N, *, bucket: int, max_len: Optional[int],
               pad_id: int = 0) -> tuple[batch_lib.Batch, np.ndarray]:
  """(training batch, advantages [N]) of a step's rows; `roles_N` are role names."""
  ids_N = table.ids(roles_N)
  adv_N = table.advantages(rewards_N, groups_N, ids_N)
  batch = batch_lib.make_batch(trajectories, adv_N, ids_N, prompt_index=groups_N,
                               loss_weights=table.loss_weights(ids_N), bucket=bucket,
                               max_len=max_len, pad_id=pad_id)
  return batch, adv_N


def update_by_role(learner, batch: batch_lib.Batch, table: RoleTable, order: Sequence[str], *,
                   rows_per_mini_batch: Optional[int] = None) -> dict[str, list[dict]]:
  """One update call per role in `order` (role names); {role name: metrics of its updates},
  roles without rows skipped.

  A role's rows are split into ceil(rows / rows_per_mini_batch) mini-batches (prompts kept
  whole); the default, rl.mini_batch_size x the largest prompt group in `batch`, is veRL's
  ppo_mini_batch_size x rollout.n (SSP paper setting: proposer 256 rows -> 1 step, solver
  1280 rows -> 2).
  """
  prompt = batch.prompt
  if rows_per_mini_batch is None:
    _, sizes = np.unique(prompt[prompt >= 0], return_counts=True)
    rows_per_mini_batch = learner.rl.mini_batch_size * int(sizes.max(initial=1))
  out = {}
  for name, role in zip(order, table.ids(order)):
    idx = np.flatnonzero((batch.role == role) & (prompt >= 0))
    if not idx.size:
      continue
    sub = batch.take_rows(idx)
    k = max(1, int(math.ceil(idx.size / rows_per_mini_batch)))
    out[name] = learner.update(sub, num_mini_batches=k, lr_once=True)
  return out


def run_updates(learner, batch: batch_lib.Batch, schedule: str, table: RoleTable,
                order: Sequence[str]) -> list[dict]:
  """The step's optimizer updates under `rl.update_schedule`, one metrics dict each; under
  by_role each is tagged `role_<name>` = 1."""
  if schedule == "fused":
    return learner.update(batch)
  if schedule in BY_ROLE:
    by_role = update_by_role(learner, batch, table, order)
    return [dict(u, **{f"role_{r}": 1.0}) for r, us in by_role.items() for u in us]
  raise ValueError(f"config.rl.update_schedule={schedule!r} is not one of {UPDATE_SCHEDULES}")


def role_update_counts(updates: Sequence[dict], names: Sequence[str]) -> dict[str, float]:
  """`updates/<role>`: optimizer steps per role of a by_role step (fused steps mix roles)."""
  return {f"updates/{r}": float(sum(u.get("role_" + r, 0.0) for u in updates)) for r in names}
