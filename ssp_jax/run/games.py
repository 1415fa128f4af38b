"""The games `ssp-jax train`, `eval` and `plot` run, by the name in `config.game` ("ssp" when a
config has none). The CLIs look a game up here and name none themselves.

A game is a small record of "module:attribute" references, imported on use so that a CLI stays
cheap to start:
  validate   (config) -> None, raising ssp_jax.ssp.validate.ConfigError: the checks before any
             compute (`ssp-jax train` runs them before the workdir is touched)
  train      (config) -> exit code: the training loop
  eval       (config, specs, checkpoint, out) -> exit code, or "" for the QA evaluation with
             search (ssp_jax.eval: EM/F1/judge of the solver on FlashRAG data)
  plot_keys  the default metric keys of `ssp-jax plot`, the game-play story first
  signature  a metric key only this game writes: `ssp-jax plot` recognises a metrics file by it
             when the workdir has no config.json
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any


@dataclasses.dataclass(frozen=True)
class Game:
  validate: str
  train: str
  eval: str = ""
  plot_keys: tuple[str, ...] = ()
  signature: str = ""

  def load(self, field: str) -> Any:
    """The object a reference field names (`game.load("train")(config)`)."""
    module, _, attr = getattr(self, field).partition(":")
    return getattr(importlib.import_module(module), attr)


_LEARNER_KEYS = ("loss", "pg_loss", "entropy", "grad_norm", "kl", "time/step")

GAMES: dict[str, Game] = {
    "ssp": Game(
        validate="ssp_jax.ssp.validate:validate_config",
        train="ssp_jax.run.games:train_ssp",
        plot_keys=("proposer/valid_rate", "proposer/rule_pass_rate", "proposer/rag_pass_rate",
                   "proposer/reward_mean", "proposer/searches_mean", "solver/reward_mean",
                   "solver/solve_rate_mean", "solver/searches_mean", "batch/dummy",
                   *_LEARNER_KEYS),
        signature="proposer/valid_rate"),
    "svs": Game(
        validate="ssp_jax.svs.validate:validate_config",
        train="ssp_jax.svs.trainer:train",
        eval="ssp_jax.svs.eval:run_cli",
        plot_keys=("oqa/accuracy", "oqa/boxed_rate", "oqa/under_performing",
                   "oqa/all_correct_rate", "oqa/none_correct_rate", "oqa/response_len",
                   "vps/valid_rate", "vps/reward_mean", "spa/accuracy", "svs/skipped",
                   "svs/skipped_total", "loss", "pg_loss", "entropy", "grad_norm", "time/step"),
        signature="oqa/accuracy"),
    "search_r1": Game(
        validate="ssp_jax.search_r1.validate:validate_config",
        train="ssp_jax.search_r1.trainer:train",
        plot_keys=("solver/reward_mean", "solver/solve_rate_mean", "solver/all_same_rate",
                   "solver/searches_mean", "solver/response_len", "search/failed_rate",
                   *_LEARNER_KEYS),
        signature="solver/all_same_rate"),
}
DEFAULT = "ssp"


def name_of(config) -> str:
  return config.get("game", DEFAULT) if config is not None else DEFAULT


def lookup(name: str) -> Game:
  """The game called `name`; an unknown name is a ConfigError listing the known ones."""
  from ssp_jax.ssp.validate import ConfigError
  if name not in GAMES:
    raise ConfigError(f"config.game={name!r} is unknown; known games: {', '.join(GAMES)}")
  return GAMES[name]


def game_of(config) -> Game:
  return lookup(name_of(config))


def train_ssp(config) -> int:
  """The SSP trainer, with the config's world (if any) resolved at build time."""
  from ssp_jax import world_config
  from ssp_jax.ssp import build as ssp_build
  from ssp_jax.run import trainer as run_trainer

  def build(cfg):
    world_config.resolve_world(cfg)
    return ssp_build.build(cfg)
  return run_trainer.train(config, build_fn=build)
