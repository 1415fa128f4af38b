"""Labeled training questions of the Search-R1 baseline, and the deterministic order a run reads
them in.

Data: FlashRAG JSONL (`.jsonl` or `.jsonl.gz`), one `{"question": str, "golden_answers": [str]}`
per line, optionally `id` and `hops` (the world's qa_train.jsonl also has `kind` and `support`,
kept in `extra`). Read streaming; a bad line (not UTF-8, not JSON, no question, no golden answer,
a `hops` that is not an integer in 1..MAX_HOPS) is skipped and counted, the first one reported
with its line number, as the SSP answer loader does (`ssp_jax.ssp.answers`).

Order: step `s` takes the questions at positions `s*B .. s*B+B-1` of an endless sequence of
epochs, each epoch a permutation of the file seeded by (seed, epoch). Every question is used once
per epoch, as with the original's shuffled data loader, and the questions of a step depend on
(seed, step) only, so a resumed run redraws the same.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import os
from typing import Any, Optional

import numpy as np

from ssp_jax.ssp.answers import MAX_HOPS, LoadStats

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Question:
  id: str
  question: str
  golden_answers: tuple[str, ...]
  hops: Optional[int] = None         # None: the line has no `hops`
  extra: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False)


def parse_record(rec: Any, fallback_id: str) -> Question:
  """One decoded JSONL record -> Question. Raises ValueError with the reason."""
  if not isinstance(rec, dict):
    raise ValueError("not a JSON object")
  q = rec.get("question")
  if not isinstance(q, str) or not q.strip():
    raise ValueError("missing or empty `question`")
  golden = rec.get("golden_answers", rec.get("answers"))
  if isinstance(golden, str):
    golden = [golden]
  if not isinstance(golden, list):
    raise ValueError("`golden_answers` is not a list of strings")
  golden = [str(g).strip() for g in golden
            if isinstance(g, (str, int, float)) and not isinstance(g, bool) and str(g).strip()]
  if not golden:
    raise ValueError("missing or empty `golden_answers`")
  hops = rec.get("hops")
  if hops is not None:
    if isinstance(hops, bool) or not isinstance(hops, int) or not 1 <= hops <= MAX_HOPS:
      raise ValueError(f"`hops` {hops!r} is not an integer in 1..{MAX_HOPS}")
  extra = {k: v for k, v in rec.items() if k not in ("id", "question", "golden_answers",
                                                     "answers", "hops")}
  return Question(str(rec.get("id", fallback_id)), q.strip(), tuple(golden), hops, extra)


def load_questions(path: str) -> tuple[list[Question], LoadStats]:
  """All good questions of `path` and the load statistics (`LoadStats.bad` lines skipped)."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"training questions {path!r} do not exist; set "
                            "config.search_r1.train_path to a FlashRAG JSONL file")
  stats, out = LoadStats(), []
  name = os.path.basename(path).split(".")[0]
  opener = gzip.open if path.endswith(".gz") else open
  with opener(path, "rb") as f:
    for lineno, raw in enumerate(f, 1):
      if not raw.strip():
        continue
      try:
        try:
          rec = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
          raise ValueError(f"not UTF-8 (byte {e.start})") from None
        except json.JSONDecodeError as e:
          raise ValueError(f"not JSON ({e.msg})") from None
        item = parse_record(rec, f"{name}-{lineno - 1}")
      except ValueError as e:
        stats.bad += 1
        if stats.first_bad is None:
          stats.first_bad = f"{path}:{lineno}: {e}"
        continue
      stats.good += 1
      out.append(item)
  if stats.bad:
    log.warning("training questions %s: %s", path, report(stats))
  if not out:
    raise ValueError(f"training questions {path!r} hold no usable line ({report(stats)}); each "
                     "line needs `question` and `golden_answers`")
  return out, stats


def report(stats: LoadStats) -> str:
  return stats.report().replace("answers loaded", "questions loaded")


class QuestionOrder:
  """The questions of each step: seeded per-epoch permutations read `batch_size` at a time."""

  def __init__(self, n: int, batch_size: int, seed: int = 0):
    if n < 1 or batch_size < 1:
      raise ValueError(f"QuestionOrder needs n >= 1 and batch_size >= 1, got {n}, {batch_size}")
    self.n, self.batch_size, self.seed = n, batch_size, seed
    self._perms: dict[int, np.ndarray] = {}

  def _perm(self, epoch: int) -> np.ndarray:
    if epoch not in self._perms:
      if len(self._perms) > 4:           # steps move forward: keep only recent epochs
        self._perms.clear()
      self._perms[epoch] = np.random.default_rng([self.seed, epoch]).permutation(self.n)
    return self._perms[epoch]

  def indices(self, step: int) -> list[int]:
    """Question indices of step `step` (0-based)."""
    start = step * self.batch_size
    return [int(self._perm(p // self.n)[p % self.n]) for p in range(start, start + self.batch_size)]

  def epoch(self, step: int) -> float:
    """Epochs completed before step `step` (a fraction)."""
    return step * self.batch_size / self.n
