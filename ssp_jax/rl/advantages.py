"""Outcome advantage estimators: one scalar reward per sequence -> one advantage per sequence.

Groups are given by an integer id per sequence (the prompt / question a sample answers). The
functions take numpy or jax arrays of shape [N] and return the same kind (float32); they are
jittable (groups are matched with an [N, N] equality matrix, no `unique`), which is cheap for
the batch sizes of RL (N ~ 10^3).

Formulas follow veRL cb809d66 (`core_algos.compute_grpo_outcome_advantage`,
`compute_rloo_outcome_advantage`):
  grpo:       A_i = (r_i - mean_g) / (std_g + eps), std with ddof=1; a group of one has
              mean 0 and std 1, so A = r / (1 + eps) (the proposer's REINFORCE in SSP).
              std_normalize=False gives the paper's mean-only A_i = r_i - mean_g (Dr.GRPO).
  reinforce:  A_i = r_i (no baseline; a group of one).
  rloo:       A_i = r_i - mean_{j != i, j in g} r_j; a group of one gives A = r.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ssp_jax.rl.registry import ADVANTAGE_ESTIMATORS


def _xp(*arrays):
  return jnp if any(isinstance(a, jax.Array) for a in arrays) else np


def _check(rewards, group_ids):
  if rewards.ndim != 1 or group_ids.shape != rewards.shape:
    raise ValueError(f"rewards {rewards.shape} and group_ids {group_ids.shape} must both be "
                     "1-D of the same length [N]")


def _group_stats(xp, r_N, group_ids_N):
  """Per-sequence count, mean and unbiased std of its group's rewards."""
  same_NN = (group_ids_N[:, None] == group_ids_N[None, :]).astype(r_N.dtype)
  count_N = same_NN.sum(axis=1)
  mean_N = (same_NN @ r_N) / count_N
  sq_N = (same_NN * (r_N[None, :] - mean_N[:, None]) ** 2).sum(axis=1)
  std_N = xp.sqrt(sq_N / xp.maximum(count_N - 1, 1))
  return count_N, mean_N, std_N


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo_advantages(rewards: Any, group_ids: Any, *, std_normalize: bool = True,
                    eps: float = 1e-6) -> Any:
  """GRPO group-normalised advantages [N] (see the module docstring)."""
  xp = _xp(rewards, group_ids)
  r_N = xp.asarray(rewards, dtype=xp.float32)
  g_N = xp.asarray(group_ids)
  _check(r_N, g_N)
  count_N, mean_N, std_N = _group_stats(xp, r_N, g_N)
  single_N = count_N <= 1
  mean_N = xp.where(single_N, 0.0, mean_N)
  std_N = xp.where(single_N, 1.0, std_N)
  centered_N = r_N - mean_N
  out = centered_N / (std_N + eps) if std_normalize else centered_N
  return out.astype(xp.float32)


@ADVANTAGE_ESTIMATORS.register("reinforce")
def reinforce_advantages(rewards: Any, group_ids: Any = None, **unused) -> Any:
  """Raw reward as the advantage [N] (REINFORCE without baseline; groups are ignored)."""
  del group_ids, unused
  xp = _xp(rewards)
  r_N = xp.asarray(rewards, dtype=xp.float32)
  if r_N.ndim != 1:
    raise ValueError(f"rewards must be 1-D [N], got shape {r_N.shape}")
  return r_N


@ADVANTAGE_ESTIMATORS.register("rloo")
def rloo_advantages(rewards: Any, group_ids: Any, **unused) -> Any:
  """Leave-one-out baseline advantages [N]; a group of one keeps its raw reward."""
  del unused
  xp = _xp(rewards, group_ids)
  r_N = xp.asarray(rewards, dtype=xp.float32)
  g_N = xp.asarray(group_ids)
  _check(r_N, g_N)
  same_NN = (g_N[:, None] == g_N[None, :]).astype(r_N.dtype)
  count_N = same_NN.sum(axis=1)
  others_N = same_NN @ r_N - r_N
  baseline_N = xp.where(count_N > 1, others_N / xp.maximum(count_N - 1, 1), 0.0)
  return (r_N - baseline_N).astype(xp.float32)


def compute_advantages(name: str, rewards: Any, group_ids: Any, **kwargs) -> Any:
  """Dispatches to a registered estimator ("grpo", "reinforce", "rloo")."""
  fn = ADVANTAGE_ESTIMATORS.get(name)
  if name != "grpo":
    kwargs.pop("std_normalize", None)
    kwargs.pop("eps", None)
  return fn(rewards, group_ids, **kwargs)
