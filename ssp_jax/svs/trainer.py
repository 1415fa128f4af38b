"""The SvS training loop behind `ssp-jax train` for configs with `game = "svs"`.

It is the game-neutral loop (`ssp_jax.run.trainer.train`) with the SvS config checks, components
and progress fields, so it writes what every game writes into `config.workdir`
(metrics.jsonl, tb/, samples/, checkpoints/; the SvS keys are in docs/svs.md) and resumes the
same way. Each step consumes the next `svs.batch_size` problems; a step with no under-performing
problem is skipped (no update, `svs/skipped` = 1) but still counts as a step and is logged and
checkpointed. The checkpoint's extra state holds the data iterator's position and the skip
counter, and every random draw of a step is derived from (seed, step), so restarting the same
command continues as the original run would have.
"""
from __future__ import annotations

from ssp_jax.run import trainer as run_trainer
from ssp_jax.svs.build import build
from ssp_jax.svs.validate import validate_config

PROGRESS = {"oqa/accuracy": "oqa", "spa/accuracy": "spa", "svs/skipped_total": "skipped",
         "loss": "loss"}


def train(config) -> int:
  """Runs (or resumes) SvS training to `config.total_steps`; returns the exit code."""
  return run_trainer.train(config, validate=validate_config, build_fn=build, desc="svs",
                           progress=PROGRESS)
