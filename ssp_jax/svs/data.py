"""Math problem sets for SvS: JSONL loading and a resumable, seeded epoch iterator.

A record is one JSON object per line with a problem and its reference answer:
  problem   `problem` or `question`
  answer    `answer` or `ref_answer`; or `solution`, a worked solution whose last \\boxed{} is
            the answer (the MATH layout)
  id        optional (default "<name>-<line index>")
  data_source  optional: evaluation reports accuracy per source (e.g. MATH-500, AIME-2024)
Numbers are accepted as answers (`"answer": 42`). A malformed record raises ValueError naming the
file, the line and the field. Parquet is not read (no pyarrow dependency): convert it to JSONL.

`ProblemIterator` deals problems epoch by epoch, each epoch in a permutation seeded by
(seed, epoch); its position is a small JSON state saved in checkpoints, so a resumed run draws
exactly the batches the original would have.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Optional

import numpy as np

from retrieval.corpus import iter_jsonl
from ssp_jax.svs.math_grader import last_boxed

log = logging.getLogger(__name__)
PROBLEM_KEYS = ("problem", "question")
ANSWER_KEYS = ("answer", "ref_answer")
BUILTIN = {"math_sample": "math_sample.jsonl"}


@dataclasses.dataclass(frozen=True)
class MathProblem:
  id: str
  problem: str
  answer: str
  source: str = ""          # data_source (evaluation groups by it)


def builtin_path(name: str) -> str:
  """Path of a problem set shipped in `ssp_jax/data/`."""
  if name not in BUILTIN:
    raise ValueError(f"unknown builtin math set {name!r}; known: {', '.join(sorted(BUILTIN))}")
  return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                      BUILTIN[name])


def default_train_path() -> str:
  return builtin_path("math_sample")


def _answer_of(rec: dict, where: str) -> str:
  for key in ANSWER_KEYS:
    if key in rec:
      value = rec[key]
      if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
      if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: field `{key}` must be a non-empty string or number, got "
                         f"{value!r}")
      return value.strip()
  if "solution" in rec:
    boxed = last_boxed(str(rec["solution"]))
    if not boxed:
      raise ValueError(f"{where}: field `solution` has no \\boxed{{...}} final answer; give "
                       "an `answer` field instead")
    return boxed
  raise ValueError(f"{where}: no answer field; give one of `answer`, `ref_answer` or "
                   "`solution` (with a \\boxed{} answer)")


def as_problem(rec: Any, where: str, fallback_id: str) -> MathProblem:
  """Validates one record (see the module docstring) and returns it as a MathProblem."""
  if not isinstance(rec, dict):
    raise ValueError(f"{where}: a record must be a JSON object, got {type(rec).__name__}")
  key = next((k for k in PROBLEM_KEYS if k in rec), None)
  if key is None:
    raise ValueError(f"{where}: no problem field; give `problem` or `question`")
  problem = rec[key]
  if not isinstance(problem, str) or not problem.strip():
    raise ValueError(f"{where}: field `{key}` must be a non-empty string, got {problem!r}")
  return MathProblem(str(rec.get("id", fallback_id)), problem.strip(), _answer_of(rec, where),
                     str(rec.get("data_source", "")))


def load_problems(spec: str, name: Optional[str] = None) -> list[MathProblem]:
  """Every problem of a JSONL file (or `builtin:math_sample`), in file order."""
  path = builtin_path(spec[len("builtin:"):]) if spec.startswith("builtin:") else spec
  if not os.path.exists(path):
    raise FileNotFoundError(f"math problem file {path!r} does not exist; give a JSONL file of "
                            "{\"problem\", \"answer\"} lines (e.g. builtin:math_sample)")
  name = name or os.path.basename(path).split(".")[0]
  out = [as_problem(rec, f"{path}:{lineno}", f"{name}-{lineno - 1}")
         for lineno, rec in iter_jsonl(path)]
  if not out:
    raise ValueError(f"math problem file {path!r} holds no problems")
  return out


class ProblemIterator:
  """Batches of problems, epoch after epoch; `state_dict()` / `load_state_dict()` resume it."""

  def __init__(self, problems: list[MathProblem], *, seed: int = 0, shuffle: bool = True):
    if not problems:
      raise ValueError("ProblemIterator needs at least one problem")
    self.problems, self.seed, self.shuffle = list(problems), int(seed), bool(shuffle)
    self.epoch, self.position = 0, 0

  def _order(self, epoch: int) -> np.ndarray:
    n = len(self.problems)
    if not self.shuffle:
      return np.arange(n)
    return np.random.default_rng([self.seed, epoch]).permutation(n)

  def next_batch(self, size: int) -> list[MathProblem]:
    """The next `size` problems; an epoch boundary continues into the next permutation."""
    out = []
    while len(out) < size:
      order = self._order(self.epoch)
      take = order[self.position:self.position + size - len(out)]
      out += [self.problems[i] for i in take]
      self.position += len(take)
      if self.position >= len(order):
        self.epoch, self.position = self.epoch + 1, 0
    return out

  def state_dict(self) -> dict:
    return {"epoch": self.epoch, "position": self.position, "size": len(self.problems),
            "seed": self.seed}

  def load_state_dict(self, state: dict) -> None:
    if int(state.get("size", len(self.problems))) != len(self.problems):
      log.warning("problem set has %d problems but the checkpoint's had %s; the epoch order "
                  "differs from the original run", len(self.problems), state.get("size"))
    self.epoch = int(state["epoch"])
    self.position = min(int(state["position"]), len(self.problems) - 1)
