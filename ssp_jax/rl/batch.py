"""Trajectories -> padded numpy training batches (host side, no jax).

A batch is a dict of numpy arrays:
  tokens      int32   [N, T]  prompt + response, right-padded with `pad_id`
  loss_mask   float32 [N, T]  1 on policy-generated response tokens only (Trajectory.loss_mask);
                              0 on the prompt, on `<information>` observations and on padding
  old_logp    float32 [N, T]  behaviour log-prob of tokens[n, t] given tokens[n, :t] (aligned to
                              the token it scores; 0 where loss_mask is 0)
  advantages  float32 [N]
  loss_weight float32 [N]     the role's loss weight (`rl.roles.<name>.loss_weight`; 0 on padding)
  role        int32   [N]     role id per sequence (its index in the game's declared roles)
  prompt      int32   [N]     index of the prompt a row belongs to (mini-batches keep a prompt's
                              rows together); -1 on padding rows
  length      int32   [N]     tokens of the row before padding (host only: the packer reads it)

Right padding keeps positions 0..T-1 and plain causal attention valid (pads come after every
real token), so the learner can use flash attention without segment ids. T is rounded up to a
multiple of `bucket` (128 by default) so the compiled step sees only a few shapes. With
`rl.pack` (the default) the learner packs these rows into fewer, full rows (`ssp_jax.rl.pack`).
"""
from __future__ import annotations

import math
import warnings
from typing import Optional, Sequence

import numpy as np

from ssp_jax.types import Trajectory

Batch = dict[str, np.ndarray]
ROW_KEYS = ("advantages", "loss_weight", "role", "prompt", "length")


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
  """Pads trajectories into one batch (see the module docstring for the fields).

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
  return {
      "tokens": np.stack([r[0] for r in rows]) if rows else np.zeros((0, T), np.int32),
      "loss_mask": np.stack([r[1] for r in rows]) if rows else np.zeros((0, T), np.float32),
      "old_logp": np.stack([r[2] for r in rows]) if rows else np.zeros((0, T), np.float32),
      "advantages": np.asarray(advantages, np.float32).reshape(n),
      "loss_weight": (np.ones(n, np.float32) if loss_weights is None
                      else np.asarray(loss_weights, np.float32).reshape(n)),
      "role": np.asarray(roles, np.int32).reshape(n),
      "prompt": (np.arange(n, dtype=np.int32) if prompt_index is None
                 else np.asarray(prompt_index, np.int32).reshape(n)),
      "length": np.asarray([r[3] for r in rows], np.int32).reshape(n),
  }


def pad_rows(batch: Batch, rows: int, pad_id: int = 0) -> Batch:
  """Appends empty rows (mask 0, advantage 0, prompt -1) up to `rows` rows."""
  n = batch["tokens"].shape[0]
  if n > rows:
    raise ValueError(f"batch has {n} rows, more than the {rows} requested")
  out = {}
  for k, v in batch.items():
    fill = pad_id if k == "tokens" else (-1 if k == "prompt" else 0)
    pad = np.full((rows - n,) + v.shape[1:], fill, v.dtype)
    out[k] = np.concatenate([v, pad], axis=0)
  return out


def take_rows(batch: Batch, idx: np.ndarray) -> Batch:
  return {k: v[idx] for k, v in batch.items()}


def split_mini_batches(batch: Batch, num_mini_batches: int, *, row_multiple: int = 1,
                       seed: Optional[int] = None, pad_id: int = 0) -> list[Batch]:
  """Splits a batch into `num_mini_batches` by prompt (a prompt's rows stay together).

  Prompts are dealt out in order (shuffled first when `seed` is given); every mini-batch is
  padded to the same row count, a multiple of `row_multiple`, so one compiled step serves all.
  """
  prompts = np.unique(batch["prompt"][batch["prompt"] >= 0])
  if seed is not None:
    prompts = np.random.default_rng(seed).permutation(prompts)
  groups = np.array_split(prompts, max(1, min(num_mini_batches, len(prompts))))
  parts = [take_rows(batch, np.flatnonzero(np.isin(batch["prompt"], g))) for g in groups]
  most = max(p["tokens"].shape[0] for p in parts)
  rows = int(math.ceil(most / row_multiple)) * row_multiple
  return [pad_rows(p, rows, pad_id) for p in parts]


def num_mini_batches(num_prompts: int, mini_batch_size: int) -> int:
  """ceil(prompts / mini_batch_size): 256 prompts with mini-batch 128 -> 2 updates."""
  if mini_batch_size <= 0:
    raise ValueError(f"mini_batch_size must be > 0, got {mini_batch_size}")
  return max(1, int(math.ceil(num_prompts / mini_batch_size)))


def num_loss_tokens(batch: Batch) -> int:
  return int(batch["loss_mask"].sum())
