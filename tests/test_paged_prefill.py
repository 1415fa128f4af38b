"""The paged prefill (sampling/paged_prefill.py) writes the same K/V as the dense chunk forward,
whether a row's tokens come as one chunk or as pieces of one call (each layer writes before it
attends, so a piece sees the earlier pieces of its own call), with decode-layout params fused or
not; padding pieces with a table of null pages touch no row's pages."""
import jax
import jax.numpy as jnp
import numpy as np

import models
from models.config import ModelConfig
from ssp_jax import sampling as S
from ssp_jax.rollout.pages import PageAllocator

CFG = ModelConfig(model_type="qwen2", vocab_size=256, hidden_size=32, intermediate_size=64,
                  num_layers=3, num_heads=4, num_kv_heads=2, head_dim=8)
PS, PAGES, COLS = 4, 64, 16


def _dense_kv(params, toks):
  """K/V [L, K, n, H] of a row from models.forward_with_cache on a dense cache."""
  n = len(toks)
  shape = (CFG.num_layers, 1, CFG.num_kv_heads, 64, CFG.head_dim)
  cache = {"k": jnp.zeros(shape), "v": jnp.zeros(shape)}
  _, cache = models.forward_with_cache(CFG, params, jnp.asarray([toks], jnp.int32),
                                       jnp.zeros((1,), jnp.int32), cache, return_hidden=True)
  return {k: np.asarray(x[:, 0, :, :n]) for k, x in cache.items()}


def _row_kv(pools, table_row, n):
  """K/V [L, K, n, H] of a row read back from its pages."""
  pages = np.asarray(table_row)[:-(-n // PS)]
  return np.stack([np.asarray(p)[:, pages].reshape(CFG.num_kv_heads, -1, CFG.head_dim)[:, :n]
                   for p in pools])


def test_pieces_in_one_call_equal_the_dense_chunk_forward():
  params = models.init_params(CFG, jax.random.key(1))
  rng = np.random.default_rng(0)
  lens = (29, 11)
  toks = [rng.integers(0, CFG.vocab_size, n).tolist() for n in lens]
  a = PageAllocator(rows=2, page_size=PS, columns=COLS, num_pages=PAGES, max_pages=PAGES)
  for t in range(1, 40):            # interleaved, so each row's pages are scattered
    for b, n in enumerate(lens):
      a.ensure(b, min(t, n))
  T = 8
  # row 0 in pieces 0-7, 8-15, 16-23, 24-28, row 1 in 0-7, 8-10, all in one call; two padding
  # pieces on null pages
  pieces = [(b, i) for b, n in enumerate(lens) for i in range(0, n, T)]
  toks_PT = np.zeros((len(pieces) + 2, T), np.int32)
  table_PC = np.zeros((len(pieces) + 2, COLS), np.int32)
  start_P = np.zeros((len(pieces) + 2,), np.int32)
  for j, (b, i) in enumerate(pieces):
    piece = toks[b][i:i + T]
    toks_PT[j, :len(piece)], table_PC[j], start_P[j] = piece, a.table[b], i
  for fuse in (False, True):
    st = S.init_paged_state(CFG, 2, PAGES, PS, COLS, 8, jnp.float32)
    free = np.asarray(sorted(set(range(1, PAGES)) - set(a.table[a.table > 0].tolist())))
    k = [p.at[:, free].set(7.0) for p in st.cache["k"]]    # sentinels in pages nobody owns
    v = [p.at[:, free].set(7.0) for p in st.cache["v"]]
    dparams = S.make_decode_params(CFG, params, jnp.float32, fuse)
    k, v = S.prefill_pages(CFG, k, v, dparams, jnp.asarray(table_PC), jnp.asarray(toks_PT),
                           jnp.asarray(start_P))
    for b, n in enumerate(lens):
      want = _dense_kv(params, toks[b])
      np.testing.assert_allclose(_row_kv(k, a.table[b], n), want["k"], atol=1e-6)
      np.testing.assert_allclose(_row_kv(v, a.table[b], n), want["v"], atol=1e-6)
    for p in k + v:
      assert (np.asarray(p)[:, free] == 7.0).all()


def test_prefill_rows_paged_equals_prefill_pages_in_pieces():
  """prefill_rows (one chunk a row, stacked params) and prefill_pages (pieces, two calls)
  leave the same values in the rows' pages."""
  params = models.init_params(CFG, jax.random.key(2))
  toks = np.random.default_rng(1).integers(0, CFG.vocab_size, 24).tolist()
  a = PageAllocator(rows=1, page_size=PS, columns=COLS, num_pages=PAGES, max_pages=PAGES)
  a.ensure(0, 24)
  st = S.set_table(S.init_paged_state(CFG, 1, PAGES, PS, COLS, 8, jnp.float32),
                   jnp.asarray(a.table))
  st = S.prefill_rows(CFG, st, params, jnp.zeros((1,), jnp.int32), jnp.asarray([toks]),
                      jnp.zeros((1,), jnp.int32))
  dparams = S.make_decode_params(CFG, params, jnp.float32, True)
  fresh = S.init_paged_state(CFG, 1, PAGES, PS, COLS, 8, jnp.float32)
  k, v = fresh.cache["k"], fresh.cache["v"]
  for first in (0, 16):             # pieces 0-7, 8-15 in one call, then 16-23
    starts = [s for s in (first, first + 8) if s < 24]
    k, v = S.prefill_pages(CFG, k, v, dparams, jnp.asarray(np.stack([a.table[0]] * len(starts))),
                           jnp.asarray([toks[s:s + 8] for s in starts], jnp.int32),
                           jnp.asarray(starts, jnp.int32))
  np.testing.assert_allclose(_row_kv(k, a.table[0], 24), _row_kv(st.cache["k"], a.table[0], 24),
                             atol=1e-6)
  np.testing.assert_allclose(_row_kv(v, a.table[0], 24), _row_kv(st.cache["v"], a.table[0], 24),
                             atol=1e-6)
