"""`sample_next`: the recorded log-prob is log_softmax(logits / T)[token] over the full
vocabulary (greedy: T = 1), whatever top-k / top-p truncation chose the token."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssp_jax.sampling.methods import SamplingParams, sample_next


@pytest.mark.parametrize("p", [SamplingParams(0.0), SamplingParams(1.0), SamplingParams(0.7),
                               SamplingParams(0.7, top_k=5), SamplingParams(1.3, top_p=0.5)])
def test_recorded_logprob_is_full_vocabulary_log_softmax(p):
  logits_BV = 4.0 * jax.random.normal(jax.random.key(0), (6, 97))
  tok_B, lp_B = sample_next(logits_BV, jax.random.key(1), p)
  T = 1.0 if p.greedy else p.temperature
  want_B = jax.nn.log_softmax(logits_BV / T, axis=-1)[jnp.arange(6), tok_B]
  np.testing.assert_allclose(lp_B, want_B, rtol=1e-5, atol=1e-5)
  if p.greedy:
    np.testing.assert_array_equal(tok_B, jnp.argmax(logits_BV, axis=-1))
  if p.top_k:   # the drawn token is among the k most likely
    top_BK = jax.lax.top_k(logits_BV, p.top_k)[1]
    assert bool(jnp.all(jnp.any(top_BK == tok_B[:, None], axis=1)))


def test_draws_follow_the_softmax():
  """20,000 draws from one row of 8 logits at T = 0.7: every token's frequency within 4.5
  standard errors of softmax(logits / T) (a wrong reduction, say a biased tie or a lost term of
  the sum, moves a frequency by far more)."""
  logits_V = jnp.array([2.0, 1.5, 0.3, -1.0, 0.0, 1.0, -3.0, 0.7])
  n = 20_000
  p = SamplingParams(0.7)
  toks = jax.jit(jax.vmap(lambda k: sample_next(logits_V[None], k, p)[0][0]))(
      jax.random.split(jax.random.key(5), n))
  freq = np.bincount(np.asarray(toks), minlength=8) / n
  want = np.asarray(jax.nn.softmax(logits_V / 0.7))
  se = np.sqrt(want * (1 - want) / n)
  assert np.all(np.abs(freq - want) <= 4.5 * se + 1e-9), (freq, want)


@pytest.mark.parametrize("V", [8, 300, 1024])
def test_draws_follow_the_softmax_over_blocks(V):
  """Vocabularies inside one block, across blocks with an odd tail, and exactly 8 blocks: each
  token's frequency within 4.5 standard errors of its probability (on the 20 likeliest)."""
  logits_V = 2.0 * jax.random.normal(jax.random.key(V), (V,))
  logits_V = logits_V.at[V // 2].set(6.0).at[V - 1].set(5.0)   # mass in the middle and the tail
  n, p = 40_000, SamplingParams(1.0)
  toks = jax.jit(jax.vmap(lambda k: sample_next(logits_V[None], k, p)[0][0]))(
      jax.random.split(jax.random.key(7), n))
  freq = np.bincount(np.asarray(toks), minlength=V) / n
  want = np.asarray(jax.nn.softmax(logits_V))
  top = np.argsort(-want)[:20]
  se = np.sqrt(want[top] * (1 - want[top]) / n)
  assert np.all(np.abs(freq[top] - want[top]) <= 4.5 * se + 1e-9), (freq[top], want[top])


def test_masked_tokens_are_never_drawn():
  """top-k 3 over 1,000 logits with a flat tail: 4,000 draws, all among the 3 kept."""
  logits_V = jnp.zeros((1000,)).at[jnp.array([5, 500, 999])].set(jnp.array([1.0, 0.5, 0.2]))
  p = SamplingParams(1.0, top_k=3)
  toks = jax.jit(jax.vmap(lambda k: sample_next(logits_V[None], k, p)[0][0]))(
      jax.random.split(jax.random.key(3), 4000))
  assert set(np.asarray(toks).tolist()) == {5, 500, 999}


def test_greedy_ties_take_the_first_index_across_blocks():
  x = jnp.full((2, 400), -1.0).at[0, 130].set(3.0).at[0, 390].set(3.0).at[1, 7].set(2.0)
  tok, lp = sample_next(x, jax.random.key(0), SamplingParams(0.0))
  np.testing.assert_array_equal(tok, [130, 7])
  np.testing.assert_allclose(lp, jax.nn.log_softmax(x, axis=-1)[jnp.arange(2), tok], rtol=1e-6)


@pytest.mark.parametrize("p", [SamplingParams(1.0, method="gumbel"),
                               SamplingParams(0.7, top_k=5, method="gumbel"),
                               SamplingParams(1.3, top_p=0.5, method="gumbel")])
def test_gumbel_method_is_jax_categorical_of_the_same_key(p):
  """rollout.sampler="gumbel" keeps the random stream of runs before the inverse CDF (a seeded
  run recorded then draws the same tokens)."""
  from ssp_jax.sampling.methods import _truncation_threshold
  logits_BV = 3.0 * jax.random.normal(jax.random.key(2), (16, 301))
  for seed in range(3):
    key = jax.random.key(seed)
    tok_B, lp_B = sample_next(logits_BV, key, p)
    scaled_BV = logits_BV / p.temperature
    z_BV = scaled_BV
    if p.top_k or p.top_p < 1.0:
      z_BV = jnp.where(scaled_BV >= _truncation_threshold(scaled_BV, p), scaled_BV, -jnp.inf)
    np.testing.assert_array_equal(tok_B, jax.random.categorical(key, z_BV, axis=-1))
    want = jax.nn.log_softmax(scaled_BV, axis=-1)[jnp.arange(16), tok_B]
    np.testing.assert_allclose(lp_B, want, rtol=1e-5, atol=1e-5)


def test_unknown_sampler_is_an_error_naming_the_field():
  with pytest.raises(ValueError, match="rollout.sampler='multinomial'"):
    SamplingParams(1.0, method="multinomial")
  from ssp_jax.rollout.config import check_rollout_config, get_rollout_config
  rc = get_rollout_config()
  rc.sampler = "multinomial"
  with pytest.raises(ValueError, match="rollout.sampler='multinomial'"):
    check_rollout_config(rc)


@pytest.mark.parametrize("p", [SamplingParams(1.0), SamplingParams(0.7, top_k=5),
                               SamplingParams(1.3, top_p=0.5)])
def test_block_max_masses_draw_the_same_tokens(p, monkeypatch):
  """methods.BLOCK_MAX_MASSES (each block's mass from its own max; bench/sample_step.py times
  it): the same tokens for the same random numbers and the same log-probs within fp32
  rounding, over blocks with an odd tail and (top-k / top-p) blocks wholly masked."""
  from ssp_jax.sampling import methods as M
  logits_BV = 3.0 * jax.random.normal(jax.random.key(2), (16, 300))
  keys = jax.random.split(jax.random.key(9), 64)
  draw = lambda: jax.jit(jax.vmap(lambda k: sample_next(logits_BV, k, p)))(keys)
  want_tok, want_lp = draw()
  monkeypatch.setattr(M, "BLOCK_MAX_MASSES", True)
  got_tok, got_lp = draw()
  assert float(jnp.mean(got_tok == want_tok)) > 0.999
  np.testing.assert_allclose(got_lp, want_lp, rtol=0, atol=2e-6)
  assert bool(jnp.all(jnp.isfinite(got_lp)))
