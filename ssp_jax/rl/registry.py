"""Name -> function registries for the RL pieces (advantage estimators, KL penalties, loss
aggregations), so configs select them by string and validation reads the registry itself."""
from __future__ import annotations

from typing import Callable, Generic, TypeVar

F = TypeVar("F", bound=Callable)


class RLConfigError(ValueError):
  """A bad `rl` field (an unknown choice, a bad role entry); the one-line message names it and
  its valid values."""


class Registry(Generic[F]):
  """A small named registry: `@REG.register("name")` then `REG.get("name")`."""

  def __init__(self, kind: str):
    self.kind = kind
    self._fns: dict[str, F] = {}

  def register(self, *names: str) -> Callable[[F], F]:
    def deco(fn: F) -> F:
      for name in names:
        if name in self._fns:
          raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._fns[name] = fn
      return fn
    return deco

  def get(self, name: str) -> F:
    try:
      return self._fns[name]
    except KeyError:
      raise KeyError(f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self._fns))}") from None

  def names(self) -> tuple[str, ...]:
    return tuple(sorted(self._fns))

  def __contains__(self, name: str) -> bool:
    return name in self._fns


ADVANTAGE_ESTIMATORS: Registry = Registry("advantage estimator")
KL_PENALTIES: Registry = Registry("kl_type")
LOSS_AGGREGATIONS: Registry = Registry("loss_agg")
