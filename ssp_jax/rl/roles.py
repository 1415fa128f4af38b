"""Roles as data: the `rl.roles` table, its checks, and the advantages of a step's rows.

A game declares its roles (a tuple of names, e.g. SSP's `("proposer", "solver")`, SvS's
`("solver", "synthesizer")`) and the order of its per-role update calls. The run config holds one
entry per role:

  rl.roles.<name>.estimator    advantage estimator (`ssp_jax.rl.registry.ADVANTAGE_ESTIMATORS`)
  rl.roles.<name>.loss_weight  multiplier of the loss weight of each of the role's sequences

A role's id (the `role` field of a batch) is its index in the game's declared tuple. The
training loop turns a step's rows (role names, rewards, groups) into advantages [N], role ids
[N] and loss weights [N] with one `RoleTable`, so no game computes advantages itself.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import ml_collections
import numpy as np

from ssp_jax.rl.advantages import compute_advantages
from ssp_jax.rl.registry import ADVANTAGE_ESTIMATORS, RLConfigError

ROLE_FIELDS = ("estimator", "loss_weight")


def roles_config(**estimators: str) -> ml_collections.ConfigDict:
  """`rl.roles` with one entry per role: roles_config(proposer="reinforce", solver="grpo")."""
  return ml_collections.ConfigDict({
      name: {"estimator": est,    # advantage estimator of the role's rows
             "loss_weight": 1.0}  # multiplier of each of its sequences' loss weight
      for name, est in estimators.items()})


def check_roles(roles_cfg: Any, declared: Sequence[str]) -> None:
  """RLConfigError naming the first bad field of `rl.roles` against the game's `declared` roles."""
  names = tuple(roles_cfg.keys()) if roles_cfg is not None else ()
  for name in names:
    if name not in declared:
      raise RLConfigError(f"config.rl.roles.{name} is not a role of this game; its roles are "
                          f"{', '.join(declared)}")
  for name in declared:
    if name not in names:
      raise RLConfigError(f"config.rl.roles has no entry for role {name!r}; add rl.roles.{name} "
                          f"= {{estimator, loss_weight}} (roles: {', '.join(declared)})")
    entry = roles_cfg[name]
    extra = sorted(set(entry.keys()) - set(ROLE_FIELDS))
    if extra:
      raise RLConfigError(f"config.rl.roles.{name}.{extra[0]} is not a role field; known: "
                          f"{', '.join(ROLE_FIELDS)}")
    if entry.get("estimator") not in ADVANTAGE_ESTIMATORS:
      raise RLConfigError(f"config.rl.roles.{name}.estimator={entry.get('estimator')!r} is "
                          f"unknown; known: {', '.join(ADVANTAGE_ESTIMATORS.names())}")
    w = entry.get("loss_weight", 1.0)
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not w >= 0:
      raise RLConfigError(f"config.rl.roles.{name}.loss_weight={w!r} must be a number >= 0")


@dataclasses.dataclass(frozen=True)
class Role:
  name: str
  estimator: str
  loss_weight: float = 1.0


@dataclasses.dataclass(frozen=True)
class RoleTable:
  """The game's roles in its declared order (a role's id is its index), with their settings."""
  roles: tuple[Role, ...]
  grpo_std_normalize: bool = True
  grpo_eps: float = 1e-6

  @classmethod
  def from_config(cls, rl: Any, declared: Sequence[str]) -> "RoleTable":
    check_roles(rl.roles, declared)
    return cls(tuple(Role(n, rl.roles[n].estimator, float(rl.roles[n].get("loss_weight", 1.0)))
                     for n in declared),
               grpo_std_normalize=bool(rl.grpo_std_normalize), grpo_eps=float(rl.grpo_eps))

  @property
  def names(self) -> tuple[str, ...]:
    return tuple(r.name for r in self.roles)

  def ids(self, names_N: Sequence[str]) -> np.ndarray:
    """int32 [N] role ids of role names."""
    index = {n: i for i, n in enumerate(self.names)}
    try:
      return np.asarray([index[str(n)] for n in names_N], np.int32).reshape(len(names_N))
    except KeyError as e:
      raise RLConfigError(f"a row has role {e.args[0]!r}, which the game did not declare "
                          f"(roles: {', '.join(self.names)})") from None

  def loss_weights(self, ids_N: np.ndarray) -> np.ndarray:
    """float32 [N] each row's role loss weight."""
    w_R = np.asarray([r.loss_weight for r in self.roles], np.float32)
    return w_R[np.asarray(ids_N, np.int64)] if len(ids_N) else np.zeros(0, np.float32)

  def advantages(self, rewards_N: Any, groups_N: Any, ids_N: Any) -> np.ndarray:
    """float32 [N]: each role's rows through its own estimator. Groups never span roles."""
    r_N = np.asarray(rewards_N, np.float32)
    g_N, id_N = np.asarray(groups_N), np.asarray(ids_N)
    out = np.zeros_like(r_N)
    for i in np.unique(id_N):
      sel = id_N == i
      out[sel] = np.asarray(compute_advantages(
          self.roles[int(i)].estimator, r_N[sel], g_N[sel],
          std_normalize=self.grpo_std_normalize, eps=self.grpo_eps))
    return out
