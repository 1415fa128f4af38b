"""Long multi-turn responses on the paged layout compile few programs (issue 26, item 3): the
pool is sized once per call (rollout.kv_pool="fixed"), so no decode or prefill shape follows its
growth, and the attended page-table width takes at most four sizes. Before, the pool doubled
from batch_size x cache_min_len and the width doubled from one page: each (pool, width) pair was
another decode loop, 32 programs for the 8,192-token CPU benchmark (bench/RESULTS.md).
The paged prefill feeds every row's tokens as pieces of one length, in calls of three sizes
(rollout/prefill.py `piece_parts`), through the pools alone: one program per (size, width),
none per decode batch. Before, one per (decode batch, row group, chunk bucket, width)."""
import os
import sys

import jax
import numpy as np

import models
from models.config import ModelConfig
from ssp_jax import sampling as S
from ssp_jax.rollout import RolloutEngine, get_rollout_config
from ssp_jax.rollout.prefill import piece_parts
from ssp_jax.rollout.rows import pow2
from ssp_jax.rollout.slots import pool_pages, table_width
from ssp_jax.testing.small_retriever import SmallBM25Retriever

# appended, not first: bench/retrieval.py must not shadow the retrieval package
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from sampler import SyntheticTokenizer  # noqa: E402

CFG = ModelConfig(model_type="qwen2", vocab_size=128, hidden_size=32, intermediate_size=64,
                  num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8)


def test_table_widths_and_pool_sizes_are_few():
  for columns in (1, 2, 8, 64, 256):
    widths = {table_width(p, columns) for p in range(1, columns + 1)}
    assert len(widths) <= 4 and max(widths) == columns
    assert all(table_width(p, columns) >= p for p in range(1, columns + 1))
  for need in range(1, 5000):
    assert need <= pool_pages(need) <= need * 1.125
  assert len({pool_pages(n) for n in range(2049, 4097)}) == 8   # 16 sizes an octave at most


def _engine(batch: int, **kw) -> RolloutEngine:
  rc = get_rollout_config()
  rc.update(dict(dtype="float32", cache_dtype="float32", batch_size=batch, max_prompt_tokens=12,
                 max_response_tokens=200, cache_min_len=16, prefill_chunk=32, steps_per_call=32,
                 max_obs_tokens=16, max_searches=100, kv_layout="paged", page_size=4,
                 decode_attention="gather", prefill_piece=8, prefill_tokens=128))
  rc.update(kw)
  return RolloutEngine(CFG, SyntheticTokenizer(CFG.vocab_size, search_every=64), rc,
                       SmallBM25Retriever())


def _prompts(n: int) -> list[list[int]]:
  rng = np.random.default_rng(0)
  return [rng.integers(0, CFG.vocab_size, 12).tolist() for _ in range(n)]


def test_long_multiturn_responses_compile_few_programs():
  """Four rows of 12-token prompts with 200-token budgets, searching every ~64 tokens, on pages
  of 4 slots. The old code grew the pool 17 -> 34 -> 68 -> 136 -> 272 pages and the width
  16 -> 32 -> 64 columns, and each (pool, width) pair compiled a decode loop, prefills and
  set_rows: 5 decode loops, 5 prefills, 5 set_rows, 3 pool growths. Now one pool, the widths
  16, 32 and 64 (at least 64 / 8), one set_rows."""
  params = models.init_params(CFG, jax.random.key(0))
  trajs, stats = _engine(4).generate(params, _prompts(4), jax.random.key(1))
  assert [len(t.response_ids) for t in trajs] == [200] * 4 and stats["searches"] >= 8
  assert pow2(-(-(12 + 200 + 32 + 1) // 4)) == 64           # table columns
  by_fn = stats["compiled_functions"]
  assert by_fn.get("jit(decode)", 0) <= 3, by_fn            # one per width, one pool
  assert by_fn.get("jit(prefill_pages)", 0) <= 3 and "jit(prefill_rows)" not in by_fn, by_fn
  assert by_fn.get("jit(_set_rows)", 0) <= 1 and "jit(set_rows)" not in by_fn, by_fn
  assert "jit(grow_pages)" not in by_fn, by_fn
  assert stats["kv_pool_pages"] == pool_pages(1 + 4 * -(-(12 + 200) // 4)) == 224
  assert stats["kv_pages_peak"] <= stats["kv_pool_pages"]


def test_paged_prefill_compiles_per_size_and_width_not_per_batch(monkeypatch):
  """Eight rows with budgets from 200 down to 40 tokens, observations of up to 40 tokens, the
  tail batch shrinking 8 -> 4 -> 2. The chunked prefill compiled 9 programs here, one per
  (decode batch 8 or 4, row group 1, 2 or 8, bucket 16 or 32, width 16, 32 or 64 columns); the
  pieces (8 tokens, calls of 1, 4 or 16 of them: 128 tokens at most) compile one per
  (size, width) seen: 5. Every call has a piece-count size and the decode's width."""
  calls = []
  real = S.prefill_pages

  def spy(cfg, k, v, dparams, table_PC, toks_PT, start_P, **kw):
    calls.append((toks_PT.shape, table_PC.shape[1]))
    return real(cfg, k, v, dparams, table_PC, toks_PT, start_P, **kw)
  monkeypatch.setattr(S, "prefill_pages", spy)
  decodes = []
  real_decode = S.decode

  def spy_decode(cfg, st, *a, **kw):
    decodes.append(st.cache["table"].shape[1])
    return real_decode(cfg, st, *a, **kw)
  monkeypatch.setattr(S, "decode", spy_decode)
  budgets = [200, 180, 150, 120, 100, 90, 60, 40]
  params = models.init_params(CFG, jax.random.key(0))
  trajs, stats = _engine(8, max_obs_tokens=40, tail_min_batch=2).generate(
      params, _prompts(8), jax.random.key(1), max_new_tokens=budgets)
  assert [len(t.response_ids) for t in trajs] == budgets and stats["searches"] >= 8
  assert stats["batch_min"] == 2 and stats["batch_shrinks"] == 2
  assert {shape[1] for shape, _ in calls} == {8}
  assert {shape[0] for shape, _ in calls} <= {1, 4, 16}
  assert {width for _, width in calls} <= set(decodes)
  by_fn = stats["compiled_functions"]
  prefills = by_fn.get("jit(prefill_pages)", 0) + by_fn.get("jit(prefill_rows)", 0)
  assert prefills == len(set(calls)) <= 5, by_fn            # the chunked prefill: 9


def test_piece_parts_cover_every_piece_in_order_with_three_sizes():
  for cap in (1, 3, 16, 64):
    sizes = {max(1, cap // 16), max(1, cap // 4), cap}
    for n in range(1, 5 * cap + 2):
      parts = piece_parts(n, cap)
      assert [f for f, _ in parts] == [sum(s for _, s in parts[:i]) for i in range(len(parts))]
      assert sum(s for _, s in parts) >= n > sum(s for _, s in parts[:-1])
      assert {s for _, s in parts} <= sizes
      pad = sum(s for _, s in parts) - n
      assert pad <= max(parts[-1][1] // 4, min(sizes) - 1), (cap, n, parts)
  assert [s for _, s in piece_parts(37, 64)] == [16, 16, 4, 4]


def test_a_call_that_fits_an_earlier_fixed_pool_takes_it_and_compiles_nothing():
  """rollout.kv_pool_reuse: the RAG verifier's calls differ in their prompts' lengths, so their
  fixed pools land on another `pool_pages` size now and then, and each new size recompiles
  every program of the call (likely the 16 programs, 37 s, of the RAG check at step 3 of
  configs/ssp_small_h200.py on an H200). A later call whose rows fit the pool of an earlier
  call of the same slots takes it: no compile, the same greedy tokens as its own smaller
  pool."""
  params = models.init_params(CFG, jax.random.key(0))
  prompts = _prompts(4)
  eng = _engine(4)
  _, first = eng.generate(params, prompts, jax.random.key(1), max_new_tokens=200,
                          use_search=False, temperature=0.0)
  budgets = [150, 120, 100, 60]
  trajs, again = eng.generate(params, prompts, jax.random.key(2), max_new_tokens=budgets,
                              use_search=False, temperature=0.0)
  assert again["kv_pool_pages"] == first["kv_pool_pages"] == 224 and again["kv_pool_reused"] == 1
  assert again["compiles"] == 0, again["compiled_functions"]
  own = _engine(4, kv_pool_reuse=False)
  mine, alone = own.generate(params, prompts, jax.random.key(2), max_new_tokens=budgets,
                             use_search=False, temperature=0.0)
  assert alone["kv_pool_pages"] == pool_pages(1 + sum(-(-(12 + b) // 4) for b in budgets)) < 224
  assert "kv_pool_reused" not in alone
  assert [t.response_ids for t in trajs] == [t.response_ids for t in mine]
