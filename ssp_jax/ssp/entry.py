"""The SSP game as `ssp-jax train`, `eval` and `plot` see it (ssp_jax/run/games.py), and its
training entry: the game-neutral loop (ssp_jax/run/trainer.py) with SSP's config checks,
components (the config's world, if any, resolved first) and progress-bar fields."""
from __future__ import annotations

from ssp_jax.run.games import LEARNER_KEYS, GameEntry

GAME = GameEntry(
    validate="ssp_jax.ssp.validate:validate_config",
    train="ssp_jax.ssp.entry:train",
    eval="ssp_jax.ssp.qa_eval:run_cli",
    probe="ssp_jax.ssp.build:probe_endpoints",
    plot_keys=("proposer/valid_rate", "proposer/rule_pass_rate", "proposer/rag_pass_rate",
               "proposer/reward_mean", "proposer/searches_mean", "solver/reward_mean",
               "solver/solve_rate_mean", "solver/searches_mean", "batch/dummy", *LEARNER_KEYS),
    world_fields=(("ssp.answers_path", "answers", True),   # the world's answer set
                  ("ssp.world_dir", "dir", False)))        # its checker's per-step metrics

PROGRESS = {"proposer/valid_rate": "valid", "solver/reward_mean": "solve", "loss": "loss"}


def build(config):
  from ssp_jax import world_config
  from ssp_jax.ssp import build as ssp_build
  world_config.resolve_world(config)
  return ssp_build.build(config)


def train(config) -> int:
  """Runs (or resumes) SSP training to `config.total_steps`; returns the exit code."""
  from ssp_jax.run import trainer
  from ssp_jax.ssp.validate import validate_config
  return trainer.train(config, validate=validate_config, build_fn=build, desc="ssp",
                       progress=PROGRESS)
