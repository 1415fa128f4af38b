"""Grading many responses at once, optionally in worker processes (`svs.grader_workers`).

  pool = GradePool(workers=16)
  rewards = pool.grade(responses, references)      # [len(responses)] floats in {0.0, 1.0}

Most answers are settled in well under a millisecond, but a wrong answer that only math_verify
can judge takes ~0.1-0.2 s; the original grades with 64 processes. With `workers > 1` the pairs
are spread over that many spawned processes (spawned, not forked: the trainer holds JAX
threads); in a worker the grader runs in its main thread, so math_verify's timeouts apply. A
broken pool (a worker killed) falls back to grading in this process; results are the same either
way (`math_grader.grade` is a pure function of the pair).
"""
from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
from typing import Optional, Sequence

from ssp_jax.svs import math_grader

log = logging.getLogger(__name__)
MIN_PAIRS_FOR_POOL = 64               # fewer pairs are graded here (start-up is not worth it)


def _grade_pair(response: str, reference: str) -> float:
  return math_grader.grade(response, reference)


class GradePool:
  def __init__(self, workers: int = 0):
    self.workers = int(workers)
    self._ex: Optional[concurrent.futures.ProcessPoolExecutor] = None

  def grade(self, responses: Sequence[str], references: Sequence[str]) -> list[float]:
    if len(responses) != len(references):
      raise ValueError(f"{len(responses)} responses but {len(references)} references")
    if self.workers <= 1 or len(responses) < MIN_PAIRS_FOR_POOL:
      return [math_grader.grade(r, a) for r, a in zip(responses, references)]
    if self._ex is None:
      self._ex = concurrent.futures.ProcessPoolExecutor(
          self.workers, mp_context=multiprocessing.get_context("spawn"))
    chunk = max(1, len(responses) // (4 * self.workers))
    try:
      return list(self._ex.map(_grade_pair, responses, references, chunksize=chunk))
    except concurrent.futures.process.BrokenProcessPool:
      log.warning("grader pool broke; grading %d responses in this process", len(responses))
      self.close()
      return [math_grader.grade(r, a) for r, a in zip(responses, references)]

  def close(self) -> None:
    if self._ex is not None:
      self._ex.shutdown(cancel_futures=True)
      self._ex = None
