"""Exact stop-string detection inside the jitted decode loop.

Why this is exact. For a byte-level BPE tokenizer every token id t decodes to a fixed byte string
bytes(t), and the decoded text of a token sequence is the concatenation of those byte strings
(see `ssp_jax.tokenizer`). So "the text generated so far contains stop string s" is a property of
the concatenated bytes, independent of how s happens to be split into tokens. When token t is
appended to text X, a *new* occurrence of s (one that was not already in X) must end inside
bytes(t), so it either
  (a) lies entirely inside bytes(t)           -> precomputed per token: `contains_V`, or
  (b) starts in the last |s|-1 bytes of X and continues into the first bytes of bytes(t).
Case (b) needs only the last M = max|s| - 1 bytes of X (the rolling `window_BM`, right-aligned,
-1 padded) and the first M bytes of bytes(t) (`prefix_VM`, -1 padded). We test every start offset
i in [0, M) of window+prefix against every stop string; -1 pads never equal a byte, so a match
never reads past the real bytes. The loop marks the row done on the first step where a match
appears, i.e. right after the token that completes the first occurrence, and emits nothing more.
The window then advances to the last M bytes of X + bytes(t) (`suffix_VM` when |bytes(t)| >= M).
The window starts empty (all -1) at the beginning of every generated segment, so stop strings are
matched in generated text only (not in the prompt or in spliced observations).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

PAD = -1     # window / token padding
NEVER = -2   # the byte of an unused stop slot


class StopTables(NamedTuple):
  """Device tables for one (vocabulary, stop set). M = window size, S = number of stops."""
  prefix_VM: jax.Array    # int16 first M bytes of each token, -1 padded
  suffix_VM: jax.Array    # int16 last M bytes of each token, right-aligned, -1 padded
  len_V: jax.Array        # int32 byte length of each token
  contains_V: jax.Array   # bool: the token's bytes alone contain a stop string
  stops_SL: jax.Array     # int16 stop bytes, L = M + 1, -1 padded
  valid_SL: jax.Array     # bool: position l is part of stop s


@dataclasses.dataclass(frozen=True)
class HostStopTables:
  """numpy version (built once per tokenizer and stop set, then put on device)."""
  prefix_VM: np.ndarray
  suffix_VM: np.ndarray
  len_V: np.ndarray
  contains_V: np.ndarray
  stops_SL: np.ndarray
  valid_SL: np.ndarray

  def to_device(self, sharding=None) -> StopTables:
    put = (lambda x: jax.device_put(x, sharding)) if sharding is not None else jnp.asarray
    return StopTables(*(put(getattr(self, f.name)) for f in dataclasses.fields(self)))


MIN_WINDOW = 15   # window sizes and stop counts are rounded up so that most stop sets share
STOP_SLOTS = 4    # table shapes (and so one compiled decode loop)


def build_stop_tables(token_bytes: Sequence[bytes], stops: Sequence[str]) -> HostStopTables:
  """Precomputes the per-token byte tables for `stops` (non-empty strings)."""
  stop_b = [s.encode("utf-8") for s in stops]
  if any(not s for s in stop_b):
    raise ValueError("stop strings must be non-empty")
  V = len(token_bytes)
  M = max([len(s) - 1 for s in stop_b] + [MIN_WINDOW])
  prefix = np.full((V, M), PAD, np.int16)
  suffix = np.full((V, M), PAD, np.int16)
  lens = np.zeros((V,), np.int32)
  contains = np.zeros((V,), bool)
  for t, b in enumerate(token_bytes):
    lens[t] = len(b)
    if not b:
      continue
    head, tail = b[:M], b[-M:]
    prefix[t, :len(head)] = np.frombuffer(head, np.uint8)
    suffix[t, M - len(tail):] = np.frombuffer(tail, np.uint8)
    contains[t] = any(s in b for s in stop_b)
  S = -(-max(len(stop_b), 1) // STOP_SLOTS) * STOP_SLOTS
  stops_SL = np.full((S, M + 1), NEVER, np.int16)
  valid_SL = np.zeros((S, M + 1), bool)
  valid_SL[:, 0] = True  # unused slots must match byte NEVER (-2), which no window holds
  for i, s in enumerate(stop_b):
    stops_SL[i, :len(s)] = np.frombuffer(s, np.uint8)
    valid_SL[i, :len(s)] = True
  return HostStopTables(prefix, suffix, lens, contains, stops_SL, valid_SL)


def empty_window(batch: int, tables: StopTables) -> jax.Array:
  return jnp.full((batch, tables.prefix_VM.shape[1]), PAD, jnp.int16)


def check_stop(window_BM: jax.Array, tok_B: jax.Array,
               tables: StopTables) -> tuple[jax.Array, jax.Array]:
  """Returns (hit_B: appending tok_B completes a stop string, the advanced window_BM)."""
  M = window_BM.shape[1]
  L = M + 1
  head_BM = tables.prefix_VM[tok_B]
  comb_B2M = jnp.concatenate([window_BM, head_BM], axis=1).astype(jnp.int32)
  # Every start offset i in [0, M) of window+head, every stop byte l in [0, L).
  idx_ML = jnp.minimum(jnp.arange(M)[:, None] + jnp.arange(L)[None, :], 2 * M - 1)
  grams_BML = comb_B2M[:, idx_ML]
  eq_BMSL = ((grams_BML[:, :, None, :] == tables.stops_SL[None, None].astype(jnp.int32))
             | ~tables.valid_SL[None, None])
  hit_B = jnp.any(jnp.all(eq_BMSL, axis=-1), axis=(1, 2)) | tables.contains_V[tok_B]
  # Advance: the last M bytes of window + bytes(tok).
  n_B = tables.len_V[tok_B]
  shift_BM = jnp.arange(M)[None, :] + jnp.minimum(n_B, M)[:, None]
  shifted_BM = jnp.take_along_axis(comb_B2M, shift_BM, axis=1).astype(jnp.int16)
  new_BM = jnp.where((n_B >= M)[:, None], tables.suffix_VM[tok_B], shifted_BM)
  return hit_B, new_BM


def first_stop_end(text: bytes, stops: Sequence[str]) -> tuple[int, str]:
  """(end offset, stop) of the earliest-ending occurrence of any stop in `text`; (-1, '') if none.
  Host-side reference used to name the stop that ended a segment (and by tests)."""
  best = (-1, "")
  for s in stops:
    i = text.find(s.encode("utf-8"))
    if i >= 0:
      end = i + len(s.encode("utf-8"))
      if best[0] < 0 or end < best[0]:
        best = (end, s)
  return best
