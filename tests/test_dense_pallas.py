"""The dense-cache Pallas decode attention (interpret mode on a CPU) against the einsum path, and
a greedy decode with attn_impl="pallas" against "einsum" token for token."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from ssp_jax import sampling as S
from ssp_jax.sampling import dense_pallas as DP
from ssp_jax.sampling.decode_step import _cached_attention


def _inputs(B, K, G, H, S_, dtype, seed=0):
  r = np.random.default_rng(seed)
  q, k, v = (jnp.asarray(r.normal(size=s), dtype)
             for s in ((B, K, G, H), (B, K, S_, H), (B, K, S_, H)))
  return q, k, v


def _check(q, k, v, pos, splits=None, atol=2e-5):
  S_ = k.shape[2]
  upto_BS = jnp.arange(S_)[None, :] <= pos[:, None]
  want = _cached_attention(q, k, v, upto_BS, einsum=True)
  got = DP.dense_attention(q, k, v, pos, interpret=True, splits=splits)
  assert got.shape == want.shape and got.dtype == want.dtype
  np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                             atol=atol, rtol=0)


@pytest.mark.parametrize("dtype,atol", [(jnp.float32, 2e-5), (jnp.bfloat16, 3e-2)])
@pytest.mark.parametrize("G,H,S_", [(7, 64, 48), (4, 128, 128), (7, 64, 384), (4, 64, 384)])
def test_kernel_equals_einsum(G, H, S_, dtype, atol):
  """Rows at slot 0, mid-cache, the last slot and a block edge; one share of the slots."""
  q, k, v = _inputs(4, 2, G, H, S_, dtype)
  pos = jnp.asarray([0, S_ // 2 + 3, S_ - 1, min(127, S_ - 1)], jnp.int32)
  _check(q, k, v, pos, splits=1, atol=atol)


@pytest.mark.parametrize("S_,splits", [(384, 2), (384, 3), (512, None)])
def test_split_slots_equal_einsum(S_, splits):
  """Slots split across programs (a share past a row's position has nothing to attend), and the
  automatic choice at a small batch (4 programs: 4 shares of 128 slots)."""
  if splits is None:
    assert DP.choose_splits(2, 2, S_) == 4 and DP.choose_splits(256, 2, S_) == 1
  q, k, v = _inputs(2, 2, 7, 64, S_, jnp.float32, seed=1)
  pos = jnp.asarray([5, 300], jnp.int32)
  _check(q, k, v, pos, splits=splits)


def test_odd_cache_length_and_padding_ignored():
  """S not a multiple of 16 is padded; slots past pos (here NaN) never reach the output."""
  q, k, v = _inputs(3, 2, 4, 64, 40, jnp.float32, seed=2)
  pos = jnp.asarray([0, 17, 39], jnp.int32)
  past_BS = jnp.arange(40)[None, :] > pos[:, None]
  k_nan = jnp.where(past_BS[:, None, :, None], jnp.nan, k)
  v_nan = jnp.where(past_BS[:, None, :, None], jnp.nan, v)
  got = DP.dense_attention(q, k_nan, v_nan, pos, interpret=True)
  upto_BS = ~past_BS
  want = _cached_attention(q, k, v, upto_BS, einsum=True)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5, rtol=0)


@pytest.mark.parametrize("dtype,atol", [(jnp.float32, 2e-5), (jnp.bfloat16, 3e-2)])
def test_tolerance_catches_one_slot_too_many(dtype, atol):
  """The tolerances are sharp: a kernel attending one slot past pos would fail the tests above."""
  q, k, v = _inputs(2, 2, 7, 64, 48, dtype)
  pos = jnp.asarray([3, 20], jnp.int32)
  got = DP.dense_attention(q, k, v, pos + 1, interpret=True)
  want = _cached_attention(q, k, v, jnp.arange(48)[None, :] <= pos[:, None], einsum=True)
  assert np.abs(np.asarray(got, np.float32) - np.asarray(want, np.float32)).max() > 3 * atol


def test_lowers_to_triton_for_gpus():
  """The kernel lowers for CUDA (Pallas's Triton lowering runs here without a GPU: its
  power-of-two and block checks), at the 0.5B bench shape and a split small-batch long cache."""
  for B, K, G, H, S_, splits in ((256, 2, 7, 64, 384, None), (4, 4, 7, 128, 2048, None)):
    q = jax.ShapeDtypeStruct((B, K, G, H), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((B, K, S_, H), jnp.bfloat16)
    pos = jax.ShapeDtypeStruct((B,), jnp.int32)
    f = lambda *a: DP.dense_attention(*a, splits=splits)
    text = jax.jit(f).trace(q, kv, kv, pos).lower(lowering_platforms=("cuda",)).as_text()
    assert "dense_decode_attention" in text


def _greedy_equal(cfg, p, impls, fuse):
  """The sampler's while_loop, greedy, with each attn_impl in `impls`: tokens equal to the first
  one's, log-probs within 1e-5. Returns the decode params (to check their layout)."""
  B, P, N = 3, 6, 10
  tables = S.build_stop_tables([b"x"] * cfg.vocab_size, []).to_device()
  dparams = S.make_decode_params(cfg, p, jnp.float32, fuse)
  prompt = jax.random.randint(jax.random.key(1), (B, P), 0, cfg.vocab_size)
  out = {}
  for impl in impls:
    st = S.init_state(cfg, B, P + N + 4, tables.prefix_VM.shape[1], jnp.float32)
    rows = jnp.arange(B, dtype=jnp.int32)
    st = S.prefill_rows(cfg, st, p, rows, prompt[:, :-1], jnp.zeros((B,), jnp.int32),
                        dtype=jnp.float32)
    st = S.set_rows(st, rows, prompt[:, -1], jnp.full((B,), P - 1, jnp.int32),
                    jnp.ones((B,), bool))
    _, out[impl] = S.decode(cfg, st, dparams, tables, jnp.asarray([-1], jnp.int32),
                            jnp.ones((B,), bool), jnp.full((B,), N, jnp.int32), jnp.int32(B + 1),
                            jax.random.key(2), num_steps=N, sampling=S.SamplingParams(0.0),
                            dtype=jnp.float32, attn_impl=impl)
  for impl in impls[1:]:
    np.testing.assert_array_equal(np.asarray(out[impl].tokens_BN),
                                  np.asarray(out[impls[0]].tokens_BN))
    np.testing.assert_allclose(np.asarray(out[impl].logprobs_BN),
                               np.asarray(out[impls[0]].logprobs_BN), atol=1e-5)
  return dparams


def test_greedy_decode_pallas_equals_einsum():
  """The sampler's while_loop, greedy, attn_impl="pallas" == "einsum" token for token."""
  cfg = models.ModelConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2,
                           num_heads=4, num_kv_heads=2, head_dim=16)
  p = models.init_params(cfg, jax.random.key(0), std=0.2)
  _greedy_equal(cfg, p, ("einsum", "pallas"), fuse=False)


@pytest.mark.parametrize("dtype,atol", [(jnp.float32, 2e-5), (jnp.bfloat16, 3e-2)])
@pytest.mark.parametrize("S_,splits", [(48, 1), (384, 1), (384, 3), (512, None)])
def test_kernel_that_stores_the_new_token_equals_write_then_attend(S_, splits, dtype, atol):
  """dense_attention_write (the decode step's "pallas"): the slots before pos from the cache,
  the query token's k/v from its inputs, stored at pos by the kernel. Same output as writing
  first and attending over slots <= pos, and the caches equal the scattered ones (stale slots,
  here NaN at pos, never reach the output). Rows at slot 0, a block edge, the last slot."""
  q, k, v = _inputs(4, 2, 7, 64, S_, dtype, seed=3)
  kn, vn = (jnp.asarray(np.random.default_rng(4 + i).normal(size=(4, 2, 64)), dtype)
            for i in range(2))
  pos = jnp.asarray([0, 128, S_ - 1, S_ // 2 + 5], jnp.int32)
  rows = jnp.arange(4)
  stale_k = k.at[rows, :, pos].set(jnp.nan)
  stale_v = v.at[rows, :, pos].set(jnp.nan)
  want_k, want_v = k.at[rows, :, pos].set(kn), v.at[rows, :, pos].set(vn)
  upto_BS = jnp.arange(S_)[None, :] <= pos[:, None]
  want = _cached_attention(q, want_k, want_v, upto_BS, einsum=True)
  got, k2, v2 = DP.dense_attention_write(q, stale_k, stale_v, pos, kn, vn, interpret=True,
                                         splits=splits)
  np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                             atol=atol, rtol=0)
  np.testing.assert_array_equal(np.asarray(k2, np.float32), np.asarray(want_k, np.float32))
  np.testing.assert_array_equal(np.asarray(v2, np.float32), np.asarray(want_v, np.float32))


def _rope_case(B, K, G, H, dtype, pos, seed=5):
  """A fused q/k/v projection [B, N + 2K, H] and HF RoPE cos, sin [B, H] at positions pos."""
  from models import layers as L_
  qkv = jnp.asarray(np.random.default_rng(seed).normal(size=(B, K * G + 2 * K, H)), dtype)
  cos, sin = L_.rope_cos_sin(jnp.asarray(pos)[:, None], L_.rope_inv_freq(H, 10000.0, None),
                             dtype)
  return qkv, cos[:, 0], sin[:, 0]


@pytest.mark.parametrize("dtype,atol,katol", [(jnp.float32, 2e-5, 1e-6),
                                              (jnp.bfloat16, 3e-2, 1.6e-2)])
@pytest.mark.parametrize("K,G,H,S_,splits,max_block", [
    (2, 7, 64, 48, 1, 128), (2, 7, 64, 384, 3, 128), (4, 4, 128, 128, None, 128),
    (1, 16, 32, 64, 2, 128), (2, 7, 64, 384, 2, 64), (2, 7, 64, 96, 1, 32),
    (4, 4, 128, 256, 1, None)])
def test_kernel_with_rope_equals_rope_in_xla(K, G, H, S_, splits, max_block, dtype, atol, katol):
  """dense_attention_write_qkv (the decode step's "pallas_rope": heads split and RoPE applied in the
  kernel) == split_rope in XLA, then dense_attention_write ("pallas"): the outputs, and
  the caches (the token stored at pos, roped; bf16 may round one step apart: the kernel ropes
  in fp32 and rounds once). G = 16 leaves no padded query row; max_block < 128 (a
  bench/dense_attention.py knob) loops over more, smaller blocks; None takes `default_knobs`
  (at H = 128: 64-slot blocks)."""
  B = 4
  pos = jnp.asarray([0, 17, S_ - 1, S_ // 2], jnp.int32)
  qkv, cos, sin = _rope_case(B, K, G, H, dtype, pos)
  _, k, v = _inputs(B, K, G, H, S_, dtype, seed=6)
  q2, kn, vn = DP.split_rope(qkv, cos, sin, K * G)
  want, wk, wv = DP.dense_attention_write(q2, k, v, pos, kn, vn, interpret=True, splits=splits)
  got, gk, gv = DP.dense_attention_write_qkv(qkv, cos, sin, k, v, pos, num_heads=K * G,
                                             interpret=True, splits=splits, max_block=max_block)
  assert got.shape == (B, K, G, H) and got.dtype == dtype
  np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                             atol=atol, rtol=0)
  np.testing.assert_allclose(np.asarray(gk, np.float32), np.asarray(wk, np.float32),
                             atol=katol, rtol=0)
  np.testing.assert_array_equal(np.asarray(gv, np.float32), np.asarray(wv, np.float32))
  rows = jnp.arange(B)   # and RoPE was applied: the stored k is not the raw projection's
  raw_k = qkv[:, K * G:K * G + K]
  assert np.abs(np.asarray(gk[rows, :, pos] - raw_k, np.float32))[1:].max() > 0.1


@pytest.mark.parametrize("qkv_bias", [True, False])
def test_greedy_decode_rope_in_kernel_equals_einsum(qkv_bias):
  """The decode loop with fused weights: "pallas_rope" (RoPE in the kernel), "pallas" and
  "einsum" give the same greedy tokens."""
  cfg = models.ModelConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2,
                           num_heads=4, num_kv_heads=2, head_dim=16, qkv_bias=qkv_bias)
  p = models.init_params(cfg, jax.random.key(0), std=0.2)
  if qkv_bias:   # init_params zeroes biases: give them values so the bias path is exercised
    p["layers"] = {**p["layers"], **{n: 0.3 * jax.random.normal(jax.random.key(i),
                                                                 p["layers"][n].shape)
                                     for i, n in enumerate(("bq", "bk", "bv"))}}
  dparams = _greedy_equal(cfg, p, ("einsum", "pallas", "pallas_rope"), fuse=True)
  assert "w_qkv" in dparams["layers"][0]


@pytest.mark.parametrize("K,G,S_,splits", [(2, 7, 48, 1), (4, 4, 128, 1), (1, 16, 64, 1),
                                           (2, 7, 384, 3), (2, 8, 64, 1)])
def test_direct_output_equals_the_sliced_tile(K, G, S_, splits):
  """direct_out (each KV head's G real query rows stored straight into [B, K * G, H], a masked
  store; no XLA slice after the kernel) gives bitwise the padded tile's sliced output, for all
  three entry points; with shares (splits > 1) the combine runs as before. G = 8: K * G equals
  the padded tile's 16 rows, the shape where a [Gp, H] tile and a row's block coincide."""
  B, H = 4, 64
  pos = jnp.asarray([0, 17, S_ - 1, S_ // 2], jnp.int32)
  qkv, cos, sin = _rope_case(B, K, G, H, jnp.bfloat16, pos)
  q, k, v = _inputs(B, K, G, H, S_, jnp.bfloat16, seed=8)
  kn, vn = q[:, :, 0], q[:, :, 1]
  calls = (lambda d: (DP.dense_attention(q, k, v, pos, interpret=True, splits=splits,
                                         direct_out=d),),
           lambda d: DP.dense_attention_write(q, k, v, pos, kn, vn, interpret=True,
                                              splits=splits, direct_out=d),
           lambda d: DP.dense_attention_write_qkv(qkv, cos, sin, k, v, pos, num_heads=K * G,
                                                  interpret=True, splits=splits, direct_out=d))
  for call in calls:
    tile, direct = call(False), call(True)
    assert direct[0].shape == (B, K, G, H)
    for a, b in zip(tile, direct):
      np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


def test_direct_out_default_is_read_at_each_call(monkeypatch):
  """direct_out=None takes DIRECT_OUT when called (outside jit), so flipping it retraces."""
  monkeypatch.setattr(DP, "DIRECT_OUT", True)
  assert DP.direct_out_or_default(None) and not DP.direct_out_or_default(False)
  monkeypatch.setattr(DP, "DIRECT_OUT", False)
  assert not DP.direct_out_or_default(None) and DP.direct_out_or_default(True)


@pytest.mark.parametrize("direct_out", [False, True])
def test_rope_kernel_lowers_to_triton_for_gpus(direct_out):
  for B, K, G, H, S_ in ((256, 2, 7, 64, 384), (4, 4, 7, 128, 2048)):
    qkv = jax.ShapeDtypeStruct((B, K * G + 2 * K, H), jnp.bfloat16)
    cs = jax.ShapeDtypeStruct((B, H), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((B, K, S_, H), jnp.bfloat16)
    pos = jax.ShapeDtypeStruct((B,), jnp.int32)
    f = lambda a, c, s, k, v, p, N=K * G: DP.dense_attention_write_qkv(a, c, s, k, v, p,
                                                                       num_heads=N,
                                                                       direct_out=direct_out)
    text = jax.jit(f).trace(qkv, cs, cs, kv, kv, pos).lower(lowering_platforms=("cuda",)).as_text()
    assert "dense_decode_attention" in text
