"""Supervised pass over demonstration trajectories: the token-mean negative log-likelihood of the
policy tokens (observation tokens are context only), AdamW, demonstrations packed into rows of one
length (one compiled step; attention stays inside each demonstration).

  params, log = sft(model_cfg, params, trajectories, epochs=2, lr=5e-5, batch_size=4)
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

import models
from ssp_jax.rl import batch as batch_lib
from ssp_jax.rl import pack as pack_lib
from ssp_jax.rl.config import get_rl_config
from ssp_jax.rl.learner import StepConfig, sequence_logprobs
from ssp_jax.types import Trajectory

log = logging.getLogger(__name__)


def nll_loss(params, tokens_BT, mask_BT, segment_ids_BT, positions_BT, *,
             cfg: models.ModelConfig, sc: StepConfig):
  """Mean NLL over the tokens where mask_BT is 1 (the aligned log-prob of token t at t), on
  packed rows (attention inside each segment)."""
  logp_BT, _ = sequence_logprobs(cfg, params, tokens_BT, sc, segment_ids_BT=segment_ids_BT,
                                 positions_BT=positions_BT)
  return -jnp.sum(logp_BT * mask_BT) / jnp.maximum(jnp.sum(mask_BT), 1.0)


@functools.lru_cache(maxsize=8)
def _step_fn(cfg: models.ModelConfig, sc: StepConfig, tx: optax.GradientTransformation):
  grad = jax.value_and_grad(functools.partial(nll_loss, cfg=cfg, sc=sc))

  def step(params, opt_state, rows):
    loss, g = grad(params, *rows)
    updates, opt_state = tx.update(g, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss
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
        compute_dtype: str = "float32", remat: str = "full",
        progress: bool = True) -> tuple[Any, list[float]]:
  """Trains `params` on `trajs` for `epochs`; returns (params, mean loss per epoch). `remat`
  (models.decoder.REMAT_POLICIES) trades compute for activation memory."""
  rl = get_rl_config()
  rl.remat, rl.compute_dtype, rl.logprob_chunk = remat, compute_dtype, 256
  sc = StepConfig.from_config(rl)
  tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(lr, weight_decay=0.0))
  step = _step_fn(cfg, sc, tx)
  params = jax.tree.map(jnp.array, params)   # a private copy: the step donates it
  opt_state = tx.init(params)
  rng = np.random.default_rng(seed)
  rows, stats = packed_rows(trajs, max_len, sc.max_segments)
  log.info("warm start: %d rows of %d tokens, fill %.2f", rows[0].shape[0], max_len,
           stats["fill_rate"])
  epoch_losses = []
  bar = None
  if progress:
    from tqdm import tqdm
    bar = tqdm(total=epochs * int(np.ceil(rows[0].shape[0] / batch_size)), desc="warm start",
               unit="batch", dynamic_ncols=True)
  for _ in range(epochs):
    losses = []
    for b in batches(rows, batch_size, rng):
      params, opt_state, loss = step(params, opt_state, tuple(jnp.asarray(x) for x in b))
      losses.append(float(loss))
      if bar is not None:
        bar.update(1)
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    epoch_losses.append(float(np.mean(losses)) if losses else float("nan"))
  if bar is not None:
    bar.close()
  return params, epoch_losses
