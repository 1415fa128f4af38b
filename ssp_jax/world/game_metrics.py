"""World measures of one SSP step's proposals, for training logs (config `ssp.world_dir`).

`world_metrics(checker, proposals)` takes (question or None, answer, RAG-valid) per proposal and
returns the step's metrics and the per-proposal measures (None where there was no question):

  world/grounded_rate        grounded, over proposals with a question
  world/hops_mean            shortest chain length, over those with one
  world/leak_rate            answer in the question, over proposals with a question
  world/copy8_rate           8 consecutive words of a passage, over proposals with a question
  world/valid_grounded_rate  grounded, over RAG-valid proposals
  rag/fooled_rate            RAG-valid but not grounded, over RAG-valid proposals
  world/checked              proposals with a question
"""
from __future__ import annotations

from typing import Any, Optional, Sequence


def world_metrics(checker, proposals: Sequence[tuple[Optional[str], Any, bool]]
                  ) -> tuple[dict[str, float], list[Optional[dict]]]:
  measures = [checker.check(q, a) if q and q.strip() else None for q, a, _ in proposals]
  asked = [m for m in measures if m is not None]
  valid = [m for m, (_, _, ok) in zip(measures, proposals) if ok and m is not None]
  hops = [m["hops"] for m in asked if m["hops"] is not None]
  rate = lambda ms, key: sum(bool(m[key]) for m in ms) / max(1, len(ms))
  metrics = {
      "world/checked": float(len(asked)),
      "world/grounded_rate": rate(asked, "grounded"),
      "world/hops_mean": float(sum(hops) / len(hops)) if hops else 0.0,
      "world/leak_rate": rate(asked, "leak"),
      "world/copy8_rate": rate(asked, "copy8"),
      "world/valid_grounded_rate": rate(valid, "grounded"),
      "rag/fooled_rate": sum(not m["grounded"] for m in valid) / max(1, len(valid)),
  }
  return metrics, measures
