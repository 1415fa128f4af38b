"""The answer set: JSONL lines `{"ground_truth": str | [str], "search_turns": int,
"sys_question_example": optional str | [str]}` (the layout of the original 50k-answer file).

Read streaming; a bad line (not UTF-8, not JSON, nested too deeply to parse, no usable ground
truth -- empty, or a NaN/Infinity number, which would become the answer "nan" -- a hop count that
is not an integer in 1..MAX_HOPS) is skipped and counted,
and the first offender is reported with its line number, so one broken line never kills a run.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from typing import Any, Iterator, Optional

log = logging.getLogger(__name__)
MAX_HOPS = 10   # search_turns above this is a data error (the paper's answers use 1-4ish)


@dataclasses.dataclass(frozen=True)
class AnswerItem:
  ground_truth: Any                  # str, or a list of aliases (kept as given)
  hops: int                          # search_turns
  examples: tuple[str, ...] = ()     # sys_question_example


@dataclasses.dataclass
class LoadStats:
  good: int = 0
  bad: int = 0
  first_bad: Optional[str] = None    # "path:line: reason"

  def report(self) -> str:
    msg = f"{self.good} answers loaded"
    if self.bad:
      msg += f", {self.bad} bad lines skipped (first: {self.first_bad})"
    return msg


def _no_constant(name: str):
  raise ValueError(f"{name} is not a usable value")


def _finite(value) -> bool:
  """Numbers (from JSON) usable as an answer's text: not NaN or +-Infinity (1e999 parses as inf)."""
  return not isinstance(value, float) or math.isfinite(value)


def parse_line(line: str, default_hops: int = 2) -> AnswerItem:
  """One JSONL line -> AnswerItem. Raises ValueError with the reason."""
  try:
    rec = json.loads(line, parse_constant=_no_constant)   # NaN, Infinity, -Infinity
  except json.JSONDecodeError as e:
    raise ValueError(f"not JSON ({e.msg})") from None
  except RecursionError:
    raise ValueError("JSON nested too deeply to parse") from None
  if not isinstance(rec, dict):
    raise ValueError("not a JSON object")
  gt = rec.get("ground_truth", rec.get("answer", rec.get("golden_answers")))
  if isinstance(gt, dict):           # {"target": [...]} as in the original preprocessing
    gt = gt.get("target")
  if isinstance(gt, (int, float)) and not isinstance(gt, bool):
    if not _finite(gt):
      raise ValueError(f"`ground_truth` {gt!r} is not a finite number")
    gt = str(gt)
  if isinstance(gt, str):
    ok = bool(gt.strip())
  elif isinstance(gt, list):
    gt = [str(g) for g in gt if isinstance(g, (str, int, float)) and not isinstance(g, bool)
          and _finite(g) and str(g).strip()]
    ok = bool(gt)
  else:
    ok = False
  if not ok:
    raise ValueError("missing or empty `ground_truth`")
  raw = rec.get("search_turns", default_hops)
  if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
    raise ValueError(f"`search_turns` {raw!r} is not an integer")
  try:
    hops = int(raw)
    if hops != float(raw):
      raise ValueError
  except (TypeError, ValueError, OverflowError):
    raise ValueError(f"`search_turns` {raw!r} is not an integer") from None
  if not 1 <= hops <= MAX_HOPS:
    raise ValueError(f"`search_turns` {raw!r} is outside 1..{MAX_HOPS}")
  ex = rec.get("sys_question_example") or ()
  ex = (ex,) if isinstance(ex, str) else tuple(str(e) for e in ex)
  return AnswerItem(gt, hops, ex)


def iter_answers(path: str, stats: LoadStats, default_hops: int = 2) -> Iterator[AnswerItem]:
  """Streams the good items of `path`, updating `stats` for each line."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"answer set {path!r} does not exist; set config.ssp.answers_path "
                            "(make one with `python -m ssp_jax.tools.make_answer_set`)")
  if os.path.isdir(path):
    raise ValueError(f"answer set {path!r} is a directory; set config.ssp.answers_path to the "
                     "JSONL file in it")
  with open(path, "rb") as f:
    for lineno, raw in enumerate(f, 1):
      if not raw.strip():
        continue
      try:
        try:
          line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
          raise ValueError(f"not UTF-8 (byte {e.start})") from None
        item = parse_line(line, default_hops)
      except ValueError as e:
        stats.bad += 1
        if stats.first_bad is None:
          stats.first_bad = f"{path}:{lineno}: {e}"
        continue
      stats.good += 1
      yield item


def load_answers(path: str, default_hops: int = 2) -> tuple[list[AnswerItem], LoadStats]:
  """All good items (a 50k-answer file is a few MB) and the load statistics."""
  stats = LoadStats()
  items = list(iter_answers(path, stats, default_hops))
  if stats.bad:
    log.warning("answer set %s: %s", path, stats.report())
  if not items:
    raise ValueError(f"answer set {path!r} has no usable line ({stats.report()})")
  return items, stats


def default_answers_path() -> str:
  return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                      "answers_wiki_sample.jsonl")
