"""Token-level policy-gradient loss: PPO clip (low/high), dual clip, KL to a reference, entropy.

Formulas follow veRL cb809d66 (`core_algos.compute_policy_loss_vanilla`, `kl_penalty`,
`agg_loss`). Shapes: N sequences, T tokens; `mask_NT` is 1 on the tokens the
loss sees (policy-generated response tokens) and 0 on prompt, observation and padding tokens.

Every masked-out token is replaced by a constant before any arithmetic, so its log-probs
(current, old or reference) can hold anything, even inf/NaN, and still change nothing: neither
the loss nor the gradient (which is exactly 0 there).

Aggregation is written as per-token weights `w_NT` (`aggregation_weights`) with
`loss = sum(w_NT * loss_NT)`. The learner computes the weights once over a whole mini-batch and
sums over micro-batches, which gives exactly the mini-batch's token-mean (not a mean of
per-micro-batch means).
"""
from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp

from ssp_jax.rl.registry import KL_PENALTIES, LOSS_AGGREGATIONS

LOG_RATIO_CLAMP = 20.0   # ratio = exp(clamp(logp - old_logp, +-20))
KL_CLAMP = 10.0          # k3 value clamp (veRL low_var_kl)


# --------------------------------------------------------------------------------------------
# KL penalties: per-token estimates of KL(pi || pi_ref) from the sampled token's log-probs.
# --------------------------------------------------------------------------------------------
@KL_PENALTIES.register("k1", "kl")
def kl_k1(logp_NT: jax.Array, ref_logp_NT: jax.Array) -> jax.Array:
  return logp_NT - ref_logp_NT


@KL_PENALTIES.register("k2", "mse")
def kl_k2(logp_NT: jax.Array, ref_logp_NT: jax.Array) -> jax.Array:
  return 0.5 * jnp.square(logp_NT - ref_logp_NT)


@KL_PENALTIES.register("k3", "low_var_kl")
def kl_k3(logp_NT: jax.Array, ref_logp_NT: jax.Array) -> jax.Array:
  """exp(ref - logp) - (ref - logp) - 1, clamped to [-10, 10] (log-ratio first to +-20)."""
  kl = jnp.clip(ref_logp_NT - logp_NT, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
  return jnp.clip(jnp.exp(kl) - kl - 1.0, -KL_CLAMP, KL_CLAMP)


# --------------------------------------------------------------------------------------------
# Aggregations as per-token weights. A "sequence" is one trajectory: a row of a padded batch,
# or one segment of a packed row. `seq_tokens_NT` holds, on every token, the number of loss
# tokens of the sequence that token belongs to (default: its row's count, the padded layout),
# so the same formulas serve both layouts. Sequences without loss tokens are not counted.
# --------------------------------------------------------------------------------------------
def row_seq_tokens(mask_NT: jax.Array) -> jax.Array:
  """seq_tokens of the padded layout (one sequence per row): the row's loss-token count."""
  m = mask_NT.astype(jnp.float32)
  return jnp.broadcast_to(m.sum(axis=-1, keepdims=True), m.shape)


def _per_seq(mask_NT, seq_tokens_NT):
  """(mask as float, 1 / own sequence's loss-token count on loss tokens, number of sequences)."""
  m = mask_NT.astype(jnp.float32)
  st = row_seq_tokens(m) if seq_tokens_NT is None else seq_tokens_NT.astype(jnp.float32)
  inv = m / jnp.maximum(st, 1.0)
  # Each sequence's loss tokens sum to exactly 1 in `inv`; rounding removes float drift.
  n_seq = jnp.maximum(jnp.round(inv.sum()), 1.0)
  return m, inv, n_seq


@LOSS_AGGREGATIONS.register("token-mean")
def token_mean_weights(mask_NT: jax.Array, seq_tokens_NT: Optional[jax.Array] = None) -> jax.Array:
  """Mean over all unmasked tokens of the batch (veRL token-mean)."""
  del seq_tokens_NT
  m = mask_NT.astype(jnp.float32)
  return m / jnp.maximum(m.sum(), 1.0)


@LOSS_AGGREGATIONS.register("seq-mean-token-mean")
def seq_mean_token_mean_weights(mask_NT: jax.Array,
                                seq_tokens_NT: Optional[jax.Array] = None) -> jax.Array:
  """Mean over sequences with loss tokens of each sequence's token mean (veRL
  seq-mean-token-mean)."""
  _, inv, n_seq = _per_seq(mask_NT, seq_tokens_NT)
  return inv / n_seq


@LOSS_AGGREGATIONS.register("seq-mean-token-sum")
def seq_mean_token_sum_weights(mask_NT: jax.Array,
                               seq_tokens_NT: Optional[jax.Array] = None) -> jax.Array:
  """Mean over sequences with loss tokens of each sequence's token sum."""
  m, _, n_seq = _per_seq(mask_NT, seq_tokens_NT)
  return m / n_seq


def aggregation_weights(mask_NT: jax.Array, agg: str,
                        row_weights_N: Optional[jax.Array] = None,
                        seq_tokens_NT: Optional[jax.Array] = None) -> jax.Array:
  """Per-token weights [..., T] of aggregation `agg`, times optional per-sequence loss weights.

  Leading dims are all rows (e.g. [micro-batches, rows, T]); T is the last axis.
  row_weights_N: [...] one weight per row, or [..., T] one per token (packed rows, where each
    token carries its own sequence's weight).
  seq_tokens_NT: see `row_seq_tokens`; give it for packed rows.
  """
  w_NT = LOSS_AGGREGATIONS.get(agg)(mask_NT, seq_tokens_NT)
  if row_weights_N is not None:
    rw = row_weights_N.astype(jnp.float32)
    w_NT = w_NT * (rw if rw.ndim == w_NT.ndim else rw[..., None])
  return w_NT


# --------------------------------------------------------------------------------------------
# The loss
# --------------------------------------------------------------------------------------------
def ppo_token_losses(logp_NT, old_logp_NT, adv_N, *, clip_low: float, clip_high: float,
                     dual_clip: Optional[float]) -> dict[str, jax.Array]:
  """Per-token clipped surrogate (to minimise) and clip indicators, all [N, T]."""
  log_ratio = jnp.clip(logp_NT - old_logp_NT, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
  ratio = jnp.exp(log_ratio)
  adv = adv_N.astype(jnp.float32)
  adv = adv if adv.ndim == logp_NT.ndim else adv[..., None]
  loss1 = -adv * ratio
  loss2 = -adv * jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
  clipped = jnp.maximum(loss1, loss2)
  out = {"pg": clipped, "clipfrac": (loss2 > loss1).astype(jnp.float32),
         "ppo_kl": -log_ratio, "clipfrac_lower": jnp.zeros_like(clipped)}
  if dual_clip is not None:
    if dual_clip <= 1.0:
      raise ValueError(f"dual_clip must be > 1 (veRL clip_ratio_c), got {dual_clip}; "
                       "use None to turn it off")
    loss3 = -adv * dual_clip
    dual = jnp.minimum(loss3, clipped)
    out["pg"] = jnp.where(adv < 0, dual, clipped)
    out["clipfrac_lower"] = ((clipped > loss3) & (adv < 0)).astype(jnp.float32)
  return out


def weighted_policy_loss(logp_NT, old_logp_NT, ref_logp_NT, adv_N, mask_NT, loss_w_NT,
                         metric_w_NT, *, clip_low: float = 0.2, clip_high: float = 0.285,
                         dual_clip: Optional[float] = 3.0, kl_coef: float = 0.01,
                         kl_type: str = "k3", entropy_NT: Optional[jax.Array] = None,
                         entropy_coef: float = 0.0) -> tuple[jax.Array, dict[str, jax.Array]]:
  """sum(loss_w * (pg + kl_coef * kl - entropy_coef * entropy)); metrics are sums weighted by
  `metric_w_NT` (token-mean weights), so they add up across micro-batches."""
  keep = mask_NT > 0
  zero = jnp.zeros_like(logp_NT, jnp.float32)
  logp = jnp.where(keep, logp_NT.astype(jnp.float32), zero)
  old = jnp.where(keep, old_logp_NT.astype(jnp.float32), zero)
  # A fully masked row's advantage is never read (a NaN there changes nothing); a NaN
  # advantage on a row with loss tokens makes the loss NaN and the learner skips the update.
  # Packed rows carry one advantage per token ([N, T], its segment's), masked the same way.
  if adv_N.ndim == logp_NT.ndim:
    adv_N = jnp.where(keep, adv_N, 0.0)
  else:
    adv_N = jnp.where(jnp.any(keep, axis=-1), adv_N, 0.0)
  wsum = lambda w, x: jnp.sum(jnp.where(keep, w * x, 0.0))
  terms = ppo_token_losses(logp, old, adv_N, clip_low=clip_low, clip_high=clip_high,
                           dual_clip=dual_clip)
  pg_loss = wsum(loss_w_NT, terms["pg"])
  loss = pg_loss
  metrics = {k: wsum(metric_w_NT, terms[k]) for k in ("clipfrac", "clipfrac_lower", "ppo_kl")}
  metrics["pg_loss"] = pg_loss
  if kl_coef != 0.0:
    if ref_logp_NT is None:
      raise ValueError("kl_coef != 0 needs ref_logp; pass reference log-probs or set kl_coef=0")
    ref = jnp.where(keep, ref_logp_NT.astype(jnp.float32), zero)
    kl_loss = wsum(loss_w_NT, KL_PENALTIES.get(kl_type)(logp, ref))
    loss = loss + kl_coef * kl_loss
    metrics["kl_loss"] = kl_loss
  if entropy_NT is not None:
    ent = jnp.where(keep, entropy_NT.astype(jnp.float32), zero)
    metrics["entropy"] = wsum(metric_w_NT, ent)
    if entropy_coef != 0.0:
      loss = loss - entropy_coef * wsum(loss_w_NT, ent)
  metrics["loss"] = loss
  return loss, metrics


def policy_loss(logp: Any, old_logp: Any, ref_logp: Any, advantages: Any, mask: Any, *,
                clip_low: float = 0.2, clip_high: float = 0.285,
                dual_clip: Optional[float] = 3.0, kl_coef: float = 0.01, kl_type: str = "k3",
                agg: str = "token-mean", entropy: Any = None, entropy_coef: float = 0.0,
                row_weights: Any = None,
                seq_tokens: Any = None) -> tuple[jax.Array, dict[str, jax.Array]]:
  """PPO-clip policy loss with dual clip and a KL term, aggregated by `agg`.

  Args:
    logp, old_logp, ref_logp: [N, T] log-probs of the sampled tokens under the current,
      behaviour and reference policies (`ref_logp` may be None when kl_coef == 0).
    advantages: [N] one advantage per row (broadcast over its tokens), or [N, T] one per token
      (packed rows: each token carries its segment's advantage).
    mask: [N, T] 1 on tokens that count, 0 elsewhere.
    clip_low, clip_high: ratio clipped to [1 - clip_low, 1 + clip_high].
    dual_clip: c > 1 bounds the loss of negative-advantage tokens by -A * c (None: off).
    kl_coef, kl_type: weight and estimator ("k1"/"kl", "k2"/"mse", "k3"/"low_var_kl").
    agg: "token-mean", "seq-mean-token-mean" or "seq-mean-token-sum".
    entropy: optional [N, T] per-token entropy (logged; subtracted with entropy_coef).
    row_weights: optional [N] per-row (or [N, T] per-token) loss weight (e.g. per role).
    seq_tokens: optional [N, T] loss-token count of each token's sequence (packed rows, see
      `row_seq_tokens`); default: one sequence per row.
  Returns:
    (scalar loss, metrics dict of scalars: loss, pg_loss, kl_loss, clipfrac, clipfrac_lower,
    ppo_kl, entropy; clip/kl/entropy metrics are token-means over the mask).
  """
  mask_NT = jnp.asarray(mask)
  logp_NT = jnp.asarray(logp)
  if logp_NT.ndim != 2 or mask_NT.shape != logp_NT.shape:
    raise ValueError(f"logp {logp_NT.shape} and mask {mask_NT.shape} must be [N, T]")
  loss_w = aggregation_weights(mask_NT, agg, None if row_weights is None
                               else jnp.asarray(row_weights),
                               None if seq_tokens is None else jnp.asarray(seq_tokens))
  metric_w = token_mean_weights(mask_NT)
  return weighted_policy_loss(
      logp_NT, jnp.asarray(old_logp), None if ref_logp is None else jnp.asarray(ref_logp),
      jnp.asarray(advantages), mask_NT, loss_w, metric_w, clip_low=clip_low,
      clip_high=clip_high, dual_clip=dual_clip, kl_coef=kl_coef, kl_type=kl_type,
      entropy_NT=None if entropy is None else jnp.asarray(entropy), entropy_coef=entropy_coef)
