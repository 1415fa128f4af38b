"""Next-token choice (greedy, temperature, top-k, top-p) and the recorded log-probability.

Recorded log-prob (what the learner gets as the behaviour policy's old log-prob):
  logprob = log_softmax(logits / T)[token] over the *full* vocabulary, T the sampling temperature
  (T = 1 for greedy). This is what veRL recomputes as old log-probs at temperature T; top-k / top-p
  truncation changes which token is drawn but is not renormalised into the recorded value, so the
  learner can recompute it from a plain forward pass.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class SamplingParams:
  """Static (hashable) sampling settings; a new combination compiles a new decode loop."""
  temperature: float = 1.0   # 0 = greedy
  top_p: float = 1.0         # nucleus mass kept; 1 = off
  top_k: int = 0             # keep the k most likely tokens; 0 = off

  def __post_init__(self):
    if self.temperature < 0:
      raise ValueError(f"temperature must be >= 0, got {self.temperature}")
    if not 0 < self.top_p <= 1:
      raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
    if self.top_k < 0:
      raise ValueError(f"top_k must be >= 0, got {self.top_k}")

  @property
  def greedy(self) -> bool:
    return self.temperature == 0


def _truncation_threshold(scaled_BV: jax.Array, p: SamplingParams) -> jax.Array:
  """[B, 1] lowest logit still allowed by top-k / top-p (ties at the threshold are kept)."""
  if p.top_k:
    sorted_BK = jax.lax.top_k(scaled_BV, p.top_k)[0]     # descending
  else:
    sorted_BK = -jnp.sort(-scaled_BV, axis=-1)
  if p.top_p < 1.0:
    probs_BK = jax.nn.softmax(sorted_BK, axis=-1)
    before_BK = jnp.cumsum(probs_BK, axis=-1) - probs_BK  # mass strictly above each token
    keep_BK = before_BK < p.top_p                          # the smallest set reaching top_p
    return jnp.min(jnp.where(keep_BK, sorted_BK, jnp.inf), axis=-1, keepdims=True)
  return sorted_BK[:, -1:]


def sample_next(logits_BV: jax.Array, key: jax.Array,
                p: SamplingParams) -> tuple[jax.Array, jax.Array]:
  """Returns (token_B int32, logprob_B float32). `logits_BV` are float32."""
  logits_BV = logits_BV.astype(jnp.float32)
  scaled_BV = logits_BV if p.greedy else logits_BV / p.temperature
  # log_softmax(scaled)[tok] = scaled[tok] - logsumexp(scaled): one reduction over the
  # vocabulary instead of a [B, V] log-softmax written out and gathered from.
  lse_B = jax.nn.logsumexp(scaled_BV, axis=-1)
  if p.greedy:
    tok_B = jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)
  else:
    if p.top_k or p.top_p < 1.0:
      thr_B1 = _truncation_threshold(scaled_BV, p)
      scaled_BV = jnp.where(scaled_BV >= thr_B1, scaled_BV, -jnp.inf)
    tok_B = jax.random.categorical(key, scaled_BV, axis=-1).astype(jnp.int32)
  picked_B = jnp.take_along_axis(logits_BV, tok_B[:, None], axis=-1)[:, 0]
  lp_B = (picked_B if p.greedy else picked_B / p.temperature) - lse_B
  return tok_B, lp_B
