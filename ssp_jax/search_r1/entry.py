"""The Search-R1 baseline as `ssp-jax train`, `eval` and `plot` see it (ssp_jax/run/games.py):
SSP's entry with its own checks, trainer and main metrics; the evaluation and the endpoint probe
stay SSP's (the same solver, judge and QA benchmarks)."""
from __future__ import annotations

import dataclasses

from ssp_jax.run.games import LEARNER_KEYS
from ssp_jax.ssp import entry as ssp_entry

GAME = dataclasses.replace(
    ssp_entry.GAME, validate="ssp_jax.search_r1.validate:validate_config",
    train="ssp_jax.search_r1.trainer:train",
    plot_keys=("solver/reward_mean", "solver/solve_rate_mean", "solver/all_same_rate",
               "solver/searches_mean", "solver/response_len", "search/failed_rate",
               *LEARNER_KEYS),
    world_fields=ssp_entry.GAME.world_fields + (("search_r1.train_path", "qa_train", True),))
