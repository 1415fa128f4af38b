"""Supervised pass over demonstration trajectories: the token-mean negative log-likelihood of the
policy tokens (observation tokens are context only), AdamW, rows bucketed by length.

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
from ssp_jax.rl.config import get_rl_config
from ssp_jax.rl.learner import StepConfig, sequence_logprobs
from ssp_jax.types import Trajectory

log = logging.getLogger(__name__)


def nll_loss(params, tokens_BT, mask_BT, *, cfg: models.ModelConfig, sc: StepConfig):
  """Mean NLL over the tokens where mask_BT is 1 (the aligned log-prob of token t at t)."""
  logp_BT, _ = sequence_logprobs(cfg, params, tokens_BT, sc)
  return -jnp.sum(logp_BT * mask_BT) / jnp.maximum(jnp.sum(mask_BT), 1.0)


@functools.lru_cache(maxsize=8)
def _step_fn(cfg: models.ModelConfig, sc: StepConfig, tx: optax.GradientTransformation):
  grad = jax.value_and_grad(functools.partial(nll_loss, cfg=cfg, sc=sc))

  def step(params, opt_state, tokens_BT, mask_BT):
    loss, g = grad(params, tokens_BT, mask_BT)
    updates, opt_state = tx.update(g, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss
  return jax.jit(step, donate_argnums=(0, 1))


def batches(trajs: Sequence[Trajectory], batch_size: int, bucket: int, max_len: int,
            rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
  """Rows sorted by length, cut into batches of `batch_size`, each padded to a multiple of
  `bucket` (few distinct shapes, little padding), in a shuffled order. Rows longer than
  `max_len` are dropped."""
  trajs = [t for t in trajs if len(t.prompt_ids) + len(t.response_ids) <= max_len]
  order = sorted(range(len(trajs)), key=lambda i: len(trajs[i].prompt_ids) +
                 len(trajs[i].response_ids))
  out = []
  for k in range(0, len(order), batch_size):
    rows = [trajs[i] for i in order[k:k + batch_size]]
    rows = (rows * batch_size)[:batch_size]   # a short last batch repeats rows (fixed shapes)
    b = batch_lib.make_batch(rows, np.zeros(len(rows)), np.zeros(len(rows), np.int32),
                             bucket=bucket, max_len=max_len)
    out.append((b["tokens"], b["loss_mask"].astype(np.float32)))
  rng.shuffle(out)
  return out


def sft(cfg: models.ModelConfig, params: Any, trajs: Sequence[Trajectory], *, epochs: int,
        lr: float, batch_size: int, bucket: int = 256, max_len: int = 2048, seed: int = 0,
        compute_dtype: str = "float32", progress: bool = True) -> tuple[Any, list[float]]:
  """Trains `params` on `trajs` for `epochs`; returns (params, mean loss per epoch)."""
  rl = get_rl_config()
  rl.remat, rl.compute_dtype, rl.logprob_chunk = "none", compute_dtype, 256
  sc = StepConfig.from_config(rl)
  tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(lr, weight_decay=0.0))
  step = _step_fn(cfg, sc, tx)
  params = jax.tree.map(jnp.array, params)   # a private copy: the step donates it
  opt_state = tx.init(params)
  rng = np.random.default_rng(seed)
  epoch_losses = []
  bar = None
  if progress:
    from tqdm import tqdm
    bar = tqdm(total=epochs * int(np.ceil(len(trajs) / batch_size)), desc="warm start",
               unit="batch", dynamic_ncols=True)
  for _ in range(epochs):
    losses = []
    for tokens, mask in batches(trajs, batch_size, bucket, max_len, rng):
      params, opt_state, loss = step(params, opt_state, jnp.asarray(tokens), jnp.asarray(mask))
      losses.append(float(loss))
      if bar is not None:
        bar.update(1)
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    epoch_losses.append(float(np.mean(losses)) if losses else float("nan"))
  if bar is not None:
    bar.close()
  return params, epoch_losses
