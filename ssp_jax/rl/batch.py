"""Trajectories -> padded numpy training batches (host side, no jax).

A batch is a `Batch` (a frozen dataclass of numpy arrays, one row per trajectory); its fields
are listed on the class. Right padding keeps positions 0..T-1 and plain causal attention valid
(pads come after every real token), so the learner can use flash attention without segment
ids. T is rounded up to a multiple of `bucket` (128 by default) so the compiled step sees only
a few shapes. With `rl.pack` (the default) the learner packs these rows into fewer, full rows
(`ssp_jax.rl.pack.PackedBatch`).

`Rows` is what both layouts share: every field a numpy array whose first axis is the row,
checked at construction (a missing field, a wrong rank, an uncastable dtype or a row count
that differs from `tokens` fails with one line naming the field), and the row helpers the
learner uses (`take_rows`, `pad_rows`, `replace`, `step_inputs`).
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any, ClassVar, Optional, Sequence

import numpy as np

from ssp_jax.types import Trajectory


def column(dtype, *dims: str, pad: int = 0, host: bool = False) -> Any:
  """A field of a `Rows` dataclass: its dtype, its axes ("N" rows, "T" tokens), the value of
  padding rows (`tokens` pad with the caller's pad_id instead) and whether the compiled step
  reads it (`host=True`: the host alone does)."""
  return dataclasses.field(metadata={"dtype": np.dtype(dtype), "dims": dims, "pad": pad,
                                     "host": host})


@dataclasses.dataclass(frozen=True, eq=False)
class Rows:
  """Base of the batch layouts: numpy arrays sharing their first (row) axis."""
  PACKED: ClassVar[bool] = False

  def __post_init__(self):
    """Checks every field (`tokens`, the first, sets N and T) and casts it to its dtype."""
    name = type(self).__name__
    for f in dataclasses.fields(self):
      v, want, dims = getattr(self, f.name), f.metadata["dtype"], f.metadata["dims"]
      spec = f"{want.name} [{', '.join(dims)}]"
      if v is None:
        raise ValueError(f"{name}.{f.name} is missing; it must be a {spec} array")
      v = np.asarray(v)
      if v.ndim != len(dims):
        raise ValueError(f"{name}.{f.name} has shape {v.shape}; it must be {spec}")
      if not np.can_cast(v.dtype, want, "same_kind"):
        raise ValueError(f"{name}.{f.name} has dtype {v.dtype}; it must be {spec}")
      object.__setattr__(self, f.name, v.astype(want, copy=False))
      if v.shape[0] != self.tokens.shape[0]:
        raise ValueError(f"{name}.{f.name} has {v.shape[0]} rows but tokens has "
                         f"{self.tokens.shape[0]}")
      if len(dims) > 1 and v.shape[1] != self.tokens.shape[1]:
        raise ValueError(f"{name}.{f.name} has {v.shape[1]} tokens a row but tokens has "
                         f"{self.tokens.shape[1]}")

  @classmethod
  def step_fields(cls) -> dict[str, tuple[np.dtype, tuple[str, ...]]]:
    """{field: (dtype, axes)} of the fields the compiled step reads, in declaration order."""
    return {f.name: (f.metadata["dtype"], f.metadata["dims"])
            for f in dataclasses.fields(cls) if not f.metadata["host"]}

  @property
  def num_rows(self) -> int:
    return int(self.tokens.shape[0])

  @property
  def row_len(self) -> int:
    return int(self.tokens.shape[1])

  def as_dict(self) -> dict[str, np.ndarray]:
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

  def step_inputs(self) -> dict[str, np.ndarray]:
    """The fields the compiled step reads (host-only ones, e.g. `length`, left out)."""
    return {k: getattr(self, k) for k in self.step_fields()}

  def replace(self, **fields):
    return dataclasses.replace(self, **fields)

  def take_rows(self, idx):
    """The rows `idx` (indices or a boolean mask over rows), as a batch of the same layout."""
    return type(self)(**{k: v[idx] for k, v in self.as_dict().items()})

  def pad_rows(self, rows: int, pad_id: int = 0):
    """Appends empty rows (tokens `pad_id`, every other field its `column` pad: mask 0,
    advantage 0, prompt -1) up to `rows` rows."""
    n = self.num_rows
    if n > rows:
      raise ValueError(f"batch has {n} rows, more than the {rows} requested")
    out = {}
    for f in dataclasses.fields(self):
      v = getattr(self, f.name)
      fill = pad_id if f.name == "tokens" else f.metadata["pad"]
      out[f.name] = np.concatenate([v, np.full((rows - n,) + v.shape[1:], fill, v.dtype)])
    return type(self)(**out)


@dataclasses.dataclass(frozen=True, eq=False)
class Batch(Rows):
  """One row per trajectory, right-padded to T tokens."""
  tokens: np.ndarray = column(np.int32, "N", "T")      # prompt + response, then pad_id
  # 1 on policy-generated response tokens only (Trajectory.loss_mask); 0 on the prompt, on
  # `<information>` observations and on padding
  loss_mask: np.ndarray = column(np.float32, "N", "T")
  # behaviour log-prob of tokens[n, t] given tokens[n, :t] (aligned to the token it scores;
  # 0 where loss_mask is 0)
  old_logp: np.ndarray = column(np.float32, "N", "T")
  advantages: np.ndarray = column(np.float32, "N")
  loss_weight: np.ndarray = column(np.float32, "N")     # rl.roles.<name>.loss_weight; 0 on padding
  role: np.ndarray = column(np.int32, "N")              # role id: its index in the game's roles
  # the prompt the row belongs to (a mini-batch keeps a prompt's rows together); -1 on padding
  prompt: np.ndarray = column(np.int32, "N", pad=-1)
  length: np.ndarray = column(np.int32, "N", host=True)  # tokens before padding (the packer's)


def bucket_length(n: int, bucket: int = 128, max_len: Optional[int] = None) -> int:
  """n rounded up to a multiple of `bucket`, capped at max_len (itself used as the top bucket)."""
  t = max(bucket, int(math.ceil(n / bucket)) * bucket)
  return t if max_len is None else min(t, max_len)


def _row(traj: Trajectory, T: int, pad_id: int):
  p, r = list(traj.prompt_ids), list(traj.response_ids)
  if not (len(r) == len(traj.loss_mask) == len(traj.logprobs)):
    raise ValueError(f"trajectory response_ids ({len(r)}), loss_mask ({len(traj.loss_mask)}) and "
                     f"logprobs ({len(traj.logprobs)}) must have the same length")
  tokens = np.full(T, pad_id, np.int32)
  mask = np.zeros(T, np.float32)
  logp = np.zeros(T, np.float32)
  seq = (p + r)[:T]
  tokens[:len(seq)] = seq
  n_resp = max(0, len(seq) - len(p))
  if n_resp:
    m = np.asarray(traj.loss_mask[:n_resp], np.float32)
    mask[len(p):len(seq)] = m
    logp[len(p):len(seq)] = np.where(m > 0, np.asarray(traj.logprobs[:n_resp], np.float32), 0.0)
  mask[0] = logp[0] = 0.0   # the first token has no context to score it (empty prompts only)
  return tokens, mask, logp, len(seq)


def make_batch(trajectories: Sequence[Trajectory], advantages: Sequence[float],
               roles: Sequence[int], *, prompt_index: Optional[Sequence[int]] = None,
               loss_weights: Optional[Sequence[float]] = None, bucket: int = 128,
               max_len: Optional[int] = None, pad_id: int = 0) -> Batch:
  """Pads trajectories into one `Batch` (its fields are listed on the class).

  Sequences longer than `max_len` lose their tail (a warning names how many); a prompt longer
  than `max_len` leaves a row with no loss tokens. `prompt_index` defaults to one prompt per row,
  `loss_weights` (each row's role loss weight, `ssp_jax.rl.roles.RoleTable.loss_weights`) to 1.
  """
  n = len(trajectories)
  if len(advantages) != n or len(roles) != n:
    raise ValueError(f"got {n} trajectories, {len(advantages)} advantages and {len(roles)} roles;"
                     " pass one advantage and one role per trajectory")
  longest = max((len(t.prompt_ids) + len(t.response_ids) for t in trajectories), default=1)
  T = bucket_length(longest, bucket, max_len)
  if longest > T:
    cut = sum(len(t.prompt_ids) + len(t.response_ids) > T for t in trajectories)
    warnings.warn(f"{cut} of {n} sequences are longer than max_len={T} and were truncated")
  rows = [_row(t, T, pad_id) for t in trajectories]
  return Batch(
      tokens=np.stack([r[0] for r in rows]) if rows else np.zeros((0, T), np.int32),
      loss_mask=np.stack([r[1] for r in rows]) if rows else np.zeros((0, T), np.float32),
      old_logp=np.stack([r[2] for r in rows]) if rows else np.zeros((0, T), np.float32),
      advantages=np.asarray(advantages, np.float32).reshape(n),
      loss_weight=(np.ones(n, np.float32) if loss_weights is None
                   else np.asarray(loss_weights, np.float32).reshape(n)),
      role=np.asarray(roles, np.int32).reshape(n),
      prompt=(np.arange(n, dtype=np.int32) if prompt_index is None
              else np.asarray(prompt_index, np.int32).reshape(n)),
      length=np.asarray([r[3] for r in rows], np.int32).reshape(n))


def split_mini_batches(batch: Batch, num_mini_batches: int, *, row_multiple: int = 1,
                       seed: Optional[int] = None, pad_id: int = 0) -> list[Batch]:
  """Splits a batch into `num_mini_batches` by prompt (a prompt's rows stay together).

  Prompts are dealt out in order (shuffled first when `seed` is given); every mini-batch is
  padded to the same row count, a multiple of `row_multiple`, so one compiled step serves all.
  """
  prompts = np.unique(batch.prompt[batch.prompt >= 0])
  if seed is not None:
    prompts = np.random.default_rng(seed).permutation(prompts)
  groups = np.array_split(prompts, max(1, min(num_mini_batches, len(prompts))))
  parts = [batch.take_rows(np.flatnonzero(np.isin(batch.prompt, g))) for g in groups]
  most = max(p.num_rows for p in parts)
  rows = int(math.ceil(most / row_multiple)) * row_multiple
  return [p.pad_rows(rows, pad_id) for p in parts]


def num_mini_batches(num_prompts: int, mini_batch_size: int) -> int:
  """ceil(prompts / mini_batch_size): 256 prompts with mini-batch 128 -> 2 updates."""
  if mini_batch_size <= 0:
    raise ValueError(f"mini_batch_size must be > 0, got {mini_batch_size}")
  return max(1, int(math.ceil(num_prompts / mini_batch_size)))
