"""Math problem sets for SvS: JSONL or parquet loading and a resumable, seeded epoch iterator.

Two record layouts are read, from `.jsonl` (`.jsonl.gz`) and `.parquet` files alike:

* **verl** (the original SvS / DAPO / veRL files, e.g. `MATH_12k.parquet`,
  `dapo_math_17k.parquet`, `MATH-AIME-Evaluation.parquet`): `prompt` is a list of chat messages
  and the problem is the content of its last `user` message; the answer is
  `reward_model.ground_truth`; `data_source` is kept (evaluation reports per source);
  `extra_info.index` becomes the id; `ability` and the rest of `extra_info` are ignored.
* **flat**: the problem in `problem` or `question`; the answer in `answer` or `ref_answer`, or
  a `solution` whose last \\boxed{} is the answer (the MATH layout); optional `id`,
  `data_source`.

Instruction text that a data-preparation script added around the problem is stripped
(`INSTRUCTION_SUFFIXES`, `INSTRUCTION_PREFIXES`: the original's solving suffix " Please reason
step by step, and put your final answer within \\boxed{}.", veRL's "Let's think step by step and
output the final answer within \\boxed{}.", DAPO-17k's "Solve the following math problem step by
step..." and "Remember to put your answer on its own line after \"Answer:\""), because the
solving prompt adds its own suffix (prompts.py); `strip_instructions=False` keeps the text as is.
Numbers are accepted as answers (`"answer": 42`), but not NaN or Infinity (they would become the
answer "nan"). A malformed record (not JSON, nested too deeply to parse, a bad field) raises
ValueError naming the file, the row (JSONL: line; parquet: 0-based row) and the field. A truncated
`.jsonl.gz` keeps the lines before the damage, with one warning line naming the file (an error
when no line is left).

`fit_prompt_budget` drops problems whose solving prompt exceeds the prompt budget (the engine would
keep only their last tokens, and tokenising a multi-megabyte row on every draw is what made such a
row's steps many times slower); the run logs how many, and reports them each step as
`data/over_budget`.

`ProblemIterator` deals problems epoch by epoch, each epoch in a permutation seeded by
(seed, epoch); its position is a small JSON state saved in checkpoints, so a resumed run draws
exactly the batches the original would have.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import math
import os
import zlib
from typing import Any, Callable, Iterator, Optional

import numpy as np

from retrieval.corpus import open_text
from ssp_jax.svs.answer_extract import last_boxed

log = logging.getLogger(__name__)
PROBLEM_KEYS = ("problem", "question")
ANSWER_KEYS = ("answer", "ref_answer")
BUILTIN = {"math_sample": "math_sample.jsonl"}
INSTRUCTION_SUFFIXES = (
    "Please reason step by step, and put your final answer within \\boxed{}.",
    "Let's think step by step and output the final answer within \\boxed{}.",
    'Remember to put your answer on its own line after "Answer:".',
)
INSTRUCTION_PREFIXES = (
    "Solve the following math problem step by step. The last line of your response should be "
    "of the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.",
)


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


class TruncatedError(ValueError):
  """A compressed file ends early: `records` good records came before the damage."""

  def __init__(self, message: str, records: int):
    super().__init__(message)
    self.records = records


def _number_text(value, where: str, field: str):
  """A numeric answer as text; NaN and +-Infinity (JSON NaN, Infinity, 1e999) are errors."""
  if isinstance(value, float) and not math.isfinite(value):
    raise ValueError(f"{where}: field `{field}` is {value!r}, not a finite number; give the "
                     "answer as a string or a finite number")
  return str(value)


def _answer_of(rec: dict, where: str) -> str:
  for key in ANSWER_KEYS:
    if key in rec:
      value = rec[key]
      if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = _number_text(value, where, key)
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


def strip_instructions(problem: str) -> str:
  """The problem without the instruction text that data preparation added (module docstring)."""
  text = problem.strip()
  changed = True
  while changed:
    changed = False
    for suffix in INSTRUCTION_SUFFIXES:
      if text.endswith(suffix) and len(text) > len(suffix):
        text, changed = text[:-len(suffix)].rstrip(), True
    for prefix in INSTRUCTION_PREFIXES:
      if text.startswith(prefix) and len(text) > len(prefix):
        text, changed = text[len(prefix):].lstrip(), True
  return text


def _verl_problem(rec: dict, where: str) -> str:
  msgs = rec["prompt"]
  if hasattr(msgs, "tolist"):                  # a numpy array from a pandas round trip
    msgs = msgs.tolist()
  if not isinstance(msgs, list) or not msgs:
    raise ValueError(f"{where}: field `prompt` must be a non-empty list of chat messages "
                     f"({{\"role\", \"content\"}}), got {str(msgs)[:80]!r}")
  users = [m for m in msgs if isinstance(m, dict) and m.get("role") == "user"]
  if not users:
    raise ValueError(f"{where}: field `prompt` has no message with role \"user\"")
  content = users[-1].get("content")
  if not isinstance(content, str) or not content.strip():
    raise ValueError(f"{where}: field `prompt[-1].content` (the user message) must be a "
                     f"non-empty string, got {content!r}")
  return content


def _verl_answer(rec: dict, where: str) -> str:
  rm = rec.get("reward_model")
  if not isinstance(rm, dict) or "ground_truth" not in rm:
    raise ValueError(f"{where}: a verl record (with `prompt`) needs field "
                     "`reward_model.ground_truth`, the reference answer")
  value = rm["ground_truth"]
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    value = _number_text(value, where, "reward_model.ground_truth")
  if not isinstance(value, str) or not value.strip():
    raise ValueError(f"{where}: field `reward_model.ground_truth` must be a non-empty string "
                     f"or number, got {value!r}")
  return value.strip()


def as_problem(rec: Any, where: str, fallback_id: str, *,
               strip: bool = True) -> MathProblem:
  """Validates one record (verl or flat, see the module docstring) and returns a MathProblem."""
  if not isinstance(rec, dict):
    raise ValueError(f"{where}: a record must be a JSON object, got {type(rec).__name__}")
  if "prompt" in rec and not any(k in rec for k in PROBLEM_KEYS):
    problem, answer = _verl_problem(rec, where), _verl_answer(rec, where)
    info = rec.get("extra_info")
    if isinstance(info, dict) and info.get("index") is not None and "id" not in rec:
      fallback_id = f"{rec.get('data_source') or fallback_id.rsplit('-', 1)[0]}-{info['index']}"
  else:
    key = next((k for k in PROBLEM_KEYS if k in rec), None)
    if key is None:
      raise ValueError(f"{where}: no problem field; give `problem` or `question` (flat) or "
                       "`prompt` with `reward_model.ground_truth` (verl)")
    problem = rec[key]
    if not isinstance(problem, str) or not problem.strip():
      raise ValueError(f"{where}: field `{key}` must be a non-empty string, got {problem!r}")
    answer = _answer_of(rec, where)
  problem = strip_instructions(problem) if strip else problem.strip()
  source = rec.get("data_source")
  return MathProblem(str(rec.get("id", fallback_id)), problem, answer,
                     "" if source is None else str(source))


def read_records(path: str) -> Iterator[tuple[str, Any]]:
  """(where, record) for each record of a `.parquet` or JSONL file; `where` is "file:line"
  (JSONL, 1-based) or "file: row N" (parquet, 0-based)."""
  if path.endswith(".parquet"):
    try:
      import pyarrow.parquet as pq
    except ImportError as e:
      raise ValueError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from e
    try:
      table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 (pyarrow raises several types for a bad file)
      raise ValueError(f"{path}: not a readable parquet file ({type(e).__name__}: {e})") from e
    for i, rec in enumerate(table.to_pylist()):
      yield f"{path}: row {i}", rec
    return
  count, lineno = 0, 0
  try:
    with open_text(path) as f:
      for lineno, line in enumerate(f, 1):
        if not line.strip():
          continue
        try:
          rec = json.loads(line)
        except json.JSONDecodeError as e:
          raise ValueError(f"{path}:{lineno}: not a JSON line ({e})") from None
        except RecursionError:
          raise ValueError(f"{path}:{lineno}: not a usable JSON line (nested too deeply to "
                           "parse)") from None
        count += 1
        yield f"{path}:{lineno}", rec
  except UnicodeDecodeError as e:
    raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); give a JSONL "
                     "file, or a parquet file named *.parquet") from e
  except (EOFError, gzip.BadGzipFile, zlib.error) as e:
    raise TruncatedError(f"{path}: the compressed file is truncated or damaged after line "
                         f"{lineno} ({type(e).__name__}: {e})", count) from None


def load_problems(spec: str, name: Optional[str] = None, *,
                  strip_instructions: bool = True) -> list[MathProblem]:
  """Every problem of a JSONL or parquet file (or `builtin:<name>`), in file order."""
  path = builtin_path(spec[len("builtin:"):]) if spec.startswith("builtin:") else spec
  if not os.path.exists(path):
    raise FileNotFoundError(f"math problem file {path!r} does not exist; give a JSONL or parquet "
                            "file of {\"problem\", \"answer\"} or verl records (e.g. "
                            "builtin:math_sample)")
  if os.path.isdir(path):
    raise ValueError(f"math problem file {path!r} is a directory; give the JSONL or parquet "
                     "file in it")
  name = name or os.path.basename(path).split(".")[0]
  out = []
  try:
    for i, (where, rec) in enumerate(read_records(path)):
      out.append(as_problem(rec, where, f"{name}-{i}", strip=strip_instructions))
  except TruncatedError as e:
    if not out:
      raise ValueError(f"{e}; no problem could be read from it") from None
    log.warning("%s; using the %d problems before it", e, len(out))
  if not out:
    raise ValueError(f"math problem file {path!r} holds no problems")
  return out


def fit_prompt_budget(problems: list[MathProblem], prompt_tokens: Callable[[str], int],
                      budget: int, source: str = "") -> tuple[list[MathProblem], int]:
  """(the problems whose solving prompt fits in `budget` tokens, how many were dropped).

  `prompt_tokens(problem_text)` counts the tokens of a problem's solving prompt. A long problem
  is measured on growing prefixes (8 characters per budget token first, doubling), so a
  multi-megabyte row costs about one budget's worth of tokenising, not the whole row. Logs one
  warning line with the count and the first dropped problem's id."""
  kept, dropped = [], []
  for p in problems:
    size = 8 * budget
    while True:
      prefix = p.problem[:size]
      over = prompt_tokens(prefix) > budget
      if over or len(prefix) == len(p.problem):
        break
      size *= 2
    (dropped if over else kept).append(p)
  if dropped:
    log.warning("%s: %d of %d problems have a solving prompt longer than %d tokens and are left "
                "out (first: %s); raise rollout.max_prompt_tokens or shorten them",
                source or "problem set", len(dropped), len(problems), budget, dropped[0].id)
  if not kept:
    raise ValueError(f"{source or 'problem set'}: every problem's solving prompt is longer than "
                     f"{budget} tokens; raise rollout.max_prompt_tokens")
  return kept, len(dropped)


class ProblemIterator:
  """Batches of problems, epoch after epoch; `state_dict()` / `load_state_dict()` resume it."""

  def __init__(self, problems: list[MathProblem], *, seed: int = 0, shuffle: bool = True,
               over_budget: int = 0):
    if not problems:
      raise ValueError("ProblemIterator needs at least one problem")
    self.problems, self.seed, self.shuffle = list(problems), int(seed), bool(shuffle)
    self.over_budget = int(over_budget)   # problems left out by fit_prompt_budget (a metric)
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
