"""Grading many responses under a time budget: no answer can stall a batch (`svs.grader_*`).

  pool = GradePool(workers=16, answer_timeout_s=5.0, batch_timeout_s=300.0)
  rewards = pool.grade(responses, references)      # [len(responses)] floats in {0.0, 1.0}
  pool.last["timeouts"]                             # answers of that call that ran out of time

Each pair is first graded here, by the cheap stages (extraction, guards, normalisation, exact
numbers; `math_grader.run_job(slow=False)`), which settle most answers in well under a
millisecond and are linear in the input's length. The rest (sympy and math_verify) go to
`workers` worker processes (grade_worker.py; at least one), one answer at a time, each under a
hard deadline of `answer_timeout_s` seconds for all its symbolic stages together. A worker that
overruns is killed (SIGKILL: nothing less stops sympy's C code) and replaced, its answer scores
0 and counts in `timeouts`; the other workers keep grading meanwhile. `batch_timeout_s` bounds
the whole call (0 = no bound): answers still pending when it runs out score 0 and count as
timeouts too, but are not remembered: every other answer is graded once per pool (its score,
a timeout's 0 included, is cached), and the same pair gets the same score whatever the number of
workers.

Counts of the last call (`last`) and of all calls (`totals`): `timeouts`, `refused` (answers
the guards refused: too long, too deep, towers, huge powers), `hedge` (hedges and false equation
chains), `worker_restarts`, `worker_start_failures`.
"""
from __future__ import annotations

import atexit
import collections
import hashlib
import json
import logging
import select
import threading
import time
from typing import Optional, Sequence

from ssp_jax.svs import math_grader
from ssp_jax.svs.grade_worker import Worker

log = logging.getLogger(__name__)
ANSWER_TIMEOUT_S = 5.0        # seconds of symbolic grading per answer (original: 60 s a sample)
BATCH_TIMEOUT_S = 300.0       # seconds per grade() call; 0 = unbounded
WORKER_START_TIMEOUT_S = 60.0  # a worker must import sympy and math_verify within this
_MAX_START_FAILURES = 3       # consecutive failed starts before the rest of a call scores 0
_CACHE_SIZE = 1 << 16


def _digest(job: Sequence) -> bytes:
  """A short cache key of a job (responses can be tens of kilobytes)."""
  return hashlib.blake2b(json.dumps(list(job)).encode("utf-8", "surrogatepass"),
                         digest_size=16).digest()


def budget_problem(workers, answer_timeout_s, batch_timeout_s,
                   prefix: str = "svs.") -> Optional[str]:
  """What is wrong with the grading settings, naming the field and the fix; None when fine."""
  if int(workers) < 0:
    return (f"config.{prefix}grader_workers={workers} must be >= 0 "
            "(0 or 1: one grading worker process)")
  if not float(answer_timeout_s) > 0:
    return (f"config.{prefix}grader_answer_timeout_s={answer_timeout_s} must be > 0 "
            f"(seconds of symbolic grading per answer; default {ANSWER_TIMEOUT_S})")
  if not float(batch_timeout_s) >= 0:
    return (f"config.{prefix}grader_batch_timeout_s={batch_timeout_s} must be >= 0 "
            f"(seconds per batch, 0 = unbounded; default {BATCH_TIMEOUT_S})")
  return None


def check_budgets(svs_cfg) -> None:
  """Raises ssp_jax's ConfigError for unusable `svs.grader_*` settings (svs/validate.py)."""
  problem = budget_problem(svs_cfg.get("grader_workers", 0),
                           svs_cfg.get("grader_answer_timeout_s", ANSWER_TIMEOUT_S),
                           svs_cfg.get("grader_batch_timeout_s", BATCH_TIMEOUT_S))
  if problem:
    from ssp_jax.run.validate import ConfigError
    raise ConfigError(problem)


class GradePool:
  def __init__(self, workers: int = 0, answer_timeout_s: float = ANSWER_TIMEOUT_S,
               batch_timeout_s: float = BATCH_TIMEOUT_S):
    problem = budget_problem(workers, answer_timeout_s, batch_timeout_s)
    if problem:
      raise ValueError(problem)
    self.workers = max(1, int(workers))
    self.answer_timeout_s = float(answer_timeout_s)
    self.batch_timeout_s = float(batch_timeout_s)
    self.last: collections.Counter = collections.Counter()
    self.totals: collections.Counter = collections.Counter()
    self._procs: list[Worker] = []
    self._cache: collections.OrderedDict = collections.OrderedDict()
    self._lock = threading.Lock()
    self._next_id = 0
    self._starts = 0                 # workers started since the last close()

  @classmethod
  def from_config(cls, svs_cfg) -> "GradePool":
    """The pool of an SvS config section (`grader_workers`, `grader_answer_timeout_s`,
    `grader_batch_timeout_s`; defaults for the ones it lacks)."""
    return cls(int(svs_cfg.get("grader_workers", 0)),
               float(svs_cfg.get("grader_answer_timeout_s", ANSWER_TIMEOUT_S)),
               float(svs_cfg.get("grader_batch_timeout_s", BATCH_TIMEOUT_S)))

  def grade(self, responses: Sequence[str], references: Sequence[str], *,
            fallbacks: bool = True, use_math_verify: bool = True) -> list[float]:
    """`math_grader.grade` of every (response, reference) pair, within the budgets."""
    if len(responses) != len(references):
      raise ValueError(f"{len(responses)} responses but {len(references)} references")
    return self.run([("grade", r, a, bool(fallbacks), bool(use_math_verify))
                     for r, a in zip(responses, references)])

  def run(self, jobs: Sequence[tuple]) -> list[float]:
    """Scores of `math_grader.run_job` jobs: cheap stages here, the rest in the workers."""
    with self._lock:
      self.last = collections.Counter()
      scores: list[Optional[float]] = [None] * len(jobs)
      pending: dict[bytes, list[int]] = {}       # job digest -> its indices (graded once)
      for i, job in enumerate(jobs):
        score = math_grader.run_job(job, slow=False, notes=self.last)
        if score is None:
          key = _digest(job)
          score = self._cache.get(key)
          if score is None:
            pending.setdefault(key, []).append(i)
        scores[i] = score
      if pending:
        graded, ungraded = self._dispatch([(key, tuple(jobs[idx[0]]))
                                           for key, idx in pending.items()])
        for key, idx in pending.items():
          score = graded.get(key, 0.0)
          if key not in ungraded:              # answers left over by the batch budget or by
            self._remember(key, score)         # workers that never started: not remembered
          for i in idx:
            scores[i] = score
      self.totals.update(self.last)
      return [float(s or 0.0) for s in scores]

  def _remember(self, key: tuple, score: float) -> None:
    self._cache[key] = score
    if len(self._cache) > _CACHE_SIZE:
      self._cache.popitem(last=False)

  # -- the workers ----------------------------------------------------------------------------
  def _dispatch(self, items: list[tuple[bytes, tuple]]) -> tuple[dict[bytes, float], set]:
    """Runs (key, job) items over the workers under the deadlines: ({key: score} of the jobs
    that ran, timeouts included; {keys} of those that never got a worker in time)."""
    now = time.monotonic()
    batch_end = now + self.batch_timeout_s if self.batch_timeout_s > 0 else float("inf")
    queue = collections.deque(items)
    done: dict[bytes, float] = {}
    busy: dict[Worker, tuple[int, tuple, float]] = {}   # worker -> (id, item, deadline)
    failures = 0
    while queue or busy:
      now = time.monotonic()
      if now >= batch_end or failures >= _MAX_START_FAILURES:
        reason = "timeouts" if now >= batch_end else "worker_errors"
        if failures >= _MAX_START_FAILURES:
          log.error("grading workers do not start (%d tries); %d answers score 0",
                    failures, len(queue) + len(busy))
        for w, (_, item, _) in busy.items():
          self._drop(w)
          self._finish(done, item, 0.0, reason)
        self.last[reason] += len(queue)
        return done, {key for key, _ in queue}
      failures += self._start(min(self.workers, len(queue) + len(busy)), now)
      for w in self._procs:
        if queue and w.ready and w not in busy:
          item = queue.popleft()
          self._next_id += 1
          try:
            w.send(self._next_id, item[1])
            busy[w] = (self._next_id, item, now + self.answer_timeout_s)
          except OSError:                       # it died while idle: replaced next round
            queue.appendleft(item)
            self._drop(w)
      waiting = [w for w in self._procs if w in busy or not w.ready]
      wake = min([d for _, _, d in busy.values()] + [w.start_deadline for w in waiting
                                                     if not w.ready] + [batch_end, now + 1.0])
      self._wait(waiting, max(0.0, wake - now))
      now = time.monotonic()
      for w in waiting:
        for msg in w.read():
          if w in busy and msg.get("id") == busy[w][0]:
            _, item, _ = busy.pop(w)
            self.last.update(msg.get("notes") or {})
            self._finish(done, item, float(msg.get("score") or 0.0), None)
        if w.ready and w not in busy:
          failures = 0
        if w.dead:                              # crashed (or killed from outside)
          if w in busy:
            self._finish(done, busy.pop(w)[1], 0.0, "worker_errors")
          if not w.ready:
            failures += 1
            self.last["worker_start_failures"] += 1
          self._drop(w)
        elif w in busy and now >= busy[w][2]:   # over its budget: kill and replace
          self._finish(done, busy.pop(w)[1], 0.0, "timeouts")
          self._drop(w)
        elif not w.ready and now >= w.start_deadline:
          failures += 1
          self.last["worker_start_failures"] += 1
          self._drop(w)
    return done, set()

  def _finish(self, done: dict, item: tuple, score: float, reason: Optional[str]) -> None:
    done[item[0]] = score
    if reason:
      self.last[reason] += 1

  def _start(self, wanted: int, now: float) -> int:
    """Starts workers up to `wanted`; the number of starts that failed (0 or 1)."""
    while len(self._procs) < wanted:
      try:
        self._procs.append(Worker(now + WORKER_START_TIMEOUT_S))
      except OSError as e:                      # no process could be made (EAGAIN, ENOMEM)
        log.warning("could not start a grading worker: %s", e)
        self.last["worker_start_failures"] += 1
        return 1
      self._starts += 1
      if self._starts > self.workers:           # a replacement of a killed or dead worker
        self.last["worker_restarts"] += 1
    return 0

  def _drop(self, w: Worker) -> None:
    w.kill()
    if w in self._procs:
      self._procs.remove(w)

  @staticmethod
  def _wait(workers: list[Worker], timeout_s: float) -> None:
    poller = select.poll()
    for w in workers:
      poller.register(w.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
    poller.poll(min(timeout_s, 3600.0) * 1000.0)

  def close(self) -> None:
    """Kills the worker processes (a later call starts new ones)."""
    with self._lock:
      for w in list(self._procs):
        self._drop(w)
      self._starts = 0

  def __del__(self):
    try:
      for w in list(getattr(self, "_procs", ())):
        w.kill()
    except Exception:  # noqa: BLE001 (interpreter shutdown)
      pass


_DEFAULT: Optional[GradePool] = None
_DEFAULT_LOCK = threading.Lock()


def default_pool() -> GradePool:
  """The process-wide pool of `math_grader.grade` and `is_equiv` (one worker, the default
  budgets), started on first use and closed at exit."""
  global _DEFAULT
  with _DEFAULT_LOCK:
    if _DEFAULT is None:
      _DEFAULT = GradePool(0)
      atexit.register(_DEFAULT.close)
    return _DEFAULT
