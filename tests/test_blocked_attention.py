"""`attn_impl="blocked"` (models/blocked_attention.py) against the masked reference attention:
outputs and gradients on packed rows (several segments, padding, GQA, a row length that is not
a multiple of the block), and a whole model's loss and gradients through `hidden_states`."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from models import layers as L
from models.blocked_attention import MAX_BLOCKS, _visible, block_for, blocked_attention
from models.config import ModelConfig


def _packed(lengths_per_row, T):
  """segment ids and positions [B, T] of rows packed with the given segment lengths."""
  seg = np.zeros((len(lengths_per_row), T), np.int32)
  pos = np.zeros((len(lengths_per_row), T), np.int32)
  for b, lengths in enumerate(lengths_per_row):
    at = 0
    for s, n in enumerate(lengths, start=1):
      seg[b, at:at + n], pos[b, at:at + n] = s, np.arange(n)
      at += n
  return jnp.asarray(seg), jnp.asarray(pos)


def _inputs(B, T, N, K, H, seed=0, dtype=jnp.float32):
  r = np.random.default_rng(seed)
  f = lambda *s: jnp.asarray(r.standard_normal(s), dtype)
  return f(B, T, N, H), f(B, T, K, H), f(B, T, K, H), f(B, T, N, H)


@pytest.mark.parametrize("block", [16, 128])
def test_outputs_and_grads_equal_the_reference(block):
  B, T, N, K, H = 2, 88, 6, 2, 8          # 88: not a multiple of any block above but 128 > T
  seg, pos = _packed([[30, 41, 9], [88]], T)   # row 0 ends in 8 tokens of padding
  mask = L.segment_mask(pos, seg)
  q, k, v, dout = _inputs(B, T, N, K, H)
  real = (seg > 0)[:, :, None, None]

  ref = L.attention(q, k, v, mask)
  out = jax.jit(blocked_attention, static_argnums=4)(q, k, v, mask, block)
  np.testing.assert_allclose(np.where(real, out, 0), np.where(real, ref, 0), atol=2e-6)
  assert np.all(np.asarray(out)[~np.asarray(real[..., 0, 0])] == 0)   # padding: exactly 0

  loss = lambda f: lambda q, k, v: jnp.sum(jnp.where(real, f(q, k, v), 0) * dout)
  g_ref = jax.jit(jax.grad(loss(lambda q, k, v: L.attention(q, k, v, mask)),
                           argnums=(0, 1, 2)))(q, k, v)
  g = jax.jit(jax.grad(loss(lambda q, k, v: blocked_attention(q, k, v, mask, block)),
                       argnums=(0, 1, 2)))(q, k, v)
  for a, b in zip(g, g_ref):
    np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-4)


def test_pairs_across_segments_and_above_the_diagonal_are_skipped():
  seg, pos = _packed([[32, 32, 64]], 128)
  vis = np.asarray(_visible(L.segment_mask(pos, seg), 32))
  want = np.array([[1, 0, 0, 0],      # segment 1: block 0 only
                   [0, 1, 0, 0],      # segment 2: block 1 only
                   [0, 0, 1, 0],      # segment 3 spans blocks 2-3
                   [0, 0, 1, 1]], bool)
  np.testing.assert_array_equal(vis, want)


def test_bfloat16_inputs_keep_their_dtype_and_stay_close():
  B, T, N, K, H = 1, 64, 4, 2, 16
  seg, pos = _packed([[40, 24]], T)
  mask = L.segment_mask(pos, seg)
  q, k, v, _ = _inputs(B, T, N, K, H, seed=1)
  out = jax.jit(blocked_attention, static_argnums=4)(
      q.astype(jnp.bfloat16), k.astype(jnp.bfloat16), v.astype(jnp.bfloat16), mask, 16)
  assert out.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(out, np.float32), L.attention(q, k, v, mask), atol=5e-2)


CFG = ModelConfig(model_type="qwen2", vocab_size=96, hidden_size=32, intermediate_size=64,
                  num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, qkv_bias=True)


def test_model_loss_and_grads_equal_the_xla_path(remat="full"):
  """Under remat, as the RL step runs it (the custom backward inside jax.checkpoint)."""
  T = 48
  seg, pos = _packed([[20, 22], [48]], T)
  tokens = jnp.asarray(np.random.default_rng(2).integers(0, CFG.vocab_size, (2, T)), jnp.int32)
  params = models.init_params(CFG, jax.random.key(3), std=0.3)
  w = (seg > 0).astype(jnp.float32)[..., None]

  def loss(p, impl):
    h = models.hidden_states(CFG, p, tokens, positions_BT=pos, segment_ids_BT=seg,
                             attn_impl=impl, attn_chunk=16, remat=remat)
    return jnp.sum(jnp.tanh(h) * w)

  l_x, g_x = jax.jit(jax.value_and_grad(loss), static_argnums=1)(params, "xla")
  l_b, g_b = jax.jit(jax.value_and_grad(loss), static_argnums=1)(params, "blocked")
  np.testing.assert_allclose(l_b, l_x, rtol=1e-5)
  for a, b in zip(jax.tree.leaves(g_b), jax.tree.leaves(g_x)):
    np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-3)


def test_long_rows_get_longer_blocks():
  assert block_for(1024, 128) == 128
  assert block_for(12288, 128) == 384 and 12288 / 384 <= MAX_BLOCKS
  assert block_for(5000, 64) % 16 == 0 and -(-5000 // block_for(5000, 64)) <= MAX_BLOCKS
