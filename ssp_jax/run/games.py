"""The games `ssp-jax train`, `eval` and `plot` run, by the name in `config.game` ("ssp" when a
config has none). This table is the one place outside the game packages that names them: the CLIs
look a game up here, and everything else they need comes from the game's entry.

Each game package has an `entry.py` whose `GAME` is a `GameEntry`: "module:attribute" references,
imported on use so that a CLI stays cheap to start, and the game's main metrics. docs/games.md
walks through adding a game.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any

GAMES: dict[str, str] = {          # name -> the module holding its GAME entry
    "ssp": "ssp_jax.ssp.entry",
    "svs": "ssp_jax.svs.entry",
    "search_r1": "ssp_jax.search_r1.entry",
}
DEFAULT = "ssp"
LEARNER_KEYS = ("loss", "pg_loss", "entropy", "grad_norm", "kl", "time/step")


@dataclasses.dataclass(frozen=True)
class GameEntry:
  """What the CLIs need of a game.

  validate   (config) -> None, raising ssp_jax.run.validate.ConfigError: the checks before any
             compute (`ssp-jax train` runs them before the workdir is touched)
  train      (config) -> exit code: the game's components run by `ssp_jax.run.trainer.train`
  eval       (config, specs, checkpoint, out_dir, *, closed_book, config_path) -> exit code:
             `ssp-jax eval`
  probe      (config) -> None, raising ValueError with one line naming the field and the fix:
             start-up checks of the endpoints the game calls, before any model is loaded
             ("" = none)
  plot_keys  the default metric keys of `ssp-jax plot`, the game-play story first
  world_fields  what a generated world (`config.world`, ssp_jax/world_config.py) fills in the
             game's config: (dotted config field, world file key or "dir" for the world
             directory, True = only when the field is empty)
  """
  validate: str
  train: str
  eval: str
  probe: str = ""
  plot_keys: tuple[str, ...] = ()
  world_fields: tuple[tuple[str, str, bool], ...] = ()

  def load(self, field: str) -> Any:
    """The object a reference field names (`game.load("train")(config)`)."""
    module, _, attr = getattr(self, field).partition(":")
    return getattr(importlib.import_module(module), attr)


def name_of(config) -> str:
  return config.get("game", DEFAULT) if config is not None else DEFAULT


def lookup(name: str) -> GameEntry:
  """The game called `name`; an unknown name is a ConfigError listing the known ones."""
  from ssp_jax.run.validate import ConfigError
  if name not in GAMES:
    raise ConfigError(f"config.game={name!r} is unknown; known games: {', '.join(GAMES)}")
  return importlib.import_module(GAMES[name]).GAME


def game_of(config) -> GameEntry:
  return lookup(name_of(config))
