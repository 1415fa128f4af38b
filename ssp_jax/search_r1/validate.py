"""Checks a Search-R1 run config before any compute; each error names the field and the fix."""
from __future__ import annotations

from ssp_jax import world_config
from ssp_jax.run.validate import ConfigError, check_budgets, check_sections, choice, path, positive
from ssp_jax.ssp import remote, rewards


def validate_config(config) -> None:
  """Raises ConfigError on the first problem found."""
  if config.get("game") != "search_r1" or "search_r1" not in config:
    raise ConfigError(f"config.game={config.get('game')!r}: the Search-R1 trainer needs "
                      "game='search_r1' and a `search_r1` section (ssp_jax.search_r1.config)")
  s = config.search_r1
  if not config.workdir:
    raise ConfigError("config.workdir is empty; set --config.workdir=/path/to/run")
  positive("total_steps", config.total_steps, minimum=0)   # 0: prepare (index, warm start) only
  from ssp_jax.search_r1.game import ROLES, SOLVER
  check_sections(config, ROLES)
  check_budgets(config, {"search_r1.max_new_tokens": s.max_new_tokens})
  positive("search_r1.batch_size", s.batch_size)
  positive("search_r1.n", s.n)
  positive("search_r1.samples_per_step", s.samples_per_step, minimum=0)
  positive("search_r1.spam_max_tags", s.spam_max_tags, minimum=0)
  choice("search_r1.reward", s.reward, rewards.SOLVER_MODES)
  est = config.rl.roles[SOLVER].estimator
  if est in ("grpo", "rloo") and int(s.n) < 2:
    raise ConfigError(f"config.rl.roles.{SOLVER}.estimator={est!r} needs groups of >= 2 but "
                      f"config.search_r1.n={s.n}; raise it or use 'reinforce'")
  world_config.validate_world(config)
  if s.train_path:
    path("search_r1.train_path", s.train_path)
  elif not world_config.enabled(config):
    raise ConfigError("config.search_r1.train_path is empty and there is no world "
                      "(config.world.size=0); give a FlashRAG JSONL of questions with "
                      "golden_answers, or set --config.world.size")
  path("model.path", config.model.path)
  if config.warmstart.enabled:   # its demonstrations come from the SSP answer set
    path("ssp.answers_path", config.ssp.answers_path)
  path("retrieval.index_dir", config.retrieval.index_dir)
  choice("retrieval.on_unreachable", config.retrieval.get("on_unreachable", "error"),
          ("error", "warn"))
  if s.reward in ("judge", "em_then_judge") or config.eval.judge:
    j = config.ssp.judge
    if remote.is_url(j.source) and not j.model:
      raise ConfigError(f"config.ssp.judge.source={j.source!r} is an endpoint URL but "
                        "config.ssp.judge.model is empty; set it to the served model's name")
    if not remote.is_url(j.source) and j.source != "policy":
      path("ssp.judge.source", j.source)
  if config.eval.every_steps or config.eval.get("at_start", False):
    for name, spec in config.eval.datasets.items():
      if ":" not in spec.split("/")[0]:        # a file path (not builtin:/tfds:/world: specs)
        path(f"eval.datasets.{name}", spec)
