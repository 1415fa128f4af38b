"""sampling/head_pallas.py: the output projection and the draw's block statistics fused (the
logits never stored) against the XLA path, h @ W in fp32, then `sample_next`. Pallas interpret
mode on the CPU; the GPU lowering is checked too."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssp_jax.sampling import head_pallas as HP
from ssp_jax.sampling.methods import SamplingParams, sample_next


def _case(B, D, V, dtype, seed=0):
  kh, kw = jax.random.split(jax.random.key(seed))
  h = jax.random.normal(kh, (B, D), jnp.float32).astype(dtype)
  w = (jax.random.normal(kw, (D, V), jnp.float32) * (2.0 / np.sqrt(D))).astype(dtype)
  return h, w


def _xla(h, w, key, p):
  logits = jnp.einsum("BD,DV->BV", h, w, preferred_element_type=jnp.float32)
  return sample_next(logits, key, p)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("p", [SamplingParams(0.0), SamplingParams(1.0), SamplingParams(0.7)])
@pytest.mark.parametrize("B,V", [(32, 1024), (20, 1000)])
def test_fused_head_draws_as_the_xla_path(p, dtype, B, V):
  """Same tokens for the same keys (all but fp32-rounding boundary cases: none expected at
  this size), log-probs within fp32 rounding; 2 row tiles of 16 and 8 vocabulary blocks, or
  rows padded to 32 and a vocabulary padded to 1,024 (its last block 104 real columns); a
  hidden size that is not a power of two."""
  D = 96
  h, w = _case(B, D, V, dtype)
  draw_x = jax.jit(lambda k: _xla(h, w, k, p))
  draw_f = jax.jit(lambda k: HP.sample_from_hidden(h, w, k, p, interpret=True, rows=16))
  for s in range(3):
    key = jax.random.key(s)
    (tx, lx), (tf, lf) = draw_x(key), draw_f(key)
    np.testing.assert_array_equal(np.asarray(tf), np.asarray(tx))
    np.testing.assert_allclose(np.asarray(lf), np.asarray(lx), rtol=0, atol=2e-5)
    assert bool(jnp.all(lf <= 0))


def test_fused_head_greedy_takes_the_first_max_across_blocks():
  """Ties across and inside blocks: the first index, as jnp.argmax; log-prob of the max."""
  B, D, V = 16, 16, 512
  h = jnp.zeros((B, D)).at[:, 0].set(1.0)
  w = jnp.zeros((D, V)).at[0, jnp.array([300, 140, 141, 500])].set(2.0)
  tok, lp = HP.sample_from_hidden(h, w, jax.random.key(0), SamplingParams(0.0), interpret=True)
  np.testing.assert_array_equal(np.asarray(tok), np.full(B, 140))
  want = jax.nn.log_softmax(h @ w, axis=-1)[:, 140]
  np.testing.assert_allclose(np.asarray(lp), np.asarray(want), rtol=1e-6)


def test_fused_head_draws_follow_the_softmax():
  """4,000 draws of one row (repeated 10 times: rows padded to 16 inside): the 10
  likeliest tokens' frequencies within 4.5 standard errors of softmax(h @ W)."""
  D, V = 32, 256
  h, w = _case(16, D, V, jnp.float32, seed=3)
  h = jnp.broadcast_to(h[:1], (10, D))
  keys = jax.random.split(jax.random.key(4), 400)
  toks = jax.jit(jax.vmap(lambda k: HP.sample_from_hidden(h, w, k, SamplingParams(1.0),
                                                          interpret=True)[0]))(keys)
  freq = np.bincount(np.asarray(toks).ravel(), minlength=V) / toks.size
  want = np.asarray(jax.nn.softmax(h[0] @ w))
  top = np.argsort(-want)[:10]
  se = np.sqrt(want[top] * (1 - want[top]) / toks.size)
  assert np.all(np.abs(freq[top] - want[top]) <= 4.5 * se + 1e-9), (freq[top], want[top])


def test_row_tiles_are_powers_of_two_dividing_the_padded_rows():
  """Triton's blocks are powers of two: 48 padded rows take tiles of 16, not one of 48."""
  assert [HP._rows(B, 64) for B in (16, 32, 48, 96, 256)] == [16, 32, 16, 32, 64]
  assert HP._rows(256, 256) == 256 and HP._rows(80, 128) == 16


def test_eligible_and_a_clear_error_outside_it():
  assert HP.eligible(SamplingParams(1.0), 896)
  assert HP.eligible(SamplingParams(0.0, top_k=5), 896)     # greedy: no truncation
  assert not HP.eligible(SamplingParams(1.0, top_k=5), 896)
  assert not HP.eligible(SamplingParams(1.0, top_p=0.9), 896)
  assert not HP.eligible(SamplingParams(1.0, method="gumbel"), 896)
  assert not HP.eligible(SamplingParams(1.0), 900)          # D % 16
  h, w = _case(16, 16, 256, jnp.float32)
  with pytest.raises(ValueError, match="top_k=5"):
    HP.sample_from_hidden(h, w, jax.random.key(0), SamplingParams(1.0, top_k=5))


def test_fused_head_lowers_to_triton_for_gpus():
  for B, D in ((256, 896), (16, 3584)):
    h = jax.ShapeDtypeStruct((B, D), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((D, 151_936), jnp.bfloat16)
    for greedy in (False, True):
      f = lambda h, w, g=greedy: HP.block_stats(h, w, inv_t=1.0, greedy=g)
      text = jax.jit(f).trace(h, w).lower(lowering_platforms=("cuda",)).as_text()
      assert "head_block_stats" in text


def decode_loop_cuda_text(cfg, p, B, L, monkeypatch, **kw) -> str:
  """The decode while-loop (bf16, 8 steps, sampled) lowered for CUDA as text; the kernels take
  their GPU path (not interpret mode), as on a GPU host. kw: `S.decode`'s attn_impl, head, ..."""
  from ssp_jax import sampling as S
  tables = S.build_stop_tables([b"x"] * cfg.vocab_size, []).to_device()
  dparams = S.make_decode_params(cfg, p, jnp.bfloat16, True)
  st = S.init_state(cfg, B, L, tables.prefix_VM.shape[1], jnp.bfloat16)
  with monkeypatch.context() as m:
    m.setattr(jax, "default_backend", lambda: "gpu")
    f = lambda st: S.decode(
        cfg, st, dparams, tables, jnp.asarray([-1], jnp.int32), jnp.ones((B,), bool),
        jnp.full((B,), 8, jnp.int32), jnp.int32(B + 1), jax.random.key(2), num_steps=8,
        sampling=S.SamplingParams(1.0), dtype=jnp.bfloat16, **kw)
    return jax.jit(f).trace(st).lower(lowering_platforms=("cuda",)).as_text()


def test_decode_loop_with_the_fused_head_holds_no_logits_on_gpus(monkeypatch):
  """The whole decode while-loop lowered for CUDA (no GPU needed): with head="pallas" no
  [B, V] float32 value exists in the program (the logits are never formed) and the Triton
  kernel is there; with head="xla" the logits are. V = 1,024, B = 32."""
  import re
  import models
  cfg = models.ModelConfig(vocab_size=1024, hidden_size=64, intermediate_size=128, num_layers=2,
                           num_heads=4, num_kv_heads=2, head_dim=16)
  B = 32
  p = models.init_params(cfg, jax.random.key(0), std=0.2)
  logits = re.compile(rf"tensor<{B}x{cfg.vocab_size}xf32>")
  for head in ("xla", "pallas"):
    text = decode_loop_cuda_text(cfg, p, B, 64, monkeypatch, attn_impl="einsum", head=head)
    assert ("head_block_stats" in text) == (head == "pallas")
    assert bool(logits.search(text)) == (head == "xla"), head


def test_rollout_config_names_a_bad_decode_head_before_any_model_loads():
  """check_rollout_config (run before the index and the model): an unknown head, the fused
  head with a top-k / top-p cut or the gumbel sampler (sampled), a decode_unroll below 1."""
  from ssp_jax.config_ranges import RangeError
  from ssp_jax.rollout.config import check_rollout_config, get_rollout_config
  rc = get_rollout_config()
  rc.decode_head = "pallas"
  check_rollout_config(rc)                     # the defaults: no cut, inverse_cdf
  for field, value in (("top_k", 20), ("top_p", 0.9), ("sampler", "gumbel")):
    bad = get_rollout_config()
    bad.decode_head, bad[field] = "pallas", value
    with pytest.raises(ValueError, match="rollout.decode_head='pallas' draws without top-k"):
      check_rollout_config(bad)
    bad.temperature = 0.0                      # greedy takes the argmax: no cut to apply
    check_rollout_config(bad)
  rc.decode_head = "fused"
  with pytest.raises(ValueError, match="rollout.decode_head='fused' unknown"):
    check_rollout_config(rc)
  rc = get_rollout_config()
  rc.decode_unroll = 0
  with pytest.raises(RangeError, match="decode_unroll"):
    check_rollout_config(rc)
