"""What the host loop needs to run SPMD on several JAX processes (multi-host TPU / GPU).

Every process runs the same host-side Python loop on identical inputs, so every process must see
identical host values. The device side is made so by construction (results of the jitted loops
come back replicated); the one host-side input that is not deterministic across processes is the
retriever (timeouts, HTTP retries, a server that changes), so it runs on process 0 only and its
answer is broadcast (`broadcast_from_first`). Host arrays handed to jitted functions (numpy or
`jnp.asarray`: prefill chunks, row indices, limits) are then the same on every process, as JAX
requires of such inputs when the mesh spans processes.

On one process nothing here talks to other processes.
"""
from __future__ import annotations

import json
from typing import Any, Callable

import jax
import numpy as np


def is_multiprocess() -> bool:
  return jax.process_count() > 1


def is_first() -> bool:
  """True on the process that talks to the outside world (retriever, files)."""
  return jax.process_index() == 0


def _bucket(n: int) -> int:
  """Padded payload size: powers of two from 1 KiB, so few broadcast shapes are compiled."""
  return max(1024, 1 << (max(n, 1) - 1).bit_length())


def broadcast_bytes(data: bytes) -> bytes:
  """Process 0's `data` on every process (the other processes' argument is ignored)."""
  from jax.experimental import multihost_utils
  n = int(multihost_utils.broadcast_one_to_all(np.array([len(data)], np.int64))[0])
  buf = np.zeros((_bucket(n),), np.uint8)
  if is_first():
    buf[:n] = np.frombuffer(data, np.uint8)
  return multihost_utils.broadcast_one_to_all(buf)[:n].tobytes()


def _plain(x: Any) -> Any:
  """JSON fallback for numpy scalars and arrays (e.g. a retriever's scores)."""
  if isinstance(x, (np.generic, np.ndarray)):
    return x.tolist()
  raise TypeError(f"{type(x).__name__} is not JSON serializable")


def broadcast_from_first(fn: Callable[[], Any]) -> Any:
  """`fn()` evaluated on process 0 only, its JSON-able result returned on every process.

  The result always makes a JSON round trip (numpy scalars become plain numbers), on one
  process too, so a run sees the same values whatever its process count. An exception on
  process 0 is re-raised on every process (a RuntimeError with its message), so no process is
  left waiting in a collective.
  """
  payload = b""
  if is_first():
    try:
      payload = json.dumps({"ok": fn()}, default=_plain).encode("utf-8")
    except Exception as e:  # noqa: BLE001 -- every process must leave this call the same way
      if not is_multiprocess():
        raise
      payload = json.dumps({"error": f"{type(e).__name__}: {e}"}).encode("utf-8")
  if is_multiprocess():
    payload = broadcast_bytes(payload)
  out = json.loads(payload.decode("utf-8"))
  if "error" in out:
    raise RuntimeError(f"process 0 failed: {out['error']}")
  return out["ok"]
