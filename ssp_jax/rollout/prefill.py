"""Prefill of the rows' pending tokens (new prompts, spliced observations, preempted rows) into
their KV cache rows, in few compiled shapes.

Dense layout: pieces of at most `rollout.prefill_chunk` tokens, padded to a bucket length
(`chunk_bucket`), rows grouped in powers of two (`row_parts`): a program per (rows, bucket,
cache length). Paged layout (`_prefill_pieces`): every row's pending tokens are cut into pieces
of `rollout.prefill_piece` tokens, and the pieces of all rows, however long each row's pending
sequence, go into calls of at most `rollout.prefill_tokens` tokens, a power of four of pieces
each (`piece_parts`); the pieces of one row may share a call, as the paged prefill writes each
layer's K/V before it attends (sampling/paged_prefill.py). Its programs vary only in the count
of pieces (at most four sizes at the defaults) and the table width (at most four,
`slots.table_width`), where the chunked rows varied in rows x buckets x widths x decode batch
(44 programs for 8,192-token responses on an H200, bench/RESULTS.md)."""
from __future__ import annotations

import collections
from typing import Optional

import numpy as np

from models.config import ModelConfig
from models.sharding import Sharder
from ssp_jax import sampling as S
from ssp_jax.rollout.ahead import CompileAhead
from ssp_jax.rollout.rows import Row, pow2, put
from ssp_jax.rollout.slots import SlotPlanner
from ssp_jax.sampling.stops import PAD


def chunk_bucket(n: int, cap: int) -> int:
  """The padded length a prefill piece of n tokens compiles at: 16, 32, 64, then powers of two
  and 3/4 of them (96, 128, 192, 256, 384, 512, ...), at most cap (a power of two). Pieces pad
  by at most 1.33x above 64 tokens (2x with powers of two alone) for about twice the shapes."""
  p = max(16, pow2(n))
  if p >= 128 and 3 * p // 4 >= n:
    p = 3 * p // 4
  return min(p, cap)


def row_parts(rows: list[int], cap: int) -> list[list[int]]:
  """rows split into power-of-two groups (the shapes prefill compiles): padded (repeating the
  first row) when that wastes at most a quarter of the group, else the largest power of two
  below goes alone and the rest is split again (37 rows: 32 + 4 + 1, not 64). At most cap
  rows a group (the slot count, which need not be a power of two)."""
  parts = []
  while rows:
    n, p = len(rows), min(pow2(len(rows)), cap)
    if p - n <= p // 4:
      parts.append(rows + [rows[0]] * (p - n))
      break
    h = pow2(n) // 2   # < n
    parts.append(rows[:h])
    rows = rows[h:]
  return parts


def piece_parts(n: int, cap: int) -> list[tuple[int, int]]:
  """(first, size) of the calls that prefill n pieces, in order (a row's earlier pieces never go
  to a later call than its later ones). Three sizes a factor of four apart, cap / 16, cap / 4
  and cap (the most pieces a call holds; 4, 16 and 64 at the defaults): at most cap pieces a
  call, padded when that wastes at most a quarter of it or the rest is below the smallest size,
  else the largest size below goes alone and the rest is split again (37 pieces, cap 64:
  16 + 16 + 4 + 4 with 3 padding pieces; 14: one call of 16). Each size is a program per table
  width. Powers of four from 1 padded less (on a CPU, where padding costs compute) for one size
  more, a third more programs (on a GPU a call of 4 pieces costs about what one of 1 does: each
  reads every weight once); powers of two from 1, twice the sizes."""
  sizes = piece_sizes(cap)
  parts, first = [], 0
  while first < n:
    left = n - first
    p = next((s for s in sizes if s >= left), None)
    if p is not None and (p == sizes[0] or p - left <= p // 4):
      parts.append((first, p))
      break
    h = max(s for s in sizes if s < left)
    parts.append((first, h))
    first += h
  return parts


def piece_sizes(cap: int) -> list[int]:
  """The piece counts a paged prefill call holds (`piece_parts`), ascending."""
  return sorted({max(1, cap // 16), max(1, cap // 4), cap})


def prefill_pending(model_cfg: ModelConfig, params, dparams, st: S.DecodeState,
                    rows: list[Optional[Row]], slots: SlotPlanner, *, chunk: int, dtype,
                    sharder: Optional[Sharder], stats: collections.Counter,
                    ahead: Optional[CompileAhead] = None) -> S.DecodeState:
  """Puts every row's pending tokens but the last in the cache; the last becomes tok_B.
  params: the stacked params (dense layout); dparams: the decode-layout ones (paged layout).
  ahead: the call's programs compiling on host threads (paged; rollout/ahead.py)."""
  todo = [b for b, r in enumerate(rows) if r is not None and r.pending and not r.blocked]
  if not todo:
    return st
  fed = {b: rows[b].pending[:-1] for b in todo}
  if slots.paged:
    st = _prefill_pieces(model_cfg, dparams, st, rows, fed, slots, dtype=dtype, sharder=sharder,
                         stats=stats, ahead=ahead)
  else:
    st = _prefill_chunks(model_cfg, params, st, rows, fed, slots, chunk=chunk, dtype=dtype,
                         sharder=sharder, stats=stats)
  tok = {b: rows[b].pending[-1] for b in todo}
  for b in todo:
    rows[b].pos += len(rows[b].pending) - 1
    rows[b].pending = []
    rows[b].segment = bytearray()
  # Row lists padded to all B slots (repeating the first row with its own values), so that
  # set_rows / set_windows compile once, not once per count of rows.
  idx = todo + [todo[0]] * (len(rows) - len(todo))
  st = S.set_rows(st, put(idx, np.int32), put([tok[b] for b in idx], np.int32),
                  put([rows[b].pos for b in idx], np.int32), put(np.ones((len(idx),), bool)))
  resumed = [b for b in todo if rows[b].resume_segment is not None]
  if resumed:   # rows preempted mid-generation: restore their segment and stop window
    st = _restore_windows(st, rows, resumed)
  return st


def _prefill_chunks(model_cfg, params, st, rows, fed, slots, *, chunk, dtype, sharder, stats):
  """Dense layout: pieces of at most `chunk` tokens, one call per (piece index, bucket, group)."""
  todo = list(fed)
  pieces = {b: [fed[b][i:i + chunk] for i in range(0, len(fed[b]), chunk)] for b in todo}
  for k in range(max([len(p) for p in pieces.values()] + [0])):
    # Rows are grouped by the bucket of their own piece's length, one call per bucket: a
    # 100-token observation is not padded to the 512 of another row's (rows never interact).
    by_T: dict[int, list[int]] = {}
    for b in todo:
      if len(pieces[b]) > k:
        by_T.setdefault(chunk_bucket(len(pieces[b][k]), pow2(chunk)), []).append(b)
    for T, group in sorted(by_T.items()):
      st = slots.fit_cache(st, max(rows[b].pos + k * chunk for b in group) + T)
      for idx in row_parts(group, len(rows)):
        toks_PT = np.zeros((len(idx), T), np.int32)
        for i, b in enumerate(idx):
          toks_PT[i, :len(pieces[b][k])] = pieces[b][k]
        start_P = np.array([rows[b].pos + k * chunk for b in idx], np.int32)
        st = S.prefill_rows(model_cfg, st, params, put(idx, np.int32), put(toks_PT),
                            put(start_P), dtype=dtype, sharder=sharder)
        stats["prefill_calls"] += 1
        stats["prefill_tokens"] += sum(len(pieces[b][k]) for b in set(idx))
        stats["prefill_computed"] += len(idx) * T
  return st


def _prefill_pieces(model_cfg, dparams, st, rows, fed, slots, *, dtype, sharder, stats, ahead):
  """Paged layout: every row's tokens in pieces of `prefill_piece`, the pieces of all rows in
  calls of `piece_parts` sizes (see the module docstring), each attending the table width the
  decode calls attend (`slots.columns`). Padding pieces have a table of null pages."""
  T = int(slots.cfg.prefill_piece)
  cap = max(1, int(slots.cfg.prefill_tokens) // T)
  pieces = [(b, i) for b in fed for i in range(0, len(fed[b]), T)]   # (row, offset)
  st = slots.fit_cache(st, max(rows[b].pos + len(fed[b]) for b in fed))
  C, table = slots.columns, slots.alloc.table
  attn = str(slots.cfg.get("prefill_attention", "xla"))   # resolved by the engine
  for first, n in piece_parts(len(pieces), cap):
    part = pieces[first:first + n]
    toks_PT = np.zeros((n, T), np.int32)
    table_PC = np.zeros((n, C), np.int32)    # padding pieces: null pages only
    start_P = np.zeros((n,), np.int32)
    for j, (b, i) in enumerate(part):
      toks_PT[j, :len(fed[b][i:i + T])] = fed[b][i:i + T]
      table_PC[j] = table[b, :C]
      start_P[j] = rows[b].pos + i
    if ahead is not None:
      ahead.wait(("prefill", n, C))
    k, v = S.prefill_pages(model_cfg, st.cache["k"], st.cache["v"], dparams, put(table_PC),
                           put(toks_PT), put(start_P), dtype=dtype, sharder=sharder,
                           attn_impl=attn)
    st = st._replace(cache={**st.cache, "k": k, "v": v})
    stats["prefill_calls"] += 1
    stats["prefill_tokens"] += sum(len(fed[b][i:i + T]) for b, i in part)
    stats["prefill_computed"] += n * T
  return st


def _restore_windows(st: S.DecodeState, rows, resumed: list[int]) -> S.DecodeState:
  M = st.window_BM.shape[1]
  win = {}
  for b in resumed:
    seg = rows[b].resume_segment
    rows[b].segment = bytearray(seg)
    rows[b].resume_segment = None
    tail = np.frombuffer(seg[-M:], np.uint8) if M else np.zeros(0, np.uint8)
    win[b] = np.full((M,), PAD, np.int16)
    win[b][M - len(tail):] = tail
  idx = resumed + [resumed[0]] * (len(rows) - len(resumed))
  return S.set_windows(st, put(idx, np.int32), put(np.stack([win[b] for b in idx])))
