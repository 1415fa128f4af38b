"""One step of the Search-R1 baseline: the SSP solver trained alone on labeled questions.

  questions of the step (seeded, data.QuestionOrder) --solver rollouts with search (n each)-->
    rewards (ssp_jax.ssp.rewards.solver_rewards) --> (training loop) GRPO advantages per group

Everything the solver sees and is scored by is SSP's: the prompt (`prompts.solver_messages`), the
stops (`SOLVER_STOPS`, ssp_jax/eval/prompts.py), the search tool (the engine's
`generate(use_search=True)`), the reward code, the advantage estimator
(`rl.roles.solver.estimator`). Only where the questions come from
differs: a labeled file instead of the proposer. `SearchR1Game.play` returns the `StepOutput` of
`ssp_jax.run.game`, so the shared training loop (ssp_jax/run/trainer.py) trains it unchanged.
"""
from __future__ import annotations

import collections
import time
from typing import Optional, Sequence

import jax
import numpy as np

from ssp_jax.eval.prompts import SOLVER_STOPS
from ssp_jax.rollout import stats as rstats
from ssp_jax.run.game import StepOutput
from ssp_jax.search_r1.data import Question, QuestionOrder
from ssp_jax.ssp import prompts, rewards
from ssp_jax.ssp.game import SOLVER
from ssp_jax.types import Trajectory

ROLES = (SOLVER,)          # the game's one role: `rl.roles.solver`
UPDATE_ORDER = ROLES


class SearchR1Game:
  """Owns the questions and their order; stateless otherwise (nothing to checkpoint)."""
  ROLES, UPDATE_ORDER = ROLES, UPDATE_ORDER

  def __init__(self, cfg, rl_cfg, engine, questions: Sequence[Question], *,
               judge: Optional[rewards.Judge] = None):
    if cfg.reward not in rewards.SOLVER_MODES:
      raise ValueError(f"config.search_r1.reward {cfg.reward!r} unknown; choose one of "
                       f"{rewards.SOLVER_MODES}")
    self.cfg, self.rl = cfg, rl_cfg
    self.engine, self.questions, self.judge = engine, list(questions), judge
    self.order = QuestionOrder(len(self.questions), int(cfg.batch_size), int(cfg.seed))
    self.timings: collections.Counter = collections.Counter()
    self.rollout_totals = rstats.StepTotals()   # this step's rollouts -> rollout/* metrics

  def questions_of(self, step: int) -> list[Question]:
    return [self.questions[i] for i in self.order.indices(step)]

  def rollouts(self, params, questions: Sequence[Question], key) -> list[Trajectory]:
    """`n` solver rollouts per question, grouped: rows k*n .. k*n+n-1 answer question k."""
    n = int(self.cfg.n)
    msgs = [prompts.solver_messages(q.question) for q in questions for _ in range(n)]
    t0 = time.perf_counter()
    trajs, stats = self.engine.generate(params, msgs, key, stop=SOLVER_STOPS, use_search=True,
                                        temperature=self.cfg.temperature,
                                        max_new_tokens=self.cfg.max_new_tokens or None)
    self.timings["rollout"] += time.perf_counter() - t0   # includes the retrieval time
    self.timings["retrieval"] += float(stats.get("search_s", 0.0))
    self.rollout_totals.add(stats)
    return trajs

  def play(self, params, step: int, key, frozen_params=None) -> StepOutput:
    """One step with the policy `params` (`frozen_params` is unused: there is no opponent)."""
    del frozen_params
    self.timings.clear()
    self.rollout_totals.clear()
    t_start = time.perf_counter()
    if self.judge is not None:
      if hasattr(self.judge.generator, "set_step"):
        self.judge.generator.set_step(step)
      self.judge.reset_counts()
    n = int(self.cfg.n)
    questions = self.questions_of(step)
    trajs = self.rollouts(params, questions, jax.random.fold_in(key, step))
    answers = [list(q.golden_answers) for q in questions for _ in range(n)]
    texts = [q.question for q in questions for _ in range(n)]
    t0 = time.perf_counter()
    r, preds = rewards.solver_rewards([t.text for t in trajs], answers, texts,
                                      mode=self.cfg.reward, judge=self.judge,
                                      spam_max_tags=self.cfg.spam_max_tags)
    self.timings["judge"] += time.perf_counter() - t0
    for j, t in enumerate(trajs):
      t.meta.update(role="solver", problem=j // n, reward=r[j], prediction=preds[j])
    r_N = np.asarray(r, np.float32)
    groups_N = np.arange(len(trajs), dtype=np.int32) // n
    roles_N = np.full(len(trajs), SOLVER)
    metrics = self._metrics(questions, trajs, r_N, step)
    metrics["time/game"] = time.perf_counter() - t_start
    return StepOutput(list(trajs), r_N, roles_N, groups_N, metrics,
                      self._samples(questions, trajs, r, preds, step))

  def _metrics(self, questions, trajs, r_N: np.ndarray, step: int) -> dict[str, float]:
    n = int(self.cfg.n)
    r_QN = r_N.reshape(len(questions), n)
    solved_QN = r_QN > 0
    searches = sum(t.num_searches for t in trajs)
    failed = sum(t.num_failed_searches for t in trajs)
    m = {
        "solver/reward_mean": float(r_N.mean()) if r_N.size else 0.0,
        "solver/solve_rate_mean": float(solved_QN.mean()) if r_N.size else 0.0,
        "solver/searches_mean": float(np.mean([t.num_searches for t in trajs] or [0])),
        "solver/response_len": float(np.mean([len(t.response_ids) for t in trajs] or [0])),
        # groups whose rewards are all equal have zero GRPO advantage: no learning signal
        "solver/all_same_rate": float(np.mean(np.all(r_QN == r_QN[:, :1], axis=1))),
        "solver/num": float(len(trajs)),
        "search/failed": float(failed),
        "search/failed_rate": failed / max(1, searches),
        "data/epoch": self.order.epoch(step + 1),
    }
    by_hop = collections.defaultdict(list)
    for k, q in enumerate(questions):
      if q.hops is not None:
        by_hop[q.hops].extend(r_QN[k].tolist())
    m.update({f"solver/reward_hop{h}": float(np.mean(v)) for h, v in sorted(by_hop.items())})
    if self.judge is not None:
      m.update({f"judge/{k}": float(v) for k, v in self.judge.counts.items()})
    m.update({f"time/{k}": v for k, v in self.timings.items()})
    m.update(self.rollout_totals.metrics())
    return m

  def _samples(self, questions, trajs, r, preds, step: int) -> list[dict]:
    """Inspection records: one per question (its n attempts), the first samples_per_step."""
    n, out = int(self.cfg.n), []
    for k, q in enumerate(questions[:self.cfg.samples_per_step]):
      mine = range(k * n, (k + 1) * n)
      out.append({"kind": "question", "step": step, "id": q.id, "question": q.question,
                  "answer": list(q.golden_answers), "hops": q.hops,
                  "solve_rate": rewards.solve_rate([r[j] for j in mine]),
                  "predictions": [preds[j] for j in mine], "rewards": [r[j] for j in mine],
                  "searches": [list(trajs[j].queries) for j in mine],
                  "texts": [trajs[j].text for j in mine]})
    return out
