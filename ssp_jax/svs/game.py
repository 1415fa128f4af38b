"""One step of the SvS game (self-play with variational problem synthesis).

  problems --OQA: n solutions each--> accuracy p per problem
    under-performing problems (lower <= p <= upper): their CORRECT responses
      --VPS: m synthetic problems per response (group = the source response)-->
      --SPA: n solutions per valid synthetic problem, graded against the ORIGINAL answer-->
  rewards --> training groups (the training loop: GRPO advantages per group, one fused update)

Training groups (rows of one group share a GRPO baseline; group ids never repeat across
sections):
  OQA   the n solutions of a problem with 0 < p < 1
  VPS   the m syntheses of a correct response when at least one of them scored 1; a synthesis
        scores 1 iff its SPA correct count c is in [n * positive_lower, n * positive_upper],
        0 otherwise (also when no problem could be extracted from it)
  SPA   the n solutions of a synthetic problem with 0 < accuracy < 1
A step with no under-performing problem is skipped: nothing is trained and `svs/skipped` is 1.
So is a step in which no synthetic problem survives extraction and the problem filter, as in the
original (`svs.skip_without_synthesis`; False trains its OQA groups instead, a difference).
Synthetic problems are filtered as the original does by default: the solving prompt of the
problem must fit in `max_problem_prompt_tokens` tokens (`svs.problem_filter="tokens"`); "chars"
is ssp-jax's earlier character-length filter.

`svs.synthesis = False` is the paper's **RLVR baseline** (plain GRPO on the problem set): OQA
only, every group with 0 < p < 1 is trained, no selection, VPS or SPA; a step is skipped when no
group has a learning signal (all solutions right or all wrong).

Roles (`ROLES`): solving (OQA, SPA) is the `solver` role and synthesis (VPS) the `synthesizer`
role, each with its `rl.roles.<name>` entry (estimator "grpo" in SvS configs; `loss_weight` can
weight them).

`SvSGame.play(params, step, key)` is the `ssp_jax.run.game.Game` protocol's `play`, so the
shared loop's `train_one_step` (ssp_jax/run/trainer.py) drives it.
"""
from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Optional, Sequence

import jax
import numpy as np

from ssp_jax.rollout import stats as rstats
from ssp_jax.run.game import StepOutput
from ssp_jax.svs import math_grader, prompts
from ssp_jax.svs.data import MathProblem, ProblemIterator
from ssp_jax.svs.grade_pool import GradePool
from ssp_jax.types import Trajectory

SOLVER, SYNTHESIZER = "solver", "synthesizer"
ROLES = (SOLVER, SYNTHESIZER)          # the game's roles: one `rl.roles` entry each
UPDATE_ORDER = (SYNTHESIZER, SOLVER)   # rl.update_schedule="by_role": VPS rows, then solving
SECTIONS = ("oqa", "vps", "spa")


# ------------------------------------------------------------------------------------------
# Pure rules (unit-tested on hand-made tables)
# ------------------------------------------------------------------------------------------
def group_accuracy(rewards: Sequence[float], n: int) -> np.ndarray:
  """[G] mean of each consecutive block of n rewards."""
  return np.asarray(rewards, np.float64).reshape(-1, n).mean(axis=1)


def under_performing(acc_G: np.ndarray, lower: float, upper: float) -> np.ndarray:
  """[G] bool: lower <= p <= upper (the original's `under_performing_acc_lower/upper`)."""
  return (acc_G >= lower) & (acc_G <= upper)


def vps_reward(correct: int, n: int, lower: float, upper: float) -> float:
  """1.0 if n * lower <= correct <= n * upper (medium difficulty), else 0.0."""
  return float(n * lower <= correct <= n * upper)


def trainable(acc_G: np.ndarray) -> np.ndarray:
  """[G] bool: 0 < accuracy < 1 (groups with a non-zero GRPO signal)."""
  return (acc_G > 0) & (acc_G < 1)


@dataclasses.dataclass
class Synthesis:
  """One VPS rollout: the response it came from, what was extracted, and its SPA outcome."""
  source: int                        # index into the step's VPS inputs (= its group)
  traj: Trajectory
  problem: Optional[str] = None
  reason: Optional[str] = None       # extraction rejection; None = valid
  spa_trajs: list = dataclasses.field(default_factory=list)      # its n SPA solutions
  spa_rewards: list = dataclasses.field(default_factory=list)
  reward: float = 0.0                # the VPS reward


@dataclasses.dataclass
class _Rows:
  """Training rows under construction: trajectories, rewards, group ids, roles."""
  trajs: list = dataclasses.field(default_factory=list)
  rewards: list = dataclasses.field(default_factory=list)
  groups: list = dataclasses.field(default_factory=list)
  roles: list = dataclasses.field(default_factory=list)
  counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)

  def add_group(self, section: str, group: int, role: str, trajs, rewards) -> None:
    for t, r in zip(trajs, rewards):
      t.meta["svs"] = section
      self.trajs.append(t)
      self.rewards.append(float(r))
      self.groups.append(group)
      self.roles.append(role)
    self.counts[section + "_rows"] += len(trajs)
    self.counts[section + "_groups"] += 1


class SvSGame:
  """The game: owns the problem iterator and the skip counter; stateless otherwise.

  Args:
    svs_cfg: the `svs` config section (`ssp_jax.svs.config.get_svs_config()`).
    rl_cfg: the `rl` section (kept for the interface; the training loop reads its roles).
    engine: a `RolloutEngine` (anything with its `generate` and a `tok.prompt_ids`).
    data: the problem iterator.
    max_prompt_tokens: synthesis prompts longer than this are dropped (the original drops
      prompts over `max_prompt_length`).
    max_problem_prompt_tokens: with `problem_filter="tokens"`, a synthetic problem whose solving
      prompt is longer than this is rejected (`too_long_tokens`); default max_prompt_tokens.
  """
  ROLES, UPDATE_ORDER = ROLES, UPDATE_ORDER

  def __init__(self, svs_cfg, rl_cfg, engine, data: ProblemIterator, *, max_prompt_tokens: int,
               max_problem_prompt_tokens: Optional[int] = None):
    self.cfg, self.rl, self.engine, self.data = svs_cfg, rl_cfg, engine, data
    self.max_prompt_tokens = int(max_prompt_tokens)
    self.max_problem_prompt_tokens = int(max_problem_prompt_tokens or max_prompt_tokens)
    self.skipped_total = 0
    self.grader = GradePool.from_config(svs_cfg)
    self.timings: collections.Counter = collections.Counter()
    self.rollout_totals = rstats.StepTotals()   # this step's rollouts -> rollout/* metrics
    self.grade_counts: collections.Counter = collections.Counter()   # this step's, see _counters

  def _counters(self) -> dict[str, float]:
    """time/* of this step's phases and grade/* of its grading: answers over the grading budget
    (`timeouts`, scored 0), refused by the guards, hedges, grading workers replaced."""
    out = {f"time/{k}": v for k, v in self.timings.items()}
    out.update(self.rollout_totals.metrics())
    out.update({f"grade/{k}": float(self.grade_counts[k])
                for k in ("timeouts", "refused", "hedge", "worker_restarts")})
    return out

  # -- checkpointed state ---------------------------------------------------------------------
  def state_dict(self) -> dict:
    return {"skipped_total": self.skipped_total}

  def load_state_dict(self, state: dict) -> None:
    self.skipped_total = int(state.get("skipped_total", 0))

  # -- rollouts -------------------------------------------------------------------------------
  def _generate(self, params, messages, key, max_new_tokens: int) -> list[Trajectory]:
    if not messages:
      return []
    t0 = time.perf_counter()
    out, stats = self.engine.generate(params, messages, key, stop=(), use_search=False,
                                      temperature=self.cfg.temperature,
                                      max_new_tokens=max_new_tokens or None)
    self.timings["rollout"] += time.perf_counter() - t0
    self.rollout_totals.add(stats)
    return out

  def _grade(self, trajs: Sequence[Trajectory], answers: Sequence[str]) -> list[float]:
    t0 = time.perf_counter()
    out = self.grader.grade([t.text for t in trajs], list(answers))
    self.grade_counts.update(self.grader.last)
    for t, r, a in zip(trajs, out, answers):
      t.meta.update(reward=r, prediction=math_grader.extract_answer(t.text), answer=a)
    self.timings["grade"] += time.perf_counter() - t0
    return out

  def solve(self, params, problems: Sequence[str], answers: Sequence[str], n: int,
            key) -> tuple[list[Trajectory], list[float]]:
    """n solutions per problem (in blocks of n) and their 1/0 rewards against `answers`."""
    msgs = [prompts.solve_messages(p) for p in problems for _ in range(n)]
    trajs = self._generate(params, msgs, key, self.cfg.solve_max_new_tokens)
    return trajs, self._grade(trajs, [a for a in answers for _ in range(n)])

  def _synthesis_messages(self, solution: str):
    return prompts.synthesis_messages(solution, self.cfg.get("synthesis_prompt", "original"))

  def check_problem(self, text: str) -> tuple[Optional[str], Optional[str]]:
    """(problem, None) or (None, reason) for one VPS response: extraction, then the filter of
    `svs.problem_filter` ("tokens": the solving prompt fits in max_problem_prompt_tokens)."""
    c = self.cfg
    if c.get("problem_filter", "chars") == "chars":
      return prompts.extract_problem(text, min_chars=c.problem_min_chars,
                                     max_chars=c.problem_max_chars)
    problem, reason = prompts.extract_problem(text, min_chars=0, max_chars=0)
    if problem is not None and len(self.engine.tok.prompt_ids(
        prompts.solve_messages(problem))) > self.max_problem_prompt_tokens:
      return None, "too_long_tokens"
    return problem, reason

  def synthesize(self, params, solutions: Sequence[str], key) -> list[Synthesis]:
    """m VPS rollouts per solution, with the synthetic problem extracted from each."""
    m = self.cfg.synth_n
    msgs = [self._synthesis_messages(s) for s in solutions for _ in range(m)]
    trajs = self._generate(params, msgs, key, self.cfg.synth_max_new_tokens)
    out = []
    for j, t in enumerate(trajs):
      problem, reason = self.check_problem(t.text)
      t.meta.update(synthetic_problem=problem, reject=reason)
      out.append(Synthesis(j // m, t, problem, reason))
    return out

  # -- one step -------------------------------------------------------------------------------
  def play(self, params, step: int, key, frozen_params=None) -> StepOutput:
    """One SvS step on the next `svs.batch_size` problems. `frozen_params` is unused (the
    interface of `SSPGame.play`; SvS has no fixed opponent)."""
    del frozen_params
    self.timings.clear()
    self.rollout_totals.clear()
    self.grade_counts.clear()
    t_start = time.perf_counter()
    c = self.cfg
    k_oqa, k_vps, k_spa = jax.random.split(jax.random.fold_in(key, step), 3)
    batch = self.data.next_batch(c.batch_size)
    oqa_trajs, oqa_r = self.solve(params, [p.problem for p in batch],
                                  [p.answer for p in batch], c.n, k_oqa)
    acc = group_accuracy(oqa_r, c.n)
    under = under_performing(acc, c.under_lower, c.under_upper)
    metrics = self._oqa_metrics(oqa_trajs, oqa_r, acc, under)
    if not c.get("synthesis", True):
      return self._rlvr_step(batch, oqa_trajs, oqa_r, acc, metrics, step, t_start)
    if not under.any():
      return self._skipped(batch, oqa_trajs, acc, metrics, t_start, "no_under_performing")
    sources = self._vps_inputs(batch, oqa_trajs, oqa_r, under, metrics)
    syntheses = self.synthesize(params, [t.text for _, t in sources], k_vps)
    if c.get("skip_without_synthesis", False) and not any(s.problem is not None
                                                          for s in syntheses):
      metrics.update(self._synthesis_metrics(syntheses, _Rows()))
      return self._skipped(batch, oqa_trajs, acc, metrics, t_start, "no_synthesis",
                           syntheses, sources)
    self._spa(params, syntheses, [batch[j].answer for j, _ in sources], k_spa)
    rows = self._assemble(oqa_trajs, oqa_r, acc, syntheses, len(sources), step)
    out = self._output(rows)
    out.metrics.update(metrics)
    out.metrics.update(self._synthesis_metrics(syntheses, rows))
    out.metrics.update({"svs/skipped": 0.0, "svs/skipped_total": float(self.skipped_total),
                        "time/game": time.perf_counter() - t_start,
                        **self._counters()})
    out.samples = self._samples(batch, oqa_trajs, acc, syntheses, sources)
    return out

  def _rlvr_step(self, batch, oqa_trajs, oqa_r, acc, metrics, step: int,
                 t_start: float) -> StepOutput:
    """The RLVR baseline's step: GRPO on the OQA groups with 0 < p < 1, nothing synthesised."""
    rows = self._assemble(oqa_trajs, oqa_r, acc, [], 0, step)
    skipped = not rows.trajs
    self.skipped_total += int(skipped)
    out = self._output(rows)
    out.metrics.update(metrics)
    out.metrics.update({"oqa/train_groups": float(rows.counts["oqa_groups"]),
                        "svs/skipped": float(skipped),
                        "svs/skipped_total": float(self.skipped_total),
                        "time/game": time.perf_counter() - t_start,
                        **self._counters()})
    out.samples = self._samples(batch, oqa_trajs, acc, [])
    return out

  def _skipped(self, batch, oqa_trajs, acc, metrics, t_start, reason: str, syntheses=(),
               sources=()) -> StepOutput:
    """A step that trains nothing: `svs/skipped` = 1 and `svs/skipped_<reason>` = 1."""
    self.skipped_total += 1
    out = StepOutput([], np.zeros(0, np.float32), np.zeros(0, str), np.zeros(0, np.int32),
                     metrics, self._samples(batch, oqa_trajs, acc, list(syntheses), sources))
    out.metrics.update({"svs/skipped": 1.0, f"svs/skipped_{reason}": 1.0,
                        "svs/skipped_total": float(self.skipped_total),
                        "time/game": time.perf_counter() - t_start,
                        **self._counters()})
    return out

  def _vps_inputs(self, batch, oqa_trajs, oqa_r, under, metrics) -> list[tuple[int, Trajectory]]:
    """(problem index, correct response) of under-performing problems whose synthesis prompt
    fits in `max_prompt_tokens`."""
    n, out, dropped = self.cfg.n, [], 0
    for j in np.flatnonzero(under):
      for t, r in zip(oqa_trajs[j * n:(j + 1) * n], oqa_r[j * n:(j + 1) * n]):
        if r <= 0:
          continue
        if len(self.engine.tok.prompt_ids(self._synthesis_messages(t.text))) > \
            self.max_prompt_tokens:
          dropped += 1
          continue
        out.append((int(j), t))
    metrics["vps/inputs"] = float(len(out))
    metrics["vps/dropped_long_prompts"] = float(dropped)
    return out

  def _spa(self, params, syntheses: list[Synthesis], answers: Sequence[str], key) -> None:
    """SPA rollouts for the valid syntheses and each synthesis's VPS reward (in place)."""
    c = self.cfg
    valid = [s for s in syntheses if s.problem is not None]
    trajs, r = self.solve(params, [s.problem for s in valid],
                          [answers[s.source] for s in valid], c.n, key)
    for k, s in enumerate(valid):
      s.spa_rewards = r[k * c.n:(k + 1) * c.n]
      for t in trajs[k * c.n:(k + 1) * c.n]:
        t.meta["synthetic_problem"] = s.problem
      s.spa_trajs = trajs[k * c.n:(k + 1) * c.n]
      s.reward = vps_reward(int(sum(s.spa_rewards)), c.n, c.positive_lower, c.positive_upper)

  def _assemble(self, oqa_trajs, oqa_r, acc, syntheses: list[Synthesis], num_sources: int,
                step: int) -> _Rows:
    """The training rows of the three sections with globally unique group ids."""
    c, rows, gid = self.cfg, _Rows(), 0
    for j in np.flatnonzero(trainable(acc)):
      rows.add_group("oqa", gid, SOLVER, oqa_trajs[j * c.n:(j + 1) * c.n],
                     oqa_r[j * c.n:(j + 1) * c.n])
      gid += 1
    by_source = [[s for s in syntheses if s.source == k] for k in range(num_sources)]
    keep = [g for g in by_source if any(s.reward > 0 for s in g)]
    if c.vps_training_ratio < 1.0 and keep:
      rng = np.random.default_rng([c.seed, step, 3])
      size = int(np.ceil(len(keep) * c.vps_training_ratio))
      keep = [keep[i] for i in sorted(rng.choice(len(keep), size=size, replace=False))]
    for g in keep:
      rows.add_group("vps", gid, SYNTHESIZER, [s.traj for s in g], [s.reward for s in g])
      gid += 1
    for s in syntheses:
      if s.problem is not None and trainable(np.asarray([np.mean(s.spa_rewards)]))[0]:
        rows.add_group("spa", gid, SOLVER, s.spa_trajs, s.spa_rewards)
        gid += 1
    return rows

  def _output(self, rows: _Rows) -> StepOutput:
    if not rows.trajs:
      return StepOutput([], np.zeros(0, np.float32), np.zeros(0, str), np.zeros(0, np.int32),
                        {}, [])
    out = StepOutput(rows.trajs, np.asarray(rows.rewards, np.float32), np.asarray(rows.roles),
                     np.asarray(rows.groups, np.int32), {}, [])
    out.metrics.update({f"batch/{k}": float(v) for k, v in rows.counts.items()})
    return out

  # -- metrics and samples --------------------------------------------------------------------
  @staticmethod
  def _mean(xs) -> float:
    return float(np.mean(xs)) if len(xs) else 0.0

  def _oqa_metrics(self, trajs, rewards, acc, under) -> dict[str, float]:
    return {
        "oqa/accuracy": self._mean(rewards),
        "oqa/all_correct_rate": self._mean(acc == 1.0),
        "oqa/none_correct_rate": self._mean(acc == 0.0),
        "oqa/under_performing": float(under.sum()),
        "oqa/boxed_rate": self._mean([t.meta.get("prediction") is not None for t in trajs]),
        "oqa/response_len": self._mean([len(t.response_ids) for t in trajs]),
        "oqa/num": float(len(trajs)),
        "data/epoch": float(self.data.epoch),
        "data/over_budget": float(getattr(self.data, "over_budget", 0)),
        "svs/prompt_truncated": float(sum(bool(t.meta.get("prompt_truncated")) for t in trajs)),
    }

  def _synthesis_metrics(self, syntheses: list[Synthesis], rows: _Rows) -> dict[str, float]:
    valid = [s for s in syntheses if s.problem is not None]
    spa = [r for s in valid for r in s.spa_rewards]
    m = {
        "vps/num": float(len(syntheses)),
        "vps/valid_rate": len(valid) / max(1, len(syntheses)),
        "vps/reward_mean": self._mean([s.reward for s in syntheses]),
        "vps/response_len": self._mean([len(s.traj.response_ids) for s in syntheses]),
        "spa/problems": float(len(valid)),
        "spa/accuracy": self._mean(spa),
        "spa/response_len": self._mean([len(t.response_ids) for s in valid
                                        for t in s.spa_trajs]),
    }
    reasons = collections.Counter(s.reason for s in syntheses if s.reason)
    m.update({f"vps/reject/{k}": v / max(1, len(syntheses)) for k, v in reasons.items()})
    for sec in SECTIONS:
      m[f"{sec}/train_groups"] = float(rows.counts[f"{sec}_groups"])
    return m

  def _samples(self, batch: Sequence[MathProblem], oqa_trajs, acc, syntheses,
               sources: Sequence[tuple[int, Any]] = ()) -> list[dict]:
    """Inspection records: under-performing problems first (with their syntheses), then others."""
    n, limit = self.cfg.n, self.cfg.samples_per_step
    src_problem = [j for j, _ in sources]
    order = sorted(range(len(batch)), key=lambda j: (j not in src_problem, j))[:limit]
    out = []
    for j in order:
      trajs = oqa_trajs[j * n:(j + 1) * n]
      correct = next((t.text for t in trajs if t.meta.get("reward", 0) > 0), None)
      rec = {"kind": "problem", "id": batch[j].id, "problem": batch[j].problem,
             "answer": batch[j].answer, "accuracy": float(acc[j]),
             "predictions": [t.meta.get("prediction") for t in trajs],
             "response": correct if correct is not None else trajs[0].text}
      mine = [s for s in syntheses if src_problem[s.source] == j]
      if mine:
        rec["syntheses"] = [
            {"problem": s.problem, "reject": s.reason, "vps_reward": s.reward,
             "spa_accuracy": self._mean(s.spa_rewards) if s.problem is not None else None,
             "spa_predictions": [t.meta.get("prediction") for t in s.spa_trajs],
             "text": s.traj.text} for s in mine[:self.cfg.synth_n]]
      out.append(rec)
    return out
