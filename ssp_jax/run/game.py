"""What the training loop needs of a game: `play` one step into a `StepOutput`.

A game package (ssp_jax/ssp, ssp_jax/svs, ssp_jax/search_r1) builds an object with this shape in
its `build.py` and hands it to the loop inside `run.components.Components`; the loop batches the
output's trajectories, updates the policy and writes the metrics and samples. docs/games.md
walks through adding one.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Protocol

import numpy as np

from ssp_jax.types import Trajectory


@dataclasses.dataclass
class StepOutput:
  trajectories: list[Trajectory]      # what the learner trains on
  rewards: np.ndarray                 # float32 [N]; the loop turns them into advantages
                                      # per role (rl.roles, ssp_jax.rl.schedule.step_batch)
  roles: np.ndarray                   # str [N] role names (the game's ROLES)
  prompt_index: np.ndarray            # [N] group id (rows of one prompt stay in one mini-batch)
  metrics: dict[str, float]
  samples: list[dict]                 # inspection records, written to samples/samples_<step>.jsonl


class Game(Protocol):
  """One step of play: rollouts with the current `params` [pytree] and their rewards.
  `step` is 0-based and, with `key`, derives every random draw, so a resumed run replays it;
  `frozen_params` is a fixed opponent's params (None when the game has none). `ROLES` names the
  game's roles (each has an `rl.roles.<name>` entry); `UPDATE_ORDER` is the order of
  `rl.update_schedule="by_role"`."""
  ROLES: tuple[str, ...]
  UPDATE_ORDER: tuple[str, ...]

  def play(self, params: Any, step: int, key: Any,
           frozen_params: Optional[Any] = None) -> StepOutput:
    ...
