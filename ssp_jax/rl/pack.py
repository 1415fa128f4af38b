"""Sequence packing (host side, numpy): several trajectories per row of the training batch.

A padded batch (`ssp_jax.rl.batch`) spends one row per trajectory, padded to the longest; with
SSP's mix of long proposer searches and short solver answers most of its positions are padding.
A packed batch (`PackedBatch`, its fields listed on the class) lays trajectories end to end in
rows of `row_len` tokens; every field is per token, [R, T].

The model attends only within a segment (`models.layers.segment_mask`, or cuDNN's packed
layout), so every trajectory's log-probs, loss and gradient are those of the padded layout.
The packer is first-fit decreasing: trajectories longest first, each into the first row with
room (and fewer than `max_segments` segments), a new row otherwise; a trajectory is never
split, and packing runs inside one mini-batch, so a prompt's group stays in one update.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Sequence

import numpy as np

from ssp_jax.rl.batch import Batch, Rows, column


@dataclasses.dataclass(frozen=True, eq=False)
class PackedBatch(Rows):
  """Trajectories end to end in R rows of T tokens (every field is read by the step)."""
  PACKED = True
  tokens: np.ndarray = column(np.int32, "R", "T")         # trajectories end to end, then pad_id
  # as padded, and 0 on every segment's first token (no context inside its segment)
  loss_mask: np.ndarray = column(np.float32, "R", "T")
  old_logp: np.ndarray = column(np.float32, "R", "T")     # as padded
  # the advantage / role loss weight / role of the token's trajectory (0 on padding)
  advantages: np.ndarray = column(np.float32, "R", "T")
  loss_weight: np.ndarray = column(np.float32, "R", "T")
  role: np.ndarray = column(np.int32, "R", "T")
  segment_ids: np.ndarray = column(np.int32, "R", "T")    # 1, 2, ... per trajectory; 0 on padding
  positions: np.ndarray = column(np.int32, "R", "T")      # 0.. restarting in every segment (rope)
  # the loss-token count of the token's trajectory (per-trajectory aggregations:
  # `ssp_jax.rl.losses.aggregation_weights`)
  seq_tokens: np.ndarray = column(np.float32, "R", "T")


@dataclasses.dataclass(frozen=True)
class Placement:
  """Where trajectory `source` (a row of the padded batch) landed: row, first column, length."""
  source: int
  row: int
  start: int
  length: int


def first_fit_decreasing(lengths: Sequence[int], row_len: int,
                         max_segments: int) -> list[list[int]]:
  """Bins of item indices: longest first, each into the first row with room; never splits an
  item (lengths above row_len must be clipped by the caller)."""
  if row_len <= 0 or max_segments <= 0:
    raise ValueError(f"row_len ({row_len}) and max_segments ({max_segments}) must be > 0")
  order = sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i))
  free: list[int] = []
  rows: list[list[int]] = []
  for i in order:
    n = int(lengths[i])
    if n > row_len:
      raise ValueError(f"item {i} has {n} tokens, more than row_len={row_len}")
    for r, room in enumerate(free):
      if room >= n and len(rows[r]) < max_segments:
        rows[r].append(i)
        free[r] -= n
        break
    else:
      rows.append([i])
      free.append(row_len - n)
  return rows


def pack_batch(batch: Batch, row_len: int, *, max_segments: int = 64,
               pad_id: int = 0) -> tuple[PackedBatch, list[Placement], dict[str, float]]:
  """Packs the trajectories of a padded batch (rows with prompt >= 0) into rows of row_len.

  Returns (packed batch, placements, stats: real_tokens, rows, row_len, fill_rate,
  segments_per_row). A trajectory longer than row_len loses its tail (a warning says how many).
  """
  if not isinstance(batch, Batch):
    raise TypeError(f"pack_batch packs a padded ssp_jax.rl.batch.Batch, got {type(batch).__name__}")
  src = np.flatnonzero((batch.prompt >= 0) & (batch.length > 0))
  lengths = np.minimum(batch.length[src], min(row_len, batch.row_len))
  cut = int((batch.length[src] > row_len).sum())
  if cut:
    warnings.warn(f"{cut} of {src.size} sequences are longer than the packed row "
                  f"(rl.pack_len={row_len}) and were truncated")
  bins = first_fit_decreasing(lengths, row_len, max_segments)
  R = max(len(bins), 1)
  out = {k: np.full((R, row_len), pad_id if k == "tokens" else 0, dtype)
         for k, (dtype, _) in PackedBatch.step_fields().items()}
  placements = []
  for r, items in enumerate(bins):
    col = 0
    for j, i in enumerate(sorted(items)):   # original order inside a row (deterministic)
      s, n = int(src[i]), int(lengths[i])
      sl = slice(col, col + n)
      out["tokens"][r, sl] = batch.tokens[s, :n]
      mask = batch.loss_mask[s, :n].astype(np.float32).copy()
      mask[0] = 0.0
      out["loss_mask"][r, sl] = mask
      out["old_logp"][r, sl] = np.where(mask > 0, batch.old_logp[s, :n], 0.0)
      out["advantages"][r, sl] = batch.advantages[s]
      out["loss_weight"][r, sl] = batch.loss_weight[s]
      out["role"][r, sl] = batch.role[s]
      out["segment_ids"][r, sl] = j + 1
      out["positions"][r, sl] = np.arange(n, dtype=np.int32)
      out["seq_tokens"][r, sl] = mask.sum()
      placements.append(Placement(source=s, row=r, start=col, length=n))
      col += n
  real = int(lengths.sum())
  stats = {"real_tokens": float(real), "rows": float(len(bins)), "row_len": float(row_len),
           "fill_rate": real / float(max(len(bins), 1) * row_len),
           "segments_per_row": len(src) / float(max(len(bins), 1))}
  return PackedBatch(**out), placements, stats


def unpack(values_RT: np.ndarray, placements: Sequence[Placement], shape: tuple[int, int],
           fill: float = 0.0) -> np.ndarray:
  """Scatters per-token values of a packed batch back to the padded layout [N, T]."""
  out = np.full(shape, fill, values_RT.dtype)
  for p in placements:
    out[p.source, :p.length] = values_RT[p.row, p.start:p.start + p.length]
  return out


def micro_batches_bucket(rows: int, micro: int) -> int:
  """Rows padded to micro-batches of `micro`, their count rounded up to a power of two, so a
  run compiles few shapes (empty micro-batches are skipped inside the step, costing ~nothing)."""
  k = max(1, -(-rows // micro))
  return micro * (1 << (k - 1).bit_length())
