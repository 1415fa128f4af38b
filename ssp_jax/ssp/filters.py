"""Rule filters on proposer trajectories (paper Sec. 3 "Implementation").

A proposal passes only if every rule holds; each rule returns `None` (pass) or a named rejection
reason, so the trainer can count rejections per reason. Thresholds come from `FilterConfig`
(`config.ssp.filters`). Unlike the original code, a list-valued ground truth is checked alias by
alias (never silently dropped), and the answer-leak check compares normalised text.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Optional, Sequence, Union

from ssp_jax.metrics import aliases, contains_answer  # noqa: F401  (aliases: re-exported)
from ssp_jax.types import Trajectory

Answer = Union[str, Sequence[str]]

_QUESTION_RE = re.compile(r"<question>(.*?)</question>", re.DOTALL)
_INFO_RE = re.compile(r"<information>.*?</information>", re.DOTALL)

# Rejection reasons, in the order the rules run.
NO_QUESTION = "no_question_tag"
MULTIPLE_QUESTIONS = "multiple_question_tags"
EMPTY_QUESTION = "empty_question"
TOO_SHORT = "too_short"
TOO_LONG = "too_long"
TOO_FEW_WORDS = "too_few_words"
ANSWER_LEAK = "answer_in_question"
NO_SEARCH = "no_search"
NO_DOCUMENTS = "no_documents"
TOO_FEW_SEARCHES = "too_few_searches"
DUPLICATE_QUERIES = "duplicate_queries"
REASONS = (NO_QUESTION, MULTIPLE_QUESTIONS, EMPTY_QUESTION, TOO_SHORT, TOO_LONG, TOO_FEW_WORDS,
           ANSWER_LEAK, NO_SEARCH, NO_DOCUMENTS, TOO_FEW_SEARCHES, DUPLICATE_QUERIES)


@dataclasses.dataclass(frozen=True)
class FilterConfig:
  min_chars: int = 10          # question length after strip, in characters
  max_chars: int = 1000
  min_words: int = 10          # whitespace-separated words
  min_searches: int = 2        # the original rejects <= 1 search
  min_documents: int = 1       # retrieved documents over the whole trajectory
  allow_duplicate_queries: bool = False

  @classmethod
  def from_config(cls, cfg) -> "FilterConfig":
    """From a ConfigDict/dict with (a subset of) these field names."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in dict(cfg).items() if k in names})


def policy_text(text: str) -> str:
  """The response with `<information>` observation blocks removed (tags in retrieved documents
  must not count as the proposer's own question)."""
  return _INFO_RE.sub(" ", text)


def extract_question(text: str) -> tuple[Optional[str], Optional[str]]:
  """(question, None) if the policy text holds exactly one non-empty `<question>` tag, else
  (None, reason)."""
  found = _QUESTION_RE.findall(policy_text(text))
  if not found:
    return None, NO_QUESTION
  if len(found) > 1:
    return None, MULTIPLE_QUESTIONS
  question = found[0].replace("<answer>", " ").replace("</answer>", " ").strip()
  if not question:
    return None, EMPTY_QUESTION
  return question, None


def check_length(question: str, cfg: FilterConfig) -> Optional[str]:
  n = len(question.strip())
  if n < cfg.min_chars:
    return TOO_SHORT
  if n > cfg.max_chars:
    return TOO_LONG
  if len(question.split()) < cfg.min_words:
    return TOO_FEW_WORDS
  return None


def check_answer_leak(question: str, answer: Answer) -> Optional[str]:
  """Rejects if any normalised alias appears in the normalised question (on word boundaries)."""
  return ANSWER_LEAK if contains_answer(question, answer) else None


def check_searches(traj: Trajectory, cfg: FilterConfig) -> Optional[str]:
  """>= 1 search with >= `min_documents` documents, then >= `min_searches` searches, then no
  duplicate queries (compared after normalisation)."""
  if traj.num_searches < 1:
    return NO_SEARCH
  if len(traj.all_docs) < cfg.min_documents:
    return NO_DOCUMENTS
  if traj.num_searches < cfg.min_searches:
    return TOO_FEW_SEARCHES
  if not cfg.allow_duplicate_queries:
    keys = [" ".join(q.lower().split()) for q in traj.queries]
    if len(set(keys)) < len(keys):
      return DUPLICATE_QUERIES
  return None


def check_proposal(traj: Trajectory, answer: Answer,
                   cfg: FilterConfig) -> tuple[Optional[str], Optional[str]]:
  """Runs all rules. Returns (question, None) on pass, (question_or_None, reason) on reject."""
  question, reason = extract_question(traj.text)
  if reason:
    return None, reason
  for rule in (lambda: check_length(question, cfg), lambda: check_answer_leak(question, answer),
               lambda: check_searches(traj, cfg)):
    reason = rule()
    if reason:
      return question, reason
  return question, None
