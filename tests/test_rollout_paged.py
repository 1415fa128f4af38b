"""Paged KV cache (rollout.kv_layout="paged"): the page allocator, a sentinel test that no row
reads or writes a page it does not own, the Pallas kernel against the pure-JAX path, and
multi-turn greedy rollouts identical to the dense layout (with and without preemption)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from models.config import ModelConfig
from ssp_jax import sampling as S
from ssp_jax.rollout.pages import NULL_PAGE, PageAllocator
from ssp_jax.sampling import paged as PG
from ssp_jax.testing.small_retriever import SmallBM25Retriever

from test_rollout_loop import PROMPTS, _engine, model, tags  # noqa: F401 (fixtures)

TINY = ModelConfig(model_type="qwen2", vocab_size=256, hidden_size=32, intermediate_size=64,
                   num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8)


# -- allocator --------------------------------------------------------------------------------
def test_rows_of_very_different_lengths_share_the_pool():
  a = PageAllocator(rows=3, page_size=8, columns=16, num_pages=20, max_pages=20)
  for step in range(1, 101):
    for row, length in enumerate((1, 100, 7)):
      assert a.ensure(row, min(step, length))
  assert a.owned == [1, 13, 1]              # pages follow lengths, not the longest row
  owned = [set(a.table[r, :a.owned[r]].tolist()) for r in range(3)]
  assert not (owned[0] & owned[1] or owned[0] & owned[2] or owned[1] & owned[2])
  assert NULL_PAGE not in set().union(*owned)
  assert (a.table[0, 1:] == NULL_PAGE).all() and (a.table[1, 13:] == NULL_PAGE).all()
  assert a.pages_in_use == 15 and len(a.free) == 19 - 15


def test_freed_pages_are_reused_and_allocation_is_all_or_nothing():
  a = PageAllocator(rows=2, page_size=4, columns=8, num_pages=6, max_pages=12)
  assert a.ensure(0, 20)                    # 5 pages: the whole pool but the null page
  first = set(a.table[0, :5].tolist())
  assert not a.ensure(1, 1)                 # no free page
  assert a.owned[1] == 0
  a.release(0)
  assert (a.table[0] == NULL_PAGE).all() and a.owned[0] == 0
  assert a.ensure(1, 12)
  assert set(a.table[1, :3].tolist()) <= first   # the next prompt gets the freed pages
  assert not a.ensure(0, 13)                # 4 pages wanted, 2 free: nothing is taken
  assert a.owned[0] == 0 and len(a.free) == 2
  a.grow(12)
  assert a.ensure(0, 13) and a.num_pages == 12
  assert not a.ensure(0, 33)                # more columns than the table has


def test_bad_page_size_names_the_field():
  with pytest.raises(ValueError, match="rollout.page_size"):
    PageAllocator(rows=1, page_size=0, columns=1, num_pages=2, max_pages=2)


# -- device path: sentinels ---------------------------------------------------------------------
def _prefill_all(st, params, prompts):
  for b, p in enumerate(prompts):
    st = S.prefill_rows(TINY, st, params, jnp.asarray([b], jnp.int32),
                        jnp.asarray([p[:-1]], jnp.int32), jnp.zeros((1,), jnp.int32))
  B = len(prompts)
  return S.set_rows(st, jnp.arange(B, dtype=jnp.int32), jnp.asarray([p[-1] for p in prompts]),
                    jnp.asarray([len(p) - 1 for p in prompts], jnp.int32), jnp.ones((B,), bool))


def _decode(st, dparams, B, N, attn_impl="einsum"):
  tables = S.build_stop_tables([b"x"] * TINY.vocab_size, []).to_device()
  return S.decode(TINY, st, dparams, tables, jnp.asarray([-1], jnp.int32), jnp.ones((B,), bool),
                  jnp.full((B,), N, jnp.int32), jnp.int32(B + 1), jax.random.key(0),
                  num_steps=N, sampling=S.SamplingParams(0.0), attn_impl=attn_impl)


def test_no_row_reads_or_writes_a_page_it_does_not_own():
  """Every page a row does not own (the null page and free pages) is filled with NaN after the
  prefill; decoding must give exactly the dense layout's tokens, finite log-probs, and leave
  the NaN pages untouched."""
  params = models.init_params(TINY, jax.random.key(1))
  dparams = S.make_decode_params(TINY, params, jnp.float32)
  rng = np.random.default_rng(0)
  lens, N, T = (3, 37, 9, 20), 12, 4
  prompts = [rng.integers(0, TINY.vocab_size, n).tolist() for n in lens]
  B = len(prompts)
  window = 15
  dense = _prefill_all(S.init_state(TINY, B, 64, window, jnp.float32), params, prompts)
  _, want = _decode(dense, dparams, B, N)

  # rows 0..3 plus a row 4 that finishes: its pages, scattered between theirs, are free
  a = PageAllocator(rows=B + 1, page_size=T, columns=16, num_pages=48, max_pages=48)
  for t in range(1, 64):           # interleaved: each row's pages are scattered in the pool
    for b, n in enumerate(lens + (40,)):
      a.ensure(b, min(t, n + N + 1))
  a.release(B)
  table = lambda: jnp.asarray(a.table[:B])   # fresh: the state (and its table) is donated
  st = S.init_paged_state(TINY, B, 48, T, 16, window, jnp.float32)
  st = _prefill_all(S.set_table(st, table()), params, prompts)
  unowned = np.asarray(sorted(set(range(48)) - set(a.table[a.table > 0].tolist())))
  assert NULL_PAGE in unowned and len(unowned) > 10 and unowned[1] < 20
  nan = lambda ps: [p.at[:, unowned].set(jnp.nan) for p in ps]
  st = S.set_table(st._replace(cache={**st.cache, "k": nan(st.cache["k"]),
                                      "v": nan(st.cache["v"])}), table())
  st, got = _decode(st, dparams, B, N, attn_impl="gather")
  assert np.isfinite(np.asarray(got.logprobs_BN)).all()
  np.testing.assert_array_equal(np.asarray(got.tokens_BN), np.asarray(want.tokens_BN))
  np.testing.assert_allclose(np.asarray(got.logprobs_BN), np.asarray(want.logprobs_BN),
                             atol=1e-5)
  for p in st.cache["k"] + st.cache["v"]:
    assert np.isnan(np.asarray(p[:, unowned])).all()


def test_pallas_kernel_equals_gather_path():
  """JAX's Pallas GPU kernel (interpret mode on CPU) == the pure-JAX gather attention."""
  K, G, H, T, P = 2, 3, 16, 8, 12
  r = np.random.default_rng(0)
  kp, vp = (jnp.asarray(r.normal(size=(K, P, T, H)), jnp.float32) for _ in range(2))
  q = jnp.asarray(r.normal(size=(3, K, G, H)), jnp.float32)
  table = jnp.asarray([[1, 2, 3, 0], [4, 5, 0, 0], [6, 7, 8, 9]], jnp.int32)
  lens = jnp.asarray([20, 9, 32], jnp.int32)
  want = PG.gather_attention(q, kp, vp, table, lens)
  got = PG.pallas_attention(q, kp, vp, table, lens, interpret=True)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


# -- engine: multi-turn greedy == dense ---------------------------------------------------------
def assert_same_trajectories(want, got, atol=2e-4):
  assert len(got) == len(want)
  for w, g in zip(want, got):
    assert g.response_ids == w.response_ids
    assert g.loss_mask == w.loss_mask and g.stop_reason == w.stop_reason
    assert g.queries == w.queries
    np.testing.assert_allclose(g.logprobs, w.logprobs, atol=atol)


def _greedy_search_run(model, tags, **rollout_kw):
  """PROMPTS rolled out greedily with search (up to 3 a row): (trajectories, stats)."""
  params = model[1]
  open_, close = tags
  eng = _engine(model, SmallBM25Retriever(), search_open=open_, search_close=close,
                max_searches=3, **rollout_kw)
  return eng.generate(params, PROMPTS, jax.random.key(0), temperature=0.0, max_new_tokens=100,
                      stop=[close])


@pytest.mark.parametrize("paged_kw", [dict(page_size=8),
                                      dict(page_size=4, kv_max_tokens=160),
                                      dict(page_size=4, kv_pool="grow"),
                                      dict(page_size=8, decode_attention="pallas"),
                                      dict(page_size=8, decode_attention="pallas_rope"),
                                      dict(page_size=8, decode_attention="pallas_jax")],
                         ids=["ample_pool", "tight_pool_preempts", "growing_pool",
                              "pallas_interpret", "pallas_rope_interpret",
                              "pallas_jax_interpret"])
def test_multiturn_greedy_paged_equals_dense(model, tags, paged_kw):
  dense, _ = _greedy_search_run(model, tags)
  paged, stats = _greedy_search_run(model, tags, kv_layout="paged",
                                    **{"decode_attention": "gather", **paged_kw})
  assert sum(t.num_searches for t in dense) >= 1
  assert_same_trajectories(dense, paged)
  if paged_kw.get("decode_attention", "").startswith("pallas"):   # reads each row's own slots
    assert 1.0 <= stats["kv_read_over_used"] < 1.5
  if "kv_max_tokens" in paged_kw:   # the pool holds fewer tokens than the slots want
    assert stats["preemptions"] >= 1
    assert stats["kv_pages_peak"] <= 160 // 4
  if "kv_pool" in paged_kw:         # grown by doubling from batch_size x cache_min_len
    assert stats["kv_pool_pages"] > 1 + 4 * 32 // 4


def test_bad_kv_layout_names_the_field(model):
  with pytest.raises(ValueError, match="rollout.kv_layout"):
    _engine(model, None, kv_layout="ragged")
  with pytest.raises(ValueError, match="rollout.kv_pool"):
    _engine(model, None, kv_layout="paged", kv_pool="elastic")


def test_bad_decode_attention_names_the_field_and_layout(model):
  """A misspelt decode attention is refused up front (the paged layout used to run it as
  "gather"; the dense one failed inside the decode program's trace), as is a paged-only one on
  the dense layout; a dense name on the paged layout stays allowed (it means "gather")."""
  with pytest.raises(ValueError, match=r"rollout.decode_attention='palas'.*paged"):
    _engine(model, None, kv_layout="paged", decode_attention="palas")
  with pytest.raises(ValueError, match=r"rollout.decode_attention='pallas_jax'.*dense"):
    _engine(model, None, kv_layout="dense", decode_attention="pallas_jax")
  assert _engine(model, None, kv_layout="paged", decode_attention="einsum").cfg.kv_layout == "paged"


def test_step_totals_sum_a_steps_calls_into_rollout_metrics(model, tags):
  """The `rollout/*` metrics a game logs (rollout/stats.py StepTotals) from a dense and a paged
  call: the tokens the trajectories hold, the decode steps, and the paged call's pool use."""
  from ssp_jax.rollout.stats import StepTotals
  dense, ds = _greedy_search_run(model, tags)
  paged, ps = _greedy_search_run(model, tags, kv_layout="paged", decode_attention="gather",
                                 page_size=8)
  totals = StepTotals()
  totals.add(ds)
  totals.add(ps)
  m = totals.metrics()
  assert m["rollout/calls"] == 2
  assert m["rollout/policy_tokens"] == sum(sum(t.loss_mask) for t in dense + paged) > 0
  assert m["rollout/decode_steps"] == ds["decode_steps"] + ps["decode_steps"] > 0
  assert m["time/rollout_decode"] == pytest.approx(ds["decode_s"] + ps["decode_s"])
  assert m["perf/decode_ms_per_step"] == pytest.approx(
      1000 * m["time/rollout_decode"] / m["rollout/decode_steps"])
  assert 0 < m["rollout/occupancy"] <= 1
  assert m["rollout/kv_pool_use"] == ps["kv_pages_peak"] / ps["kv_pool_pages"]
  assert 0 < m["rollout/kv_pool_use"] <= 1 and "kv_pool_pages" not in ds
  totals.clear()
  assert totals.metrics() == {}
