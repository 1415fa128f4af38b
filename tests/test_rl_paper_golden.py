"""A paper config's update gives the numbers it gave before roles became data.

The `rl` section of the SSP paper config (proposer REINFORCE, solver GRPO, proposer-then-solver
updates, seq-mean-token-mean) and of an SvS paper config (GRPO for both roles, one fused update,
token-mean, no KL) each run one update of a tiny random model on a fixed, seeded batch: rewards
-> advantages from the config's estimators -> batch -> the config's update schedule. The losses,
metrics, advantages and a digest of the updated params must match `tests/data/
rl_paper_golden.json` (recorded before the change) to rtol 1e-5 (the digest's projections to an
absolute lr / 100, which CPU builds' summation orders stay within).

Only what a CPU needs is overridden: float32 compute, micro-batches of 2, and (SSP) mini-batches
of 2 prompts, so the solver's rows take two optimizer steps as in the paper (1 + 2).
Rewrite the golden with SSP_WRITE_GOLDEN=1 (only when a change of the numbers is intended).
"""
import json
import os

import jax
import numpy as np
import pytest

from rl_helpers import CFG, trajectories
from ssp_jax.config_loader import load_config_file, repo_path
from ssp_jax.rl.learner import Learner
from ssp_jax.rl.roles import RoleTable
from ssp_jax.rl.schedule import run_updates, step_batch
from ssp_jax.ssp import game as ssp_game
from ssp_jax.svs import game as svs_game

GOLDEN = os.path.join(os.path.dirname(__file__), "data", "rl_paper_golden.json")
PROPOSER, SOLVER, SYNTHESIZER = "proposer", "solver", "synthesizer"


def _rl(config_file: str, **overrides):
  rl = load_config_file(repo_path("configs", config_file)).rl
  rl.compute_dtype = rl.ref_dtype = "float32"
  rl.attn_impl = "xla"   # the path the golden was recorded on ("auto" is "blocked" on a CPU)
  rl.micro_batch_size = 2
  rl.update(overrides)
  return rl


def _ssp_rows():
  """4 answers (1 proposer row each), 4 problems x 5 solver attempts; SSP's group ids."""
  rng = np.random.default_rng(11)
  solver_r = rng.integers(0, 2, 20).astype(np.float32)
  proposer_r = 1.0 - solver_r.reshape(4, 5).mean(axis=1)
  roles = [PROPOSER] * 4 + [SOLVER] * 20
  groups = list(range(4)) + [4 + j // 5 for j in range(20)]
  return np.concatenate([proposer_r, solver_r]), np.asarray(groups), np.asarray(roles)


def _svs_rows():
  """2 OQA groups (solver), 1 VPS group (the synthesis role), 1 SPA group (solver), 8 rows each."""
  rng = np.random.default_rng(12)
  rewards = rng.integers(0, 2, 32).astype(np.float32)
  roles = [SOLVER] * 16 + [SYNTHESIZER] * 8 + [SOLVER] * 8
  groups = [j // 8 for j in range(32)]
  return rewards, np.asarray(groups), np.asarray(roles)


def one_update(rl, game, rewards, groups, roles, seed):
  """(advantages [N], the update's metrics dicts, digest of the params after it), as the
  training loop makes them from a step's rows."""
  table = RoleTable.from_config(rl, game.ROLES)
  batch, adv = step_batch(table, trajectories(len(rewards), seed), rewards, roles, groups,
                          bucket=rl.bucket, max_len=rl.max_len)
  learner = Learner(CFG, rl)
  before = jax.tree.leaves(jax.device_get(learner.state["params"]))
  updates = run_updates(learner, batch, rl.update_schedule, table, game.UPDATE_ORDER)
  after = jax.tree.leaves(jax.device_get(learner.state["params"]))
  # the update itself (lr 1e-6 barely moves the params): its size and two fixed projections
  delta = [np.asarray(a, np.float64) - np.asarray(b, np.float64) for a, b in zip(after, before)]
  rng = np.random.default_rng(0)
  digest = [float(sum(np.sum(np.square(d)) for d in delta))]
  digest += [float(sum(np.sum(d * rng.normal(size=d.shape)) for d in delta)) for _ in range(2)]
  return np.asarray(adv).tolist(), updates, digest


CASES = {
    "ssp_qwen2_5_7b_instruct": lambda: one_update(
        _rl("ssp_qwen2_5_7b_instruct.py", mini_batch_size=2), ssp_game, *_ssp_rows(), seed=5),
    "svs_qwen2_5_3b_instruct": lambda: one_update(
        _rl("svs_qwen2_5_3b_instruct.py"), svs_game, *_svs_rows(), seed=6),
}


def _record(adv, updates, digest):
  keys = lambda u: sorted(k for k in u if not k.startswith("pack/"))
  return {"advantages": adv, "digest": digest,
          "updates": [{k: float(u[k]) for k in keys(u)} for u in updates]}


@pytest.mark.parametrize("name", sorted(CASES))
def test_paper_config_update_matches_golden(name):
  got = _record(*CASES[name]())
  if os.environ.get("SSP_WRITE_GOLDEN"):
    table = json.load(open(GOLDEN)) if os.path.exists(GOLDEN) else {}
    table[name] = got
    os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
    with open(GOLDEN, "w") as f:
      json.dump(table, f, indent=1, sort_keys=True)
  want = json.load(open(GOLDEN))[name]
  np.testing.assert_allclose(got["advantages"], want["advantages"], rtol=1e-5, atol=1e-7)
  assert [sorted(u) for u in got["updates"]] == [sorted(u) for u in want["updates"]]
  for g, w in zip(got["updates"], want["updates"]):
    for k in w:
      np.testing.assert_allclose(g[k], w[k], rtol=1e-5, atol=1e-7, err_msg=f"{name} {k}")
  # The digest's size term to rtol 1e-5; its projections to lr / 100 (both configs: lr 1e-6).
  # Adam's first steps are lr * g / (|g| + eps), so a gradient within a few eps of zero moves with
  # the CPU's summation order (AVX2 and AVX-512 builds differ by ~2e-9 here), while one element's
  # step changing by lr moves a projection by ~lr (1e-6).
  np.testing.assert_allclose(got["digest"][0], want["digest"][0], rtol=1e-5)
  np.testing.assert_allclose(got["digest"][1:], want["digest"][1:], rtol=0, atol=1e-8)
