"""Rewards of the SSP game (paper App. A).

Solver: 1/0 for the last `<answer>` of the response, by normalised exact match against any alias
(`em`), token F1 (`f1`), the LLM judge alone (`judge`), or EM then the judge for misses
(`em_then_judge`, the original code). Anti-spam (on by default, as in the original): more than
`spam_max_tags` (10) answer tags divides the reward by 4.

Proposer: `1 - s` where `s` is the mean solver success on its question (`1-acc`, the paper), or
`intermediate_difficulty` 4 (s - left)(right - s) for left < s < right, else 0. An invalid
proposal gets `invalid_reward` (default 0; the paper shows -0.1 collapses training).
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

from ssp_jax import metrics
from ssp_jax.ssp import prompts
from ssp_jax.ssp.filters import Answer, aliases, policy_text

log = logging.getLogger(__name__)

SOLVER_MODES = ("em", "f1", "judge", "em_then_judge")
PROPOSER_MODES = ("1-acc", "intermediate_difficulty")


class Judge:
  """LLM judge: asks a `TextGenerator` (the policy, a frozen checkpoint or an OpenAI-compatible
  endpoint, `ssp_jax.ssp.remote.OpenAIChat`) Correct/Wrong.

  `counts` holds, since the last `reset_counts()`, the answers sent to the judge (`asked`), those
  judged correct (`correct`) and those whose judgement failed (`failed`: the generator raised or
  returned the wrong number of replies; the callers score them as wrong). A generator with its
  own `counts` and `reset_counts` (an endpoint client: retries, deadline skips, ...) adds them."""

  def __init__(self, generator, *, max_new_tokens: int = 10, temperature: float = 0.1):
    self.generator = generator
    self.max_new_tokens = max_new_tokens
    self.temperature = temperature
    self.reset_counts()

  def reset_counts(self) -> None:
    self.counts = {"asked": 0, "correct": 0, "failed": 0}
    if hasattr(self.generator, "reset_counts"):
      self.generator.reset_counts()
      self.counts.update(self.generator.counts)

  def judge(self, questions: Sequence[str], predictions: Sequence[str],
            references: Sequence[Answer]) -> list[bool]:
    if not questions:
      return []
    msgs = [prompts.judge_messages(q, p, r)
            for q, p, r in zip(questions, predictions, references)]
    self.counts["asked"] += len(msgs)
    try:
      texts = self.generator.generate_text(msgs, max_new_tokens=self.max_new_tokens,
                                           temperature=self.temperature)
      if len(texts) != len(msgs):
        raise RuntimeError(f"judge returned {len(texts)} replies for {len(msgs)} questions")
    except Exception:
      self.counts["failed"] += len(msgs)
      raise
    finally:
      if hasattr(self.generator, "reset_counts"):
        self.counts.update(self.generator.counts)
    ok = [parse_verdict(t) for t in texts]
    self.counts["correct"] += sum(ok)
    return ok


def parse_verdict(text: str) -> bool:
  """True iff the judge's reply starts with "correct" (so "incorrect"/"wrong" are False)."""
  words = metrics.normalize_answer(text or "").split()
  return bool(words) and words[0] == "correct"


def solver_score(response: str, answer: Answer, mode: str = "em",
                 spam_max_tags: int = 0) -> tuple[float, Optional[str]]:
  """Rule-based part of the solver reward for one response.

  Returns (score, prediction). For `judge`/`em_then_judge` this is the EM score; misses are then
  sent to the judge by `solver_rewards`.
  """
  if mode not in SOLVER_MODES:
    raise ValueError(f"solver reward mode {mode!r} unknown; choose one of {SOLVER_MODES}")
  text = policy_text(response)
  pred = metrics.extract_answer(text)
  if pred is None:
    return 0.0, None
  golden = aliases(answer)
  if mode == "f1":
    score = metrics.f1(pred, golden)
  elif mode == "judge":
    score = 0.0
  else:
    score = metrics.exact_match(pred, golden)
  if spam_max_tags and max(text.count("<answer>"), text.count("</answer>")) > spam_max_tags:
    score /= 4.0
  return float(score), pred


def solver_rewards(responses: Sequence[str], answers: Sequence[Answer],
                   questions: Sequence[str], *, mode: str = "em", judge: Optional[Judge] = None,
                   spam_max_tags: int = 0) -> tuple[list[float], list[Optional[str]]]:
  """Rewards of a batch of solver responses; the judge sees rule misses that have an answer.

  A judge error counts as "wrong" (reward 0) and is logged.
  """
  scored = [solver_score(r, a, mode, spam_max_tags) for r, a in zip(responses, answers)]
  rewards = [s for s, _ in scored]
  preds = [p for _, p in scored]
  if mode in ("judge", "em_then_judge"):
    if judge is None:
      raise ValueError(f"solver reward mode {mode!r} needs a judge; set config.ssp.judge.source "
                       "to 'policy' or a checkpoint path, or use mode 'em'")
    idx = [i for i, (s, p) in enumerate(scored) if s <= 0 and p is not None]
    try:
      ok = judge.judge([questions[i] for i in idx], [preds[i] for i in idx],
                       [answers[i] for i in idx])
    except Exception as e:
      log.warning("judge failed on %d solver answers (scored 0): %r", len(idx), e)
      ok = [False] * len(idx)
    for i, good in zip(idx, ok):
      rewards[i] = 1.0 if good else 0.0
  return rewards, preds


def solve_rate(rewards: Sequence[float]) -> float:
  """Mean success of the solver group on one question: mean of 1[r > 0]."""
  if not rewards:
    raise ValueError("solve_rate of an empty group")
  return sum(1.0 for r in rewards if r > 0) / len(rewards)


def proposer_reward(rate: Optional[float], *, mode: str = "1-acc", invalid_reward: float = 0.0,
                    left: float = 0.0, right: float = 1.0) -> float:
  """Reward of one proposal; `rate=None` means the proposal was invalid."""
  if mode not in PROPOSER_MODES:
    raise ValueError(f"proposer reward mode {mode!r} unknown; choose one of {PROPOSER_MODES}")
  if rate is None:
    return float(invalid_reward)
  if mode == "1-acc":
    return 1.0 - rate
  if left < rate < right:
    return 4.0 * (rate - left) * (right - rate)
  return 0.0
