"""The Search-R1 training loop behind `ssp-jax train` for configs with `game = "search_r1"`.

It is the game-neutral loop (`ssp_jax.run.trainer.train`) with the Search-R1 config checks,
components and progress fields, so it writes what every game writes into `config.workdir`
(metrics.jsonl, tb/, samples/, checkpoints/; the keys are in docs/search_r1.md) and resumes the
same way: the questions of a step come from (seed, step) alone, so a resumed run redraws them.
"""
from __future__ import annotations

from ssp_jax.search_r1.build import build
from ssp_jax.search_r1.validate import validate_config
from ssp_jax.run import trainer as run_trainer

PROGRESS = {"solver/reward_mean": "reward", "solver/all_same_rate": "same", "loss": "loss"}


def train(config) -> int:
  """Runs (or resumes) Search-R1 training to `config.total_steps`; returns the exit code."""
  return run_trainer.train(config, validate=validate_config, build_fn=build, desc="search_r1",
                           progress=PROGRESS)
