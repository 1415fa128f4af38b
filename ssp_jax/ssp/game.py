"""One step of the Search Self-Play game (Algorithm 1 of the paper), host-side orchestration.

  answers --proposer rollouts (n = proposer_n)--> rule filters --> RAG verification
    --> fill the batch (replay buffer / full reuse / dummy / dynamic resampling)
    --> solver rollouts (n = solver_n) --> rewards

`SSPGame.play(params, step, ...)` returns a `StepOutput`: the trajectories to train on with their
rewards, role names and prompt groups (the training loop turns them into advantages with each
role's `rl.roles.<name>.estimator` and updates), plus metrics and inspection samples.
Fixed-opponent variants (paper Table 2): `mode="solver_only"` rolls the
proposer out with frozen params and trains only the solver; `mode="proposer_only"` does the
converse.

The rollout engine is `ssp_jax.rollout.RolloutEngine` (or anything with the same `generate`).
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import time
from typing import Any, Optional, Sequence

import jax
import numpy as np

from ssp_jax.eval.prompts import SOLVER_STOPS
from ssp_jax.rollout import stats as rstats
from ssp_jax.run.game import StepOutput
from ssp_jax.ssp import filters, prompts, rag, replay, rewards
from ssp_jax.ssp.answers import AnswerItem
from ssp_jax.types import Trajectory

log = logging.getLogger(__name__)

PROPOSER, SOLVER = "proposer", "solver"
ROLES = (PROPOSER, SOLVER)        # the game's roles: one `rl.roles` entry each
UPDATE_ORDER = (PROPOSER, SOLVER)  # rl.update_schedule="by_role": the original's order
MODES = ("selfplay", "solver_only", "proposer_only")
PROPOSER_STOPS = ("</search>", "</question>")


class PolicyText:
  """`rag.TextGenerator` over a rollout engine without search (RAG verifier, judge).

  `params_fn()` gives the params to use (the live policy, or a frozen checkpoint's params)."""

  def __init__(self, engine, params_fn, seed: int = 0):
    self.engine, self.params_fn = engine, params_fn
    self.seed_key = self.key = jax.random.PRNGKey(seed)
    self.calls = 0
    self.last_truncated = 0      # prompts of the last call that lost their beginning

  def set_step(self, step: int) -> None:
    """Derives this step's sampling keys from (seed, step), so a resumed run draws the same."""
    self.key, self.calls = jax.random.fold_in(self.seed_key, step), 0

  def generate_text(self, messages, *, max_new_tokens: int, temperature: float) -> list[str]:
    self.calls += 1
    rng = jax.random.fold_in(self.key, self.calls)
    trajs, _ = self.engine.generate(self.params_fn(), list(messages), rng, stop=("</answer>",),
                                    use_search=False, temperature=temperature,
                                    max_new_tokens=max_new_tokens)
    self.last_truncated = sum(bool(t.meta.get("prompt_truncated")) for t in trajs)
    return [t.text for t in trajs]


@dataclasses.dataclass
class Proposal:
  item: AnswerItem
  traj: Trajectory
  question: Optional[str] = None
  reason: Optional[str] = None        # rule/RAG rejection reason; None = valid
  verdict: Optional[rag.Verdict] = None
  reward: float = 0.0
  trained: bool = True                # False: a valid proposal beyond the batch target (resample)


class SSPGame:
  """The game: owns the answer set, the replay buffer and the helpers; stateless otherwise."""
  ROLES, UPDATE_ORDER = ROLES, UPDATE_ORDER

  def __init__(self, ssp_cfg, rl_cfg, engine, answers: Sequence[AnswerItem], *,
               verifier: rag.TextGenerator, judge: Optional[rewards.Judge] = None,
               world_checker=None):
    if ssp_cfg.mode not in MODES:
      raise ValueError(f"config.ssp.mode {ssp_cfg.mode!r} unknown; choose one of {MODES}")
    self.cfg, self.rl = ssp_cfg, rl_cfg
    self.engine, self.answers = engine, list(answers)
    self.verifier, self.judge = verifier, judge
    self.world_checker = world_checker   # ssp_jax.world.check.WorldChecker (ssp.world_dir) or None
    self.filter_cfg = filters.FilterConfig.from_config(ssp_cfg.filters)
    fill = ssp_cfg.fill
    self.buffer = replay.ReplayBuffer(
        reset_every=0 if fill.strategy == "full_reuse" else fill.reset_every,
        max_solve_rate=fill.max_solve_rate, capacity=fill.capacity)
    self.timings: collections.Counter = collections.Counter()
    self.rollout_totals = rstats.StepTotals()   # this step's rollouts -> rollout/* metrics
    self.rag_truncated = 0.0     # share of the last verification's prompts that were cut

  # -- rollouts -------------------------------------------------------------------------------
  def _generate(self, params, messages, key, stop, max_new_tokens) -> list[Trajectory]:
    t0 = time.perf_counter()
    out, stats = self.engine.generate(params, messages, key, stop=stop, use_search=True,
                                      temperature=self.cfg.temperature,
                                      max_new_tokens=max_new_tokens or None)
    self.timings["rollout"] += time.perf_counter() - t0   # includes the retrieval time
    self.timings["retrieval"] += float(stats.get("search_s", 0.0))
    self.rollout_totals.add(stats)
    return out

  def sample_answers(self, step: int, round_: int = 0) -> list[AnswerItem]:
    rng = np.random.default_rng([self.cfg.seed, step, round_])
    idx = rng.choice(len(self.answers), size=self.cfg.batch_size,
                     replace=len(self.answers) < self.cfg.batch_size)
    return [self.answers[i] for i in idx]

  def propose(self, params, items: Sequence[AnswerItem], key) -> list[Proposal]:
    """Proposer rollouts (n = proposer_n per answer) and rule filters."""
    items = [it for it in items for _ in range(self.cfg.proposer_n)]
    msgs = [prompts.proposer_messages(it.ground_truth, it.hops, it.examples) for it in items]
    trajs = self._generate(params, msgs, key, PROPOSER_STOPS, self.cfg.proposer_max_new_tokens)
    out = []
    for it, tr in zip(items, trajs):
      tr.meta.update(role="proposer", answer=it.ground_truth, hops=it.hops)
      q, reason = filters.check_proposal(tr, it.ground_truth, self.filter_cfg)
      out.append(Proposal(it, tr, q, reason))
    return out

  def verify(self, proposals: list[Proposal], rng: np.random.Generator) -> None:
    """RAG verification of the proposals that passed the filters (in place)."""
    if not self.cfg.rag.enabled:
      return
    materials = [rag.materials_of(p.traj) for p in proposals]
    mixed = rag.mix_noise(materials, self.cfg.rag.noise_docs, rng)
    todo = [i for i, p in enumerate(proposals) if p.reason is None]
    t0 = time.perf_counter()
    verdicts = rag.verify(self.verifier, [proposals[i].question for i in todo],
                          [mixed[i] for i in todo], [proposals[i].item.ground_truth for i in todo],
                          max_new_tokens=self.cfg.rag.max_new_tokens,
                          temperature=self.cfg.rag.temperature,
                          judge=self.judge if self.cfg.rag.use_judge else None)
    self.timings["verification"] += time.perf_counter() - t0
    cut = int(getattr(self.verifier, "last_truncated", 0) or 0) if todo else 0
    self.rag_truncated = cut / max(1, len(todo))
    if cut:
      log.warning("%d of %d RAG verifier prompts were longer than rollout.max_prompt_tokens and "
                  "lost their beginning (instructions included): raise rollout.max_prompt_tokens "
                  "or lower ssp.rag.noise_docs", cut, len(todo))
    for i, v in zip(todo, verdicts):
      proposals[i].verdict = v
      if not v.passed:
        proposals[i].reason = v.reason

  def solve(self, params, problems: list[replay.Problem], key):
    """Solver rollouts (n = solver_n per problem) and their rewards."""
    n = self.cfg.solver_n
    msgs = [prompts.solver_messages(p.question) for p in problems for _ in range(n)]
    trajs = self._generate(params, msgs, key, SOLVER_STOPS, self.cfg.solver_max_new_tokens)
    answers = [p.answer for p in problems for _ in range(n)]
    questions = [p.question for p in problems for _ in range(n)]
    t0 = time.perf_counter()
    r, preds = rewards.solver_rewards([t.text for t in trajs], answers, questions,
                                      mode=self.cfg.reward.solver, judge=self.judge,
                                      spam_max_tags=self.cfg.reward.spam_max_tags)
    self.timings["judge"] += time.perf_counter() - t0
    for j, t in enumerate(trajs):
      t.meta.update(role="solver", problem=j // n, reward=r[j], prediction=preds[j])
    rates = [rewards.solve_rate(r[k * n:(k + 1) * n]) for k in range(len(problems))]
    return trajs, r, rates

  # -- one step -------------------------------------------------------------------------------
  def collect_problems(self, params, step: int, key) -> tuple[list[Proposal], list[Proposal]]:
    """Proposer rounds until enough valid questions (one round unless strategy=resample).

    Returns (all proposals, the valid ones, in order)."""
    rounds = self.cfg.fill.max_resample_rounds if self.cfg.fill.strategy == "resample" else 1
    target = self.cfg.batch_size * self.cfg.proposer_n
    proposals: list[Proposal] = []
    for r in range(max(1, rounds)):
      batch = self.propose(params, self.sample_answers(step, r), jax.random.fold_in(key, r))
      self.verify(batch, np.random.default_rng([self.cfg.seed, step, r, 1]))
      proposals += batch
      if sum(p.reason is None for p in proposals) >= target:
        break
    return proposals, [p for p in proposals if p.reason is None]

  def play(self, params, step: int, key, frozen_params=None) -> StepOutput:
    """One SSP step with the policy `params` (and `frozen_params` for a fixed opponent)."""
    self.timings.clear()
    self.rollout_totals.clear()
    t_start = time.perf_counter()
    for gen in (self.verifier, getattr(self.judge, "generator", None)):
      if hasattr(gen, "set_step"):
        gen.set_step(step)
    if self.judge is not None:
      self.judge.reset_counts()
    mode = self.cfg.mode
    frozen = params if frozen_params is None else frozen_params
    k_prop, k_solve = jax.random.split(jax.random.fold_in(key, step))
    self.buffer.maybe_reset(step)
    proposals, valid = self.collect_problems(frozen if mode == "solver_only" else params, step,
                                             k_prop)
    target = self.cfg.batch_size * self.cfg.proposer_n
    # Resampling rounds can yield more valid questions than the batch holds; those beyond the
    # target are never solved, so they have no proposer reward and are left out of training
    # (the original truncates its dynamically sampled batch the same way).
    for p in valid[target:]:
      p.trained = False
    valid = valid[:target]
    fresh = [replay.Problem(p.question, p.item.ground_truth, p.item.hops, None, step, "fresh")
             for p in valid]
    problems = replay.fill(fresh, target, self.cfg.fill.strategy, self.buffer,
                           np.random.default_rng([self.cfg.seed, step, 2]), step)
    solver_trajs, solver_r, rates = self.solve(
        frozen if mode == "proposer_only" else params, problems, k_solve)
    for prob, rate in zip(problems, rates):
      prob.solve_rate = rate
    for p, rate in zip(valid, rates):           # fresh problems come first in `problems`
      p.reward = rewards.proposer_reward(rate, mode=self.cfg.reward.proposer,
                                         invalid_reward=self.cfg.reward.invalid_proposal)
    for p in proposals:
      if p.reason is not None:
        p.reward = rewards.proposer_reward(None, invalid_reward=self.cfg.reward.invalid_proposal)
    self.buffer.add([pr for pr in problems if pr.source == "fresh"])
    out = self._assemble(proposals, solver_trajs, solver_r)
    out.metrics.update(self._metrics(proposals, problems, solver_trajs, solver_r, rates))
    out.samples = self._samples(proposals, problems, solver_trajs, solver_r, rates, step)
    if self.world_checker is not None:   # ground truth of a synthetic world (docs/world.md)
      self._world(proposals, out)
    out.metrics["time/game"] = time.perf_counter() - t_start
    return out

  def _world(self, proposals: list[Proposal], out: StepOutput) -> None:
    """World metrics of the proposals, and each sampled proposal's measures under "world"."""
    from ssp_jax.world.game_metrics import world_metrics
    t0 = time.perf_counter()
    metrics, measures = world_metrics(
        self.world_checker, [(p.question, p.item.ground_truth, p.reason is None)
                             for p in proposals])
    out.metrics.update(metrics)
    for rec, m in zip([r for r in out.samples if r["kind"] == "proposal"], measures):
      rec["world"] = m
    out.metrics["time/world"] = time.perf_counter() - t0

  def _assemble(self, proposals, solver_trajs, solver_r) -> StepOutput:
    """Training rows for the roles being trained, with their rewards and groups."""
    items = []   # (trajectory, reward, group, role)
    if self.cfg.mode != "solver_only":
      # a proposal's group is the answer it came from
      items += [(p.traj, p.reward, i // self.cfg.proposer_n, PROPOSER)
                for i, p in enumerate(proposals) if p.trained]
    if self.cfg.mode != "proposer_only":
      # a solver attempt's group is the problem it solved (ids after the proposer groups)
      base = len(proposals)
      items += [(t, solver_r[j], base + j // self.cfg.solver_n, SOLVER)
                for j, t in enumerate(solver_trajs)]
    rows = [it[0] for it in items]
    rew, groups, roles = ([it[k] for it in items] for k in (1, 2, 3))
    if not rows:
      return StepOutput([], np.zeros(0, np.float32), np.zeros(0, str), np.zeros(0, np.int32),
                        {}, [])
    return StepOutput(rows, np.asarray(rew, np.float32), np.asarray(roles),
                      np.asarray(groups, np.int32), {}, [])

  def _metrics(self, proposals, problems, solver_trajs, solver_r, rates) -> dict[str, float]:
    n = max(1, len(proposals))
    trained = [p for p in proposals if p.trained]
    passed_rules = [p for p in proposals if p.verdict is not None or p.reason is None]
    m = {
        "proposer/valid_rate": sum(p.reason is None for p in proposals) / n,
        "proposer/rule_pass_rate": len(passed_rules) / n,
        "proposer/rag_pass_rate": (sum(p.reason is None for p in passed_rules)
                                   / max(1, len(passed_rules))),
        "proposer/reward_mean": float(np.mean([p.reward for p in trained])) if trained else 0.,
        "proposer/untrained_extra": float(len(proposals) - len(trained)),
        "proposer/searches_mean": float(np.mean([p.traj.num_searches for p in proposals] or [0])),
        "proposer/response_len": float(np.mean([len(p.traj.response_ids) for p in proposals]
                                               or [0])),
        "proposer/num": float(len(proposals)),
        "rag/prompt_truncated": float(self.rag_truncated),
        "solver/reward_mean": float(np.mean(solver_r)) if solver_r else 0.0,
        "solver/solve_rate_mean": float(np.mean(rates)) if rates else 0.0,
        "solver/searches_mean": float(np.mean([t.num_searches for t in solver_trajs] or [0])),
        "solver/response_len": float(np.mean([len(t.response_ids) for t in solver_trajs]
                                             or [0])),
        "batch/fresh": float(sum(p.source == "fresh" for p in problems)),
        "batch/replay": float(sum(p.source == "replay" for p in problems)),
        "batch/dummy": float(sum(p.source == "dummy" for p in problems)),
        "replay/size": float(len(self.buffer)),
    }
    all_trajs = [p.traj for p in proposals] + list(solver_trajs)
    searches = sum(t.num_searches for t in all_trajs)
    m["search/failed"] = float(sum(t.num_failed_searches for t in all_trajs))
    m["search/failed_rate"] = m["search/failed"] / max(1, searches)
    if self.judge is not None:   # answers sent to the judge this step (solver rewards + RAG)
      m.update({f"judge/{k}": float(v) for k, v in self.judge.counts.items()})
    reasons = collections.Counter(p.reason for p in proposals if p.reason)
    m.update({f"proposer/reject/{k}": v / n for k, v in reasons.items()})
    m.update({f"time/{k}": v for k, v in self.timings.items()})
    m.update(self.rollout_totals.metrics())
    return m

  def _samples(self, proposals, problems, solver_trajs, solver_r, rates, step) -> list[dict]:
    """Inspection records: one per proposal (+ its solver attempts when it was solved)."""
    n, out = self.cfg.solver_n, []
    by_question = {pr.question: k for k, pr in enumerate(problems) if pr.source == "fresh"}
    for p in proposals[:self.cfg.samples_per_step]:
      rec = {"kind": "proposal", "step": step, "answer": p.item.ground_truth, "hops": p.item.hops,
             "question": p.question, "valid": p.reason is None, "reason": p.reason,
             "searches": list(p.traj.queries),
             "documents": [d.get("title", "") for d in p.traj.all_docs],
             "verifier_prediction": p.verdict.prediction if p.verdict else None,
             "proposer_reward": p.reward if p.trained else None, "trained": p.trained,
             "proposer_text": p.traj.text}
      k = by_question.get(p.question) if p.reason is None else None
      if k is not None:
        rec["solve_rate"] = rates[k]
        rec["solver"] = [{"prediction": t.meta.get("prediction"), "reward": solver_r[k * n + j],
                          "searches": list(t.queries), "text": t.text}
                         for j, t in enumerate(solver_trajs[k * n:(k + 1) * n])]
      out.append(rec)
    for k, pr in enumerate(problems):
      if pr.source != "fresh" and len(out) < 2 * self.cfg.samples_per_step:
        out.append({"kind": "problem", "step": step, "answer": pr.answer,
                    "question": pr.question, "source": pr.source, "solve_rate": rates[k],
                    "solver_rewards": solver_r[k * n:(k + 1) * n]})
    return out
