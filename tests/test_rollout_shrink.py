"""Tail batch shrinking (rollout.tail_min_batch): once no prompt is queued and at most half the
slots hold rows, the engine halves the batch. Greedy multi-turn rollouts with searches must be
identical to the engine that never shrinks, for the dense and the paged layouts (a tight pool
that preempts rows included), and the slot-step accounting must still add up."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssp_jax import sampling as S
from ssp_jax.rollout.pages import NULL_PAGE, PageAllocator
from ssp_jax.testing.small_retriever import SmallBM25Retriever

from test_rollout_loop import PROMPTS, _engine, model, tags  # noqa: F401 (fixtures)
from test_rollout_paged import TINY, assert_same_trajectories

BUDGETS = [100, 14, 60, 9, 80, 30, 100, 20, 45, 12, 70, 25]   # rows end at very different times


def _run(model, tags, **kw):
  cfg, params, tok = model
  open_, close = tags
  eng = _engine(model, SmallBM25Retriever(), batch_size=8, search_open=open_,
                search_close=close, max_searches=3, **kw)
  prompts = PROMPTS * 2
  return eng.generate(params, prompts, jax.random.key(0), temperature=0.0,
                      max_new_tokens=BUDGETS, stop=[close])


@pytest.mark.parametrize("layout_kw", [dict(), dict(kv_layout="paged", page_size=8,
                                                    decode_attention="gather"),
                                       dict(kv_layout="paged", page_size=4, kv_max_tokens=240,
                                            decode_attention="gather")],
                         ids=["dense", "paged", "paged_tight_pool"])
def test_shrinking_tail_batch_keeps_greedy_rollouts(model, tags, layout_kw):
  full, full_stats = _run(model, tags, tail_min_batch=0, **layout_kw)
  small, stats = _run(model, tags, tail_min_batch=2, **layout_kw)
  assert "batch_shrinks" not in full_stats
  assert stats["batch_shrinks"] >= 2 and stats["batch_min"] <= 2   # 8 -> 4 -> 2
  assert sum(t.num_searches for t in full) >= 1
  assert_same_trajectories(full, small)
  # fewer slot-steps for the same tokens; every slot-step is a token, a wait or an empty slot
  assert stats["policy_tokens"] == full_stats["policy_tokens"]
  assert stats["slot_steps"] < full_stats["slot_steps"]
  for st in (stats, full_stats):
    assert st["policy_tokens"] + st["wait_slot_steps"] + st["empty_slot_steps"] == st["slot_steps"]
    assert st["kv_read_slot_steps"] >= st["kv_used_slot_steps"] > 0


def test_take_rows_moves_rows_and_empties_the_rest():
  st = S.init_paged_state(TINY, 4, 9, 4, 2, 3, np.float32)
  st = S.set_table(st, jnp.asarray([[1, 2], [3, 4], [5, 6], [7, 8]], np.int32))
  st = S.set_rows(st, jnp.arange(4), jnp.asarray([10, 11, 12, 13]),
                  jnp.asarray([5, 6, 7, 1]), jnp.ones((4,), bool))
  small = S.take_rows(st, jnp.asarray([2, 0]), jnp.asarray([True, False]))
  assert small.tok_B.tolist() == [12, 10] and small.pos_B.tolist() == [7, 0]
  assert small.cache["table"].tolist() == [[5, 6], [NULL_PAGE, NULL_PAGE]]
  assert small.cache["k"][0] is st.cache["k"][0]   # the pools are not copied

  a = PageAllocator(rows=4, page_size=4, columns=3, num_pages=10, max_pages=10)
  for row, tokens in ((0, 5), (2, 9)):
    assert a.ensure(row, tokens)
  pages2 = a.table[2].tolist()
  a.take_rows([2, 0], 2)
  assert a.table.shape == (2, 3) and a.table[0].tolist() == pages2 and a.owned == [3, 2]


def test_negative_tail_min_batch_names_the_field(model):
  with pytest.raises(ValueError, match="rollout.tail_min_batch=-1 must be >= 0"):
    _engine(model, None, tail_min_batch=-1)
