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
