"""Checks a training config before any compute; each error names the field and the fix."""
from __future__ import annotations

import os

from models import registry as model_registry
from ssp_jax.rl.registry import ADVANTAGE_ESTIMATORS
from ssp_jax.rl.config import UPDATE_SCHEDULES
from ssp_jax.ssp import game, remote, replay, rewards


class ConfigError(ValueError):
  pass


def _choice(name: str, value, allowed) -> None:
  if value not in allowed:
    raise ConfigError(f"config.{name}={value!r} is not one of {tuple(allowed)}")


def _path(name: str, value: str, special=("",)) -> None:
  if value.startswith(model_registry.PREFIX):  # an offline model joined from registry packages
    try:
      model_registry.lookup(value)
    except ValueError as e:
      raise ConfigError(f"config.{name}={value!r}: {e}") from None
    return
  if value not in special and not os.path.exists(os.path.expanduser(value)):
    raise ConfigError(f"config.{name}={value!r} does not exist; give a local path "
                      f"(no downloads at run time) or {special[-1]!r} for the default")


def _positive(name: str, value, minimum: int = 1) -> None:
  if int(value) < minimum:
    raise ConfigError(f"config.{name}={value} must be >= {minimum}")


def check_budgets(config, role_budgets: dict) -> None:
  """Token budgets that leave something to generate and to train: a response budget of 0
  would "train" on empty responses, and an rl.max_len that a full prompt fills would train on
  none of the response. `role_budgets` maps "section.field" -> value (0 = rollout's budget)."""
  r = config.rollout
  _positive("rollout.max_prompt_tokens", r.max_prompt_tokens)
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


def validate_config(config) -> None:
  """Raises ConfigError on the first problem found."""
  s = config.ssp
  check_budgets(config, {"ssp.proposer_max_new_tokens": s.proposer_max_new_tokens,
                         "ssp.solver_max_new_tokens": s.solver_max_new_tokens})
  _positive("ssp.rag.max_new_tokens", s.rag.max_new_tokens)
  if not config.workdir:
    raise ConfigError("config.workdir is empty; set --config.workdir=/path/to/run")
  _positive("total_steps", config.total_steps)
  _positive("ssp.batch_size", s.batch_size)
  _positive("ssp.proposer_n", s.proposer_n)
  _positive("ssp.solver_n", s.solver_n)
  _choice("ssp.mode", s.mode, game.MODES)
  _choice("ssp.fill.strategy", s.fill.strategy, replay.STRATEGIES)
  _choice("ssp.reward.solver", s.reward.solver, rewards.SOLVER_MODES)
  _choice("ssp.reward.proposer", s.reward.proposer, rewards.PROPOSER_MODES)
  _choice("rl.proposer_estimator", config.rl.proposer_estimator, ADVANTAGE_ESTIMATORS.names())
  _choice("rl.solver_estimator", config.rl.solver_estimator, ADVANTAGE_ESTIMATORS.names())
  for role, est, n in (("solver", config.rl.solver_estimator, s.solver_n),
                       ("proposer", config.rl.proposer_estimator, s.proposer_n)):
    if est in ("grpo", "rloo") and n < 2:
      raise ConfigError(f"config.rl.{role}_estimator={est!r} needs groups of >= 2 but "
                        f"config.ssp.{role}_n={n}; raise it or use 'reinforce'")
  if s.filters.min_searches > config.rollout.max_searches:
    raise ConfigError(f"config.ssp.filters.min_searches={s.filters.min_searches} exceeds "
                      f"config.rollout.max_searches={config.rollout.max_searches}: no proposal "
                      "could pass")
  if s.rag.noise_docs < 0:
    raise ConfigError("config.ssp.rag.noise_docs must be >= 0")
  _path("ssp.answers_path", s.answers_path)
  world_dir = s.get("world_dir", "")
  if world_dir and not os.path.isfile(os.path.join(os.path.expanduser(world_dir), "world.json")):
    raise ConfigError(f"config.ssp.world_dir={world_dir!r} holds no world.json; give a directory "
                      "made by `ssp-jax world build --seed 0 --out DIR` (or ssp_jax.world."
                      "ensure_world()), or \"\" to turn the world metrics off")
  _path("model.path", config.model.path)
  _path("retrieval.index_dir", config.retrieval.index_dir)
  _choice("retrieval.on_unreachable", config.retrieval.get("on_unreachable", "error"),
          ("error", "warn"))
  for name, source in (("ssp.rag.verifier", s.rag.verifier), ("ssp.judge.source", s.judge.source)):
    if remote.is_url(source):
      if not s.judge.model:
        raise ConfigError(f"config.{name}={source!r} is an endpoint URL but config.ssp.judge.model "
                          "is empty; set it to the served model's name (e.g. "
                          "--config.ssp.judge.model=Qwen/Qwen2.5-32B-Instruct)")
    elif source != "policy" and not os.path.exists(os.path.expanduser(source)):
      raise ConfigError(f"config.{name}={source!r} does not exist; give \"policy\", a local "
                        "checkpoint directory, or an http(s):// OpenAI-compatible endpoint URL")
  _positive("ssp.judge.max_concurrency", s.judge.max_concurrency)
  _positive("ssp.judge.retries", s.judge.retries, minimum=0)
  if s.judge.timeout_s <= 0:
    raise ConfigError(f"config.ssp.judge.timeout_s={s.judge.timeout_s} must be > 0")
  _choice("rl.update_schedule", config.rl.update_schedule, UPDATE_SCHEDULES)
  if config.eval.every_steps or config.eval.get("at_start", False):
    for name, spec in config.eval.datasets.items():
      if ":" not in spec.split("/")[0]:        # a file path (not builtin:/tfds: specs)
        _path(f"eval.datasets.{name}", spec)
