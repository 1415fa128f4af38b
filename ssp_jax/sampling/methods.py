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


METHODS = ("inverse_cdf", "gumbel")


@dataclasses.dataclass(frozen=True)
class SamplingParams:
  """Static (hashable) sampling settings; a new combination compiles a new decode loop."""
  temperature: float = 1.0   # 0 = greedy
  top_p: float = 1.0         # nucleus mass kept; 1 = off
  top_k: int = 0             # keep the k most likely tokens; 0 = off
  method: str = "inverse_cdf"   # how a sampled token is drawn (greedy: the argmax either way):
                                # inverse_cdf (one uniform number a row) | gumbel
                                # (jax.random.categorical; the random stream of runs before
                                # 2026-12-04). Same distribution, other tokens for one key.

  def __post_init__(self):
    if self.method not in METHODS:
      raise ValueError(f"rollout.sampler={self.method!r} unknown; use one of {METHODS}")
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


BLOCK = 128   # vocabulary entries a block (151,936 = 1,187 x 128; 128,256 and 32,000 divide too)


def _blocks(x_BV: jax.Array) -> jax.Array:
  """[B, V] -> [B, V / BLOCK, BLOCK] (a free reshape; an odd V is padded with -inf)."""
  B, V = x_BV.shape
  if V % BLOCK:
    x_BV = jnp.pad(x_BV, ((0, 0), (0, -V % BLOCK)), constant_values=-jnp.inf)
  return x_BV.reshape(B, -1, BLOCK)


def _last_positive(w_BN: jax.Array) -> jax.Array:
  """[B] index of the last entry > 0 of each row (0 if none)."""
  idx_N = jnp.arange(w_BN.shape[-1], dtype=jnp.int32)
  return jnp.max(jnp.where(w_BN > 0, idx_N, 0), axis=-1)


BLOCK_MAX_MASSES = False   # bench/sample_step.py times both forms; see _block_masses. Read
                           # when a draw is traced: programs already compiled keep their form


def _block_masses(zb_BNK: jax.Array, m_B: jax.Array | None) -> tuple[jax.Array, jax.Array]:
  """(e_BN, m_B): each block's sum of exp(z - m_B), m_B the row's max of z (computed here when
  None). BLOCK_MAX_MASSES: each block's sum of exp(z - its own max), scaled by
  exp(block max - m_B) afterwards, the row's max taken from the [B, N] block maxima: the same
  masses up to fp32 rounding, from one read of z where XLA fuses a block's max and sum into
  one kernel, against two reads (the row's max, then the sums)."""
  if not BLOCK_MAX_MASSES:
    if m_B is None:
      m_B = jnp.max(zb_BNK, axis=(1, 2))
    return jnp.sum(jnp.exp(zb_BNK - m_B[:, None, None]), axis=-1), m_B
  mb_BN = jnp.max(zb_BNK, axis=-1)
  s_BN = jnp.sum(jnp.exp(zb_BNK - mb_BN[..., None]), axis=-1)
  if m_B is None:
    m_B = jnp.max(mb_BN, axis=-1)
  return jnp.where(mb_BN > -jnp.inf, s_BN * jnp.exp(mb_BN - m_B[:, None]), 0.0), m_B


def choose_block(e_BN: jax.Array, u_B: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The inverse CDF's first half, over block masses e_BN: (block j_B whose cumulative mass
  passes u_B * total, the mass left to pass inside it, total_B). A block of zero mass is never
  chosen, whatever the rounding of the sums."""
  cum_BN = jnp.cumsum(e_BN, axis=-1)
  total_B = cum_BN[:, -1]
  t_B = u_B * total_B
  j_B = jnp.minimum(jnp.sum((cum_BN <= t_B[:, None]).astype(jnp.int32), axis=-1),
                    _last_positive(e_BN))
  before_B = jnp.take_along_axis(cum_BN - e_BN, j_B[:, None], axis=1)[:, 0]
  return j_B, t_B - before_B, total_B


def choose_in_block(zj_BK: jax.Array, m_B: jax.Array, left_B: jax.Array) -> jax.Array:
  """The second half: the entry of the chosen block (its z values zj_BK, on the scale of
  exp(z - m_B)) whose cumulative mass passes left_B; never one of zero mass."""
  p_BK = jnp.exp(zj_BK - m_B[:, None])
  c_BK = jnp.cumsum(p_BK, axis=-1)
  return jnp.minimum(jnp.sum((c_BK <= left_B[:, None]).astype(jnp.int32), axis=-1),
                     _last_positive(p_BK))


def _inverse_cdf(zb_BNK: jax.Array, m_B: jax.Array | None, u_B: jax.Array
                 ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(token_B, sum of exp(z - m)_B, m_B): the token drawn from softmax(z) by the inverse CDF at
  u_B in [0, 1), over blocks (zb [B, N, K], K = BLOCK): the block whose cumulative mass
  passes u * total, then the entry inside it. Reads z twice (its max before, exp here), where
  the Gumbel-max draw (jax.random.categorical) made a random number per vocabulary entry: on
  an H200, 256 rows x 151,936 logits, 0.31 against 0.49 ms a draw (bench/sample_step.py).
  An entry of zero mass (masked) is never drawn, whatever the rounding of the sums."""
  e_BN, m_B = _block_masses(zb_BNK, m_B)            # block masses; m_B: z's max if None
  j_B, left_B, total_B = choose_block(e_BN, u_B)
  zj_BK = jnp.take_along_axis(zb_BNK, j_B[:, None, None], axis=1)[:, 0]
  return j_B * zb_BNK.shape[-1] + choose_in_block(zj_BK, m_B, left_B), total_B, m_B


def _argmax_and_max(xb_BNK: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(argmax_B, max_B) over [B, N, K] blocks, first index on ties (as jnp.argmax)."""
  m_BN = jnp.max(xb_BNK, axis=-1)
  a_BN = jnp.argmax(xb_BNK, axis=-1).astype(jnp.int32)
  j_B = jnp.argmax(m_BN, axis=-1).astype(jnp.int32)
  a_B = jnp.take_along_axis(a_BN, j_B[:, None], axis=1)[:, 0]
  return j_B * xb_BNK.shape[-1] + a_B, jnp.take_along_axis(m_BN, j_B[:, None], axis=1)[:, 0]


def _gumbel(scaled_BV, key, p: SamplingParams) -> tuple[jax.Array, jax.Array]:
  """method="gumbel": jax.nn.logsumexp, then jax.random.categorical (Gumbel-max: a random number
  per vocabulary entry) over the truncated logits; the sampler of every run before 2026-12-04."""
  lse_B = jax.nn.logsumexp(scaled_BV, axis=-1)
  z_BV = scaled_BV
  if p.top_k or p.top_p < 1.0:
    z_BV = jnp.where(scaled_BV >= _truncation_threshold(scaled_BV, p), scaled_BV, -jnp.inf)
  tok_B = jax.random.categorical(key, z_BV, axis=-1).astype(jnp.int32)
  picked_B = jnp.take_along_axis(scaled_BV, tok_B[:, None], axis=-1)[:, 0]
  return tok_B, picked_B - lse_B


def sample_next(logits_BV: jax.Array, key: jax.Array,
                p: SamplingParams) -> tuple[jax.Array, jax.Array]:
  """Returns (token_B int32, logprob_B float32). `logits_BV` are float32. Sampled: the inverse
  CDF of softmax(truncated logits / T) at one uniform number a row (`_inverse_cdf`), or
  jax.random.categorical's Gumbel-max (p.method="gumbel"); greedy: the argmax. Exact draws
  either way; the two methods draw other tokens for the same key."""
  logits_BV = logits_BV.astype(jnp.float32)
  B = logits_BV.shape[0]
  scaled_BV = logits_BV if p.greedy else logits_BV / p.temperature
  if not p.greedy and p.method == "gumbel":
    return _gumbel(scaled_BV, key, p)
  xb_BNK = _blocks(scaled_BV)
  lse = lambda m_B: m_B + jnp.log(jnp.sum(jnp.exp(xb_BNK - m_B[:, None, None]), axis=(1, 2)))
  if p.greedy:
    tok_B, m_B = _argmax_and_max(xb_BNK)
    lse_B = lse(m_B)
  else:
    u_B = jax.random.uniform(key, (B,), jnp.float32)
    if p.top_k or p.top_p < 1.0:   # the draw over the kept tokens, the log-prob over all
      m_B = jnp.max(xb_BNK, axis=(1, 2))
      thr_B1 = _truncation_threshold(scaled_BV, p)
      zb_BNK = _blocks(jnp.where(scaled_BV >= thr_B1, scaled_BV, -jnp.inf))
      tok_B, _, _ = _inverse_cdf(zb_BNK, m_B, u_B)
      lse_B = lse(m_B)
    else:
      tok_B, total_B, m_B = _inverse_cdf(xb_BNK, None, u_B)
      lse_B = m_B + jnp.log(total_B)
  # log_softmax(scaled)[tok] = scaled[tok] - logsumexp(scaled)
  picked_B = jnp.take_along_axis(scaled_BV, tok_B[:, None], axis=-1)[:, 0]
  return tok_B, picked_B - lse_B
