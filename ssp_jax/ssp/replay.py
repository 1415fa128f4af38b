"""Filling the batch when too few proposals are valid (paper App. B.1).

Strategies (`config.ssp.fill.strategy`):
  replay       replay buffer of earlier valid questions, fully reset every `reset_every` steps
               (the paper's default, "periodic reset");
  full_reuse   the same buffer, never reset;
  dummy        pad with a dummy question that trains nothing useful (reward sparsity);
  resample     dynamic resampling: the game re-runs the proposer on fresh answers until the batch
               is full or `max_resample_rounds` is spent, then pads like `dummy`.

The buffer state is a plain JSON-able dict so it goes into the training checkpoint.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

STRATEGIES = ("replay", "full_reuse", "dummy", "resample")
DUMMY_QUESTION = "This is a dummy question. Reply with <answer> none </answer> and nothing else."
DUMMY_ANSWER = "none"


@dataclasses.dataclass
class Problem:
  """A question the solver trains on."""
  question: str
  answer: Any                     # str or list of aliases
  hops: int = 0
  solve_rate: Optional[float] = None
  step: int = 0                   # training step that produced it
  source: str = "fresh"           # fresh | replay | dummy

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


def dummy_problem(step: int) -> Problem:
  return Problem(DUMMY_QUESTION, DUMMY_ANSWER, 0, None, step, "dummy")


class ReplayBuffer:
  """Pool of valid questions with their latest solve rates."""

  def __init__(self, reset_every: int = 10, max_solve_rate: float = 1.0, capacity: int = 100_000):
    self.reset_every = int(reset_every)      # <= 0: never reset (full reuse)
    self.max_solve_rate = float(max_solve_rate)
    self.capacity = int(capacity)
    self.items: list[Problem] = []
    self.last_reset_step = 0

  def __len__(self) -> int:
    return len(self.items)

  def add(self, problems: list[Problem]) -> None:
    """Adds fresh (non-dummy) problems; oldest entries go first when over capacity."""
    for p in problems:
      if p.source == "fresh":
        self.items.append(dataclasses.replace(p, source="replay"))
    if len(self.items) > self.capacity:
      self.items = self.items[-self.capacity:]

  def maybe_reset(self, step: int) -> bool:
    """Clears the whole buffer when `step` is a multiple of `reset_every`. Returns True if so."""
    if self.reset_every > 0 and step > 0 and step % self.reset_every == 0:
      self.items = []
      self.last_reset_step = step
      return True
    return False

  def sample(self, n: int, rng: np.random.Generator) -> list[Problem]:
    """`n` problems, preferring solve rate <= max_solve_rate (any problem as a fallback);
    with replacement only when the pool is smaller than `n`."""
    if n <= 0 or not self.items:
      return []
    pool = [p for p in self.items
            if p.solve_rate is None or p.solve_rate <= self.max_solve_rate] or self.items
    idx = rng.choice(len(pool), size=n, replace=len(pool) < n)
    return [dataclasses.replace(pool[i], source="replay") for i in idx]

  def state_dict(self) -> dict:
    return {"items": [p.to_dict() for p in self.items], "last_reset_step": self.last_reset_step}

  def load_state_dict(self, state: dict) -> None:
    self.items = [Problem(**d) for d in state.get("items", [])]
    self.last_reset_step = int(state.get("last_reset_step", 0))


def fill(problems: list[Problem], batch_size: int, strategy: str, buffer: ReplayBuffer,
         rng: np.random.Generator, step: int) -> list[Problem]:
  """Tops up `problems` to `batch_size` (the `resample` rounds happen in the game before this)."""
  if strategy not in STRATEGIES:
    raise ValueError(f"fill strategy {strategy!r} unknown; choose one of {STRATEGIES}")
  missing = batch_size - len(problems)
  if missing <= 0:
    return problems[:batch_size]
  extra: list[Problem] = []
  if strategy in ("replay", "full_reuse"):
    extra = buffer.sample(missing, rng)
  extra += [dummy_problem(step) for _ in range(missing - len(extra))]
  return problems + extra
