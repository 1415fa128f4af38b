"""Config checks every game uses, before any compute; each error is one line naming the field and
the fix. A game's own `validate.py` calls these and adds its section's checks."""
from __future__ import annotations

import os

from models import registry as model_registry
from ssp_jax.config_ranges import RangeError, check_range
from ssp_jax.rl.config import check_rl_config
from ssp_jax.rl.registry import RLConfigError
from ssp_jax.rollout.config import check_rollout_config


class ConfigError(ValueError):
  pass


def choice(name: str, value, allowed) -> None:
  if value not in allowed:
    raise ConfigError(f"config.{name}={value!r} is not one of {tuple(allowed)}")


def path(name: str, value: str, special=("",), file: bool = False) -> None:
  """An existing local path (or a registry model, or one of `special`); `file`: a file, not a
  directory (a directory there would fail later with IsADirectoryError, after the model load)."""
  if value.startswith(model_registry.PREFIX):  # an offline model joined from registry packages
    try:
      model_registry.lookup(value)
    except ValueError as e:
      raise ConfigError(f"config.{name}={value!r}: {e}") from None
    return
  if value in special:
    return
  if not os.path.exists(os.path.expanduser(value)):
    raise ConfigError(f"config.{name}={value!r} does not exist; give a local path "
                      f"(no downloads at run time) or {special[-1]!r} for the default")
  if file and os.path.isdir(os.path.expanduser(value)):
    raise ConfigError(f"config.{name}={value!r} is a directory; give the path of a file in it")


def positive(name: str, value, minimum: int = 1) -> None:
  if int(value) < minimum:
    raise ConfigError(f"config.{name}={value} must be >= {minimum}")


def check_budgets(config, role_budgets: dict) -> None:
  """Token budgets that leave something to generate and to train: a response budget of 0
  would "train" on empty responses, and an rl.max_len that a full prompt fills would train on
  none of the response. `role_budgets` maps "section.field" -> value (0 = rollout's budget)."""
  r = config.rollout
  positive("rollout.max_prompt_tokens", r.max_prompt_tokens)
  if int(r.max_response_tokens) < 1:
    raise ConfigError(f"config.rollout.max_response_tokens={r.max_response_tokens} leaves no "
                      "token to generate, so nothing to train; set it >= 1 (e.g. 192)")
  for name, value in role_budgets.items():
    if int(value) < 0:
      raise ConfigError(f"config.{name}={value} must be >= 0 (0 = "
                        "rollout.max_response_tokens)")
  if int(config.rl.max_len) <= int(r.max_prompt_tokens):
    raise ConfigError(f"config.rl.max_len={config.rl.max_len} must exceed "
                      f"config.rollout.max_prompt_tokens={r.max_prompt_tokens}, or a full prompt "
                      "leaves no response token to train on; raise rl.max_len")


def check_sections(config, roles) -> None:
  """The sections every game shares (`rl` against the game's declared `roles`, `rollout`, and
  `warmstart` where the config has one), as ConfigErrors: one place for every validator."""
  try:
    check_rl_config(config.rl, roles)
    check_rollout_config(config.rollout)
    w = config.get("warmstart")
    if w is not None and w.get("enabled", False):
      for name, low in (("lr", 0), ("epochs", 1), ("batch_size", 1), ("max_len", 1),
                        ("sources", 1)):
        check_range("warmstart", w, name, low)
      if "train_layers" in w:
        check_range("warmstart", w, "train_layers", 0, note="0 = every layer")
  except (RangeError, RLConfigError) as e:
    raise ConfigError(str(e)) from None


def in_range(section: str, cfg, name: str, *bounds, **kw) -> None:
  """`ssp_jax.config_ranges.check_range` raising ConfigError."""
  try:
    check_range(section, cfg, name, *bounds, **kw)
  except RangeError as e:
    raise ConfigError(str(e)) from None
