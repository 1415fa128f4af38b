"""Counts XLA compilations (process-wide), so a rollout can report the ones it caused.

A multi-turn rollout calls several jitted functions whose shapes depend on the run (prefill
chunks, row groups, cache buckets); each new shape compiles, which on a GPU costs seconds. The
engine reads `snapshot()` before and after `generate` and reports the difference in the call's
stats (`compiles`, `compile_s`, `compiled_functions`; a program compiled on a
`rollout.compile_ahead` thread is named with " [ahead]"). Uses JAX's monitoring event for backend
compiles.
"""
from __future__ import annotations

import threading

import jax

_EVENT = "/jax/core/compile/backend_compile_duration"
AHEAD_THREADS = "compile-ahead"   # thread name prefix of rollout/ahead.py
_lock = threading.Lock()
_count = [0, 0.0]     # compilations, seconds
_names: dict[str, int] = {}
_registered = False


def _listener(event: str, duration: float, **kw) -> None:
  if event != _EVENT:
    return
  with _lock:
    _count[0] += 1
    _count[1] += float(duration)
    name = str(kw.get("fun_name", "?"))
    if threading.current_thread().name.startswith(AHEAD_THREADS):
      name += " [ahead]"     # compiled on a rollout.compile_ahead thread
    _names[name] = _names.get(name, 0) + 1


def install() -> None:
  """Registers the listener once per process."""
  global _registered
  with _lock:
    if _registered:
      return
    _registered = True
  jax.monitoring.register_event_duration_secs_listener(_listener)


def snapshot() -> tuple[int, float, dict[str, int]]:
  """(compilations, seconds, {function name: compilations}) so far in this process."""
  with _lock:
    return _count[0], _count[1], dict(_names)


def since(before: tuple[int, float, dict[str, int]]) -> tuple[int, float, dict[str, int]]:
  n, s, names = snapshot()
  return n - before[0], s - before[1], {k: v - before[2].get(k, 0) for k, v in names.items()
                                        if v - before[2].get(k, 0)}
