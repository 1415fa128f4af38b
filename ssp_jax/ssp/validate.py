"""Checks a training config before any compute; each error names the field and the fix."""
from __future__ import annotations

import os

from ssp_jax.run.validate import (ConfigError, check_budgets, check_sections, choice, in_range,
                                  path, positive)
from ssp_jax.ssp import game, http_deadline, remote, replay, rewards


def check_game_values(s) -> None:
  """The SSP game's own numbers: its rollout temperature (the one both roles sample with), and
  the `ssp.fill` section (a replay buffer of capacity 0 keeps nothing: every step would pad with
  dummies without saying so)."""
  in_range("ssp", s, "temperature", 0, note="0 = greedy")
  in_range("ssp.fill", s.fill, "capacity", 1)
  in_range("ssp.fill", s.fill, "max_resample_rounds", 1)
  in_range("ssp.fill", s.fill, "max_solve_rate", 0, 1)


def validate_config(config) -> None:
  """Raises ConfigError on the first problem found."""
  s = config.ssp
  check_sections(config, game.ROLES)
  check_game_values(s)
  check_budgets(config, {"ssp.proposer_max_new_tokens": s.proposer_max_new_tokens,
                         "ssp.solver_max_new_tokens": s.solver_max_new_tokens})
  positive("ssp.rag.max_new_tokens", s.rag.max_new_tokens)
  if not config.workdir:
    raise ConfigError("config.workdir is empty; set --config.workdir=/path/to/run")
  positive("total_steps", config.total_steps, minimum=0)   # 0: prepare (index, warm start) only
  positive("ssp.batch_size", s.batch_size)
  positive("ssp.proposer_n", s.proposer_n)
  positive("ssp.solver_n", s.solver_n)
  choice("ssp.mode", s.mode, game.MODES)
  choice("ssp.fill.strategy", s.fill.strategy, replay.STRATEGIES)
  choice("ssp.reward.solver", s.reward.solver, rewards.SOLVER_MODES)
  choice("ssp.reward.proposer", s.reward.proposer, rewards.PROPOSER_MODES)
  for role in (game.SOLVER, game.PROPOSER):
    est, n = config.rl.roles[role].estimator, s[f"{role}_n"]
    if est in ("grpo", "rloo") and n < 2:
      raise ConfigError(f"config.rl.roles.{role}.estimator={est!r} needs groups of >= 2 but "
                        f"config.ssp.{role}_n={n}; raise it or use 'reinforce'")
  if s.filters.min_searches > config.rollout.max_searches:
    raise ConfigError(f"config.ssp.filters.min_searches={s.filters.min_searches} exceeds "
                      f"config.rollout.max_searches={config.rollout.max_searches}: no proposal "
                      "could pass")
  if s.rag.noise_docs < 0:
    raise ConfigError("config.ssp.rag.noise_docs must be >= 0")
  path("ssp.answers_path", s.answers_path, file=True)
  world_dir = s.get("world_dir", "")
  if world_dir and not os.path.isfile(os.path.join(os.path.expanduser(world_dir), "world.json")):
    raise ConfigError(f"config.ssp.world_dir={world_dir!r} holds no world.json; give a directory "
                      "made by `ssp-jax world build --seed 0 --out DIR` (or ssp_jax.world."
                      "ensure_world()), or \"\" to turn the world metrics off")
  path("model.path", config.model.path)
  path("retrieval.index_dir", config.retrieval.index_dir)
  choice("retrieval.on_unreachable", config.retrieval.get("on_unreachable", "error"),
          ("error", "warn"))
  _check_endpoint_client(s)
  for name, source in (("ssp.rag.verifier", s.rag.verifier), ("ssp.judge.source", s.judge.source)):
    if remote.is_url(source):
      if not s.judge.model:
        raise ConfigError(f"config.{name}={source!r} is an endpoint URL but config.ssp.judge.model "
                          "is empty; set it to the served model's name (e.g. "
                          "--config.ssp.judge.model=Qwen/Qwen2.5-32B-Instruct)")
    elif source != "policy" and not os.path.exists(os.path.expanduser(source)):
      raise ConfigError(f"config.{name}={source!r} does not exist; give \"policy\", a local "
                        "checkpoint directory, or an http(s):// OpenAI-compatible endpoint URL")
  if config.eval.every_steps or config.eval.get("at_start", False):
    for name, spec in config.eval.datasets.items():
      if ":" not in spec.split("/")[0]:        # a file path (not builtin:/tfds: specs)
        path(f"eval.datasets.{name}", spec, file=True)


def _check_endpoint_client(s) -> None:
  """The `ssp.judge` client settings, and no secret in an endpoint URL (it would be logged in
  warnings and saved in config.json): the key comes from `ssp.judge.api_key_env`. No message
  here echoes a URL that holds credentials, nor a key."""
  j = s.judge
  urls = [(name, source) for name, source in (("ssp.rag.verifier", s.rag.verifier),
                                              ("ssp.judge.source", j.source))
          if remote.is_url(source)]
  for name, source in urls:
    bad = http_deadline.credentials_in(source)
    if bad:
      raise ConfigError(f"config.{name} has credentials in its URL ({bad}); remove them and put "
                        "the key in an environment variable named by "
                        "--config.ssp.judge.api_key_env (e.g. OPENAI_API_KEY)")
  positive("ssp.judge.max_concurrency", j.max_concurrency)
  positive("ssp.judge.retries", j.retries, minimum=0)
  positive("ssp.judge.max_reply_bytes", j.get("max_reply_bytes", 1 << 20))
  for field in ("timeout_s", "call_deadline_s"):
    if float(j.get(field, 1.0)) <= 0:
      raise ConfigError(f"config.ssp.judge.{field}={j[field]} must be > 0")
  for field in ("step_deadline_s", "max_retry_after_s"):
    if float(j.get(field, 0.0)) < 0:
      raise ConfigError(f"config.ssp.judge.{field}={j[field]} must be >= 0 (step_deadline_s: 0 "
                        "= no limit)")
  name = j.get("api_key_env", "")
  try:
    if name:
      remote.check_key_env_name(name)
    if urls:   # an unset key variable is caught here, before any work
      remote.api_key(name)
  except ValueError as e:
    raise ConfigError(str(e)) from None
