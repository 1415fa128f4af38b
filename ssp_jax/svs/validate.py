"""Checks an SvS run config before any compute; each error names the field and the fix."""
from __future__ import annotations

from ssp_jax.run.validate import (ConfigError, choice, path, positive, check_budgets,
                                  check_sections, in_range)
from ssp_jax.svs.grade_pool import check_budgets as check_grader_budgets
from ssp_jax.svs.prompts import SYNTHESIS_PROMPTS

GROUP_ESTIMATORS = ("grpo", "rloo")


def _fraction_range(name: str, low: float, high: float) -> None:
  if not 0.0 <= low <= high <= 1.0:
    raise ConfigError(f"config.svs.{name}_lower={low} and config.svs.{name}_upper={high} must "
                      "satisfy 0 <= lower <= upper <= 1")


def _data_spec(name: str, spec: str) -> None:
  if not spec.startswith("builtin:"):
    path(name, spec, file=True)


def validate_config(config) -> None:
  """Raises ConfigError on the first problem found."""
  s = config.svs
  if config.get("game", "svs") != "svs":
    raise ConfigError(f"config.game={config.game!r}: the SvS trainer needs game='svs'")
  if not config.workdir:
    raise ConfigError("config.workdir is empty; set --config.workdir=/path/to/run")
  positive("total_steps", config.total_steps)
  from ssp_jax.svs.game import ROLES, SYNTHESIZER
  check_sections(config, ROLES)
  in_range("svs", s, "temperature", 0, note="0 = greedy; the rollout temperature of every section")
  check_budgets(config, {"svs.solve_max_new_tokens": s.solve_max_new_tokens,
                         "svs.synth_max_new_tokens": s.synth_max_new_tokens})
  positive("svs.batch_size", s.batch_size)
  positive("svs.n", s.n, 2)               # GRPO groups of OQA and SPA solutions
  positive("svs.synth_n", s.synth_n)
  est = config.rl.roles[SYNTHESIZER].estimator
  if est in GROUP_ESTIMATORS and s.synth_n < 2:
    raise ConfigError(f"config.rl.roles.{SYNTHESIZER}.estimator={est!r} needs VPS groups of >= 2 "
                      f"but config.svs.synth_n={s.synth_n}")
  _fraction_range("under", s.under_lower, s.under_upper)
  _fraction_range("positive", s.positive_lower, s.positive_upper)
  if not 0.0 < s.vps_training_ratio <= 1.0:
    raise ConfigError(f"config.svs.vps_training_ratio={s.vps_training_ratio} must be in (0, 1]")
  choice("svs.problem_filter", s.problem_filter, ("tokens", "chars"))
  choice("svs.synthesis_prompt", s.synthesis_prompt, tuple(SYNTHESIS_PROMPTS))
  check_grader_budgets(s)                   # grader_workers, grader_*_timeout_s
  if s.max_problem_prompt_tokens < 0:
    raise ConfigError(f"config.svs.max_problem_prompt_tokens={s.max_problem_prompt_tokens} must "
                      "be >= 0 (0 = rollout.max_prompt_tokens)")
  if s.problem_filter == "chars" and not 0 < s.problem_min_chars <= s.problem_max_chars:
    raise ConfigError("config.svs.problem_min_chars must be >= 1 and <= problem_max_chars")
  if s.train_path:
    _data_spec("svs.train_path", s.train_path)
  path("model.path", config.model.path)
  e = config.eval
  positive("eval.n", e.n)
  bad = [k for k in e.ks if not 1 <= int(k) <= e.n]
  if bad:
    raise ConfigError(f"config.eval.ks={tuple(e.ks)}: each k must be in 1..eval.n={e.n}")
  if e.every_steps or e.get("at_start", False):
    for name, spec in e.datasets.items():
      _data_spec(f"eval.datasets.{name}", spec)
