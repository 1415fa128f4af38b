"""Supervised pass over demonstration trajectories: the token-mean negative log-likelihood of the
policy tokens (observation tokens are context only), AdamW, demonstrations packed into rows of one
length (one compiled step; attention stays inside each demonstration).

The output projection (a [D, V] GEMM, about a sixth of the 135M default's forward FLOPs) runs only
on the scored positions: the loss tokens' hidden states are gathered first (a fixed count per
batch, `num_scored`, so one compiled step), the rest of the row being context. Same loss and
gradient as scoring every position and masking.

  params, log = sft(model_cfg, params, trajectories, epochs=2, lr=5e-5, batch_size=4)
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

import models
from ssp_jax.rl import batch as batch_lib
from ssp_jax.rl import pack as pack_lib
from ssp_jax.rl.config import get_rl_config
from ssp_jax.rl import train_state as ts
from ssp_jax.rl.learner import StepConfig, chunked_logprobs, lm_head_weight
from ssp_jax.types import Trajectory

log = logging.getLogger(__name__)


def nll_loss(params, tokens_BT, mask_BT, segment_ids_BT, positions_BT, *,
             cfg: models.ModelConfig, sc: StepConfig, num_scored: int,
             frozen_layers: int = 0):
  """Mean NLL over the tokens where mask_BT is 1 (token t scored from the hidden state at t - 1),
  on packed rows (attention inside each segment). Only the first `num_scored` such tokens of the
  batch go through the output projection: the caller makes it at least their count."""
  h_BTD = models.hidden_states(cfg, params, tokens_BT, dtype=ts.dtype_of(sc.compute_dtype),
                               remat=sc.remat, attn_impl=sc.attn_impl,
                               segment_ids_BT=segment_ids_BT, positions_BT=positions_BT,
                               max_segments=sc.max_segments, attn_chunk=sc.attn_chunk,
                               frozen_layers=frozen_layers)
  D = h_BTD.shape[-1]
  h_MD = h_BTD[:, :-1].reshape(-1, D)               # M = B * (T - 1) predicting positions
  target_M = jnp.asarray(tokens_BT)[:, 1:].reshape(-1)
  weight_M = jnp.asarray(mask_BT)[:, 1:].reshape(-1)
  idx_N = jnp.nonzero(weight_M > 0, size=num_scored, fill_value=0)[0]
  weight_N = jnp.where(jnp.arange(num_scored) < jnp.sum(weight_M > 0), weight_M[idx_N], 0.0)
  logp_1N, _ = chunked_logprobs(lm_head_weight(cfg, params), h_MD[idx_N][None],
                                target_M[idx_N][None], temperature=sc.temperature,
                                chunk=sc.logprob_chunk)
  return -jnp.sum(logp_1N[0] * weight_N) / jnp.maximum(jnp.sum(mask_BT), 1.0)


def num_scored(mask_RT: np.ndarray, batch_size: int, multiple: int = 128) -> int:
  """Scored positions a batch of `batch_size` rows can hold at most (the largest rows' loss
  tokens), rounded up to `multiple`: the static size of `nll_loss`'s gather."""
  per_row = np.sort((mask_RT[:, 1:] > 0).sum(axis=1))[::-1]
  n = int(per_row[:batch_size].sum())
  return max(multiple, -(-n // multiple) * multiple)


@functools.lru_cache(maxsize=8)
def _step_fn(cfg: models.ModelConfig, sc: StepConfig, tx: optax.GradientTransformation,
             scored: int, frozen_layers: int = 0):
  grad = jax.value_and_grad(functools.partial(nll_loss, cfg=cfg, sc=sc, num_scored=scored,
                                              frozen_layers=frozen_layers))

  def step(params, opt_state, rows):
    """One update, skipped (params and optimizer state untouched) when the loss or the gradient
    norm is not finite, as the RL step does; returns the loss and the gradient norm too."""
    loss, g = grad(params, *rows)
    grad_norm = optax.global_norm(g)
    ok = jnp.isfinite(loss) & jnp.isfinite(grad_norm)

    def apply(args):
      g, opt_state, params = args
      updates, opt_state = tx.update(g, opt_state, params)
      return optax.apply_updates(params, updates), opt_state
    params, opt_state = jax.lax.cond(ok, apply, lambda args: (args[2], args[1]),
                                     (g, opt_state, params))
    return params, opt_state, loss, grad_norm
  return jax.jit(step, donate_argnums=(0, 1))


def packed_rows(trajs: Sequence[Trajectory], row_len: int,
                max_segments: int = 64) -> tuple[tuple[np.ndarray, ...], dict]:
  """The demonstrations packed end to end into rows of `row_len` tokens (one compiled shape;
  `ssp_jax.rl.pack`): (tokens, loss_mask, segment_ids, positions) [R, row_len] and the packer's
  stats. Demonstrations longer than a row are dropped."""
  trajs = [t for t in trajs if len(t.prompt_ids) + len(t.response_ids) <= row_len]
  if not trajs:
    raise ValueError(f"every demonstration is longer than warmstart.max_len={row_len}")
  b = batch_lib.make_batch(trajs, np.zeros(len(trajs)), np.zeros(len(trajs), np.int32),
                           bucket=row_len, max_len=row_len)
  pb, _, stats = pack_lib.pack_batch(b, row_len, max_segments=max_segments)
  return (pb.tokens, pb.loss_mask.astype(np.float32), pb.segment_ids, pb.positions), stats


def batches(rows: tuple[np.ndarray, ...], batch_size: int,
            rng: np.random.Generator) -> list[tuple[np.ndarray, ...]]:
  """Packed rows in a shuffled order, cut into batches of `batch_size` (a short last batch
  repeats rows, so every batch has the same shape)."""
  n = rows[0].shape[0]
  order = rng.permutation(n)
  order = np.concatenate([order, order[:(-n) % batch_size]]) if n % batch_size else order
  return [tuple(r[order[k:k + batch_size]] for r in rows)
          for k in range(0, len(order), batch_size)]


def sft(cfg: models.ModelConfig, params: Any, trajs: Sequence[Trajectory], *, epochs: int,
        lr: float, batch_size: int, max_len: int = 2048, seed: int = 0,
        compute_dtype: str = "float32", remat: str = "full", train_layers: int = 0,
        attn_impl: str = "xla", attn_chunk: int = 512,
        progress: bool = True) -> tuple[Any, list[float]]:
  """Trains `params` on `trajs` for `epochs`; returns (params, mean loss per epoch). `remat`
  (models.decoder.REMAT_POLICIES) trades compute for activation memory. `train_layers` > 0
  trains only the top this many layers, the final norm and the output projection (the layers
  below and the embedding lookup are frozen, so the backward pass stops at them). `attn_impl`
  and `attn_chunk` are the run's `rl` ones (models.decoder.hidden_states)."""
  rl = get_rl_config()
  rl.remat, rl.compute_dtype, rl.logprob_chunk = remat, compute_dtype, 256
  rl.attn_impl, rl.attn_chunk = attn_impl, attn_chunk
  sc = StepConfig.from_config(rl)
  tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(lr, weight_decay=0.0))
  rows, stats = packed_rows(trajs, max_len, sc.max_segments)
  frozen = cfg.num_layers - train_layers if 0 < train_layers < cfg.num_layers else 0
  step = _step_fn(cfg, sc, tx, num_scored(rows[1], batch_size), frozen)
  params = jax.tree.map(jnp.array, params)   # a private copy: the step donates it
  opt_state = tx.init(params)
  rng = np.random.default_rng(seed)
  log.info("warm start: %d rows of %d tokens, fill %.2f", rows[0].shape[0], max_len,
           stats["fill_rate"])
  epoch_losses, skipped, seen = [], 0, 0
  bar = None
  if progress:
    from tqdm import tqdm
    bar = tqdm(total=epochs * int(np.ceil(rows[0].shape[0] / batch_size)), desc="warm start",
               unit="batch", dynamic_ncols=True)
  for _ in range(epochs):
    losses = []
    for b in batches(rows, batch_size, rng):
      params, opt_state, loss, grad_norm = step(params, opt_state,
                                                tuple(jnp.asarray(x) for x in b))
      loss, grad_norm = float(loss), float(grad_norm)
      seen += 1
      if np.isfinite(loss) and np.isfinite(grad_norm):
        losses.append(loss)
      else:
        skipped += 1
      if bar is not None:
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}")
    epoch_losses.append(float(np.mean(losses)) if losses else float("nan"))
  if bar is not None:
    bar.close()
  if skipped == seen:
    raise FloatingPointError(
        f"warm start: all {seen} batches had a non-finite loss or gradient, so the policy was "
        f"not trained; try rl.attn_impl=xla (the attention of the update and the warm start, "
        f"now {attn_impl!r}), rl.compute_dtype=float32 (now {compute_dtype!r}) or a smaller "
        f"warmstart.lr (now {lr})")
  if skipped:
    log.warning("warm start: %d of %d batches had a non-finite loss or gradient and were "
                "skipped (params untouched); the epoch losses are over the others", skipped, seen)
  return params, epoch_losses


def learned(epoch_losses: Sequence[float], fall: float = 0.05) -> Optional[str]:
  """None when the last epoch's mean loss is at least `fall` (a fraction) below the first's, or
  there is one epoch; else a message saying the warm start did not learn. A warm start on the
  demonstrations' fixed texts falls a lot (0.41 -> 0.035 over 2 epochs, 0.5B on an H200); a
  flat loss is a fault (cuDNN gradients at padding tokens gave 1.4508 -> 1.4483, 2026-12-05)."""
  if len(epoch_losses) < 2:
    return None
  first, last = float(epoch_losses[0]), float(epoch_losses[-1])
  if np.isfinite(first) and np.isfinite(last) and last <= (1 - fall) * first:
    return None
  return (f"warm start: the loss did not fall ({first:.4f} -> {last:.4f} over "
          f"{len(epoch_losses)} epochs), so the policy learned little from its demonstrations; "
          f"check the warm start's lr (warmstart.lr) and the attention (rl.attn_impl=xla "
          f"rules out the fused kernels), or set warmstart.enabled=False")
