"""RAG verification of proposed questions (paper Sec. 3).

A verifier answers each question without searching, from the documents its proposer retrieved
mixed with the documents of `k` other trajectories of the same batch (noise, default 4), shuffled
with a seeded rng. The question is kept only if the verifier's answer matches the ground truth
(normalised EM against every alias, optionally then the LLM judge). Any failure of the verifier
(exception, no `<answer>`) rejects the question: this check never fails open.

The verifier is any `TextGenerator`: `game.PolicyText` over the policy itself (the default, a
difference: the paper's Sec. 3 text describes the solver answering, but the paper's App. A and
the original code use Qwen2.5-32B-Instruct) or over a frozen checkpoint, or
`remote.OpenAIChat`, a served model behind an OpenAI-compatible endpoint (as the original code).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Optional, Protocol, Sequence

import numpy as np

from ssp_jax import metrics
from ssp_jax.ssp import prompts
from ssp_jax.ssp.filters import Answer, aliases
from ssp_jax.types import Trajectory

log = logging.getLogger(__name__)

PASS = "pass"
MISMATCH = "rag_mismatch"
NO_ANSWER = "verifier_no_answer"
VERIFIER_ERROR = "verifier_error"


class TextGenerator(Protocol):
  def generate_text(self, messages: list[prompts.Messages], *, max_new_tokens: int,
                    temperature: float) -> list[str]:
    """One completion per chat (no search tool)."""
    ...


@dataclasses.dataclass
class Verdict:
  passed: bool
  reason: str                      # PASS, MISMATCH, NO_ANSWER or VERIFIER_ERROR
  prediction: Optional[str] = None
  judged: bool = False             # True when the judge (not EM) decided


def format_docs(docs: Sequence[dict]) -> str:
  """Documents as "Doc i (Title: t) text" blocks, duplicates (same id/contents) dropped."""
  seen, lines = set(), []
  for d in docs:
    key = d.get("id") or d.get("contents") or d.get("text")
    if key in seen:
      continue
    seen.add(key)
    title = d.get("title", "")
    text = d.get("text") or d.get("contents", "")
    lines.append(f"Doc {len(lines) + 1} (Title: {title}) {text}".strip())
  return "\n".join(lines)


def materials_of(traj: Trajectory) -> str:
  """All documents a trajectory retrieved, as one material string."""
  return format_docs(traj.all_docs)


def mix_noise(materials: Sequence[str], k: int, rng: np.random.Generator) -> list[str]:
  """For each item, its own materials plus those of up to `k` other non-empty items, shuffled.

  Args:
    materials: one material string per trajectory of the batch (B).
    k: number of noise materials per item (fewer when the batch has fewer other items).
    rng: seeded numpy generator (the order of draws is the order of `materials`).
  Returns:
    B strings, each the shuffled blocks joined by blank lines.
  """
  out = []
  for i, own in enumerate(materials):
    others = [j for j, m in enumerate(materials) if j != i and m.strip()]
    take = min(int(k), len(others))
    picked = list(rng.choice(others, size=take, replace=False)) if take else []
    blocks = [own] + [materials[j] for j in picked]
    order = rng.permutation(len(blocks))
    out.append("\n\n".join(blocks[o] for o in order if blocks[o].strip()))
  return out


def match(prediction: str, answer: Answer) -> bool:
  return metrics.exact_match(prediction, aliases(answer)) > 0


def verify(generator: TextGenerator, questions: Sequence[str], materials: Sequence[str],
           answers: Sequence[Answer], *, max_new_tokens: int, temperature: float,
           judge=None) -> list[Verdict]:
  """Asks the verifier every question at once; returns one `Verdict` per question.

  `judge` (optional `rewards.Judge`) decides EM misses; errors of the judge count as "wrong".
  """
  if not questions:
    return []
  msgs = [prompts.verifier_messages(q, m) for q, m in zip(questions, materials)]
  try:
    texts = generator.generate_text(msgs, max_new_tokens=max_new_tokens, temperature=temperature)
    if len(texts) != len(questions):
      raise RuntimeError(f"verifier returned {len(texts)} answers for {len(questions)} questions")
  except Exception as e:  # never fail open: every question of the batch is rejected
    log.warning("RAG verifier failed, rejecting %d questions: %r", len(questions), e)
    return [Verdict(False, VERIFIER_ERROR) for _ in questions]
  verdicts = []
  for text, ans in zip(texts, answers):
    pred = metrics.extract_answer(text)
    if pred is None:
      verdicts.append(Verdict(False, NO_ANSWER))
    elif match(pred, ans):
      verdicts.append(Verdict(True, PASS, pred))
    else:
      verdicts.append(Verdict(False, MISMATCH, pred))
  if judge is not None:
    _judge_misses(judge, questions, answers, verdicts)
  return verdicts


def _judge_misses(judge, questions, answers, verdicts) -> None:
  idx = [i for i, v in enumerate(verdicts) if v.reason == MISMATCH]
  if not idx:
    return
  try:
    ok = judge.judge([questions[i] for i in idx], [verdicts[i].prediction for i in idx],
                     [answers[i] for i in idx])
  except Exception as e:
    log.warning("judge failed during RAG verification (counted as wrong): %r", e)
    return
  for i, good in zip(idx, ok):
    if good:
      verdicts[i] = Verdict(True, PASS, verdicts[i].prediction, judged=True)
