"""Host-side state of one running trajectory, and the small helpers the engine's modules share."""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import jax
import numpy as np


@dataclasses.dataclass
class Row:
  """One prompt from admission to its Trajectory. The device holds its KV cache up to `pos`."""
  index: int                           # the prompt's place in the call
  prompt_ids: list[int]
  budget: int                          # response tokens left (observations included)
  pending: list[int]                   # tokens to put in the cache; the last one becomes tok_B
  pos: int = 0                         # position of pending[0] (then of the device's tok_B)
  response: list[int] = dataclasses.field(default_factory=list)
  mask: list[int] = dataclasses.field(default_factory=list)
  logprobs: list[float] = dataclasses.field(default_factory=list)
  segment: bytearray = dataclasses.field(default_factory=bytearray)  # generated since last chunk
  queries: list[str] = dataclasses.field(default_factory=list)        # one per tool call
  docs: list[list[dict]] = dataclasses.field(default_factory=list)
  failed: int = 0
  calls: dict[str, int] = dataclasses.field(default_factory=dict)    # tool name -> calls
  meta: dict = dataclasses.field(default_factory=dict)
  admitted: int = 0                    # admission order (paged: the youngest is preempted first)
  blocked: bool = False                # paged: no pages for its next step this call
  resume_segment: Optional[bytes] = None  # paged: segment bytes to restore after a preemption


def pow2(n: int) -> int:
  """The smallest power of two >= n (1 for n <= 1)."""
  return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def put(x, dtype=None) -> jax.Array:
  """A host array on the default device. (jnp.asarray of a numpy array compiles a small
  program per new shape; device_put does not.)"""
  return jax.device_put(np.asarray(x, dtype))
