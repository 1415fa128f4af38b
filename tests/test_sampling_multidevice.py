"""Sharded sampling (batch over `data`, heads over `tensor`, on 8 fake CPU devices) equals
single-device sampling, including the search loop's observation splicing."""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from models import Sharder, make_mesh  # noqa: E402
from ssp_jax.rollout import RolloutEngine, get_rollout_config  # noqa: E402
from ssp_jax.testing.small_retriever import SmallBM25Retriever  # noqa: E402
from ssp_jax.testing.tiny_checkpoint import load_params, make_tiny_checkpoint  # noqa: E402
from ssp_jax.tokenizer import Tokenizer  # noqa: E402

PROMPTS = ["Who wrote Moby-Dick?", "The capital of France is", "a", "Paris is",
           "Numbers 1851 2024", "<think> I need to find", "Edinburgh", "Marie Curie was"]


def _run(path, sharder, temperature, close, **kw):
  cfg, params = load_params(path, sharder=sharder)
  tok = Tokenizer.from_dir(path)
  rc = get_rollout_config()
  rc.update(dict(dtype="float32", cache_dtype="float32", batch_size=4, cache_min_len=32,
                 prefill_chunk=16, steps_per_call=12, max_obs_tokens=40, topk=2,
                 search_open=" ", search_close=close, max_searches=2))
  rc.update(kw)
  eng = RolloutEngine(cfg, tok, rc, SmallBM25Retriever(), sharder)
  return eng.generate(params, PROMPTS, jax.random.key(4), temperature=temperature,
                      max_new_tokens=60, stop=[close]).trajectories


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
def test_sharded_equals_single_device(tmp_path):
  path = make_tiny_checkpoint(str(tmp_path), "qwen2", "chatml", seed=2, heads=4, kv_heads=2)
  sharder = Sharder(make_mesh((("data", 4), ("tensor", 2))))
  for temperature, close in [(0.0, "e"), (1.0, "a")]:
    single = _run(path, None, temperature, close)
    sharded = _run(path, sharder, temperature, close)
    for a, b in zip(single, sharded):
      assert a.response_ids == b.response_ids
      assert a.loss_mask == b.loss_mask and a.stop_reason == b.stop_reason
      np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)
    assert sum(t.num_searches for t in single) >= 1


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
def test_greedy_dense_paged_and_sharded_engines_equal(tmp_path):
  """The same prompts, greedy, with search tool calls spliced: the dense engine, the paged one
  (kv_layout="paged") and the sharded ones (data x tensor mesh: pools sharded over kv heads, the
  page table over the batch) give the same trajectories."""
  path = make_tiny_checkpoint(str(tmp_path), "qwen2", "chatml", seed=2, heads=4, kv_heads=2)
  sharder = Sharder(make_mesh((("data", 4), ("tensor", 2))))
  paged = dict(kv_layout="paged", page_size=8, decode_attention="gather")
  dense = _run(path, None, 0.0, "e")
  assert sum(t.num_searches for t in dense) >= 1 and any(0 in t.loss_mask for t in dense)
  for name, got in [("paged", _run(path, None, 0.0, "e", **paged)),
                    ("sharded", _run(path, sharder, 0.0, "e")),
                    ("sharded paged", _run(path, sharder, 0.0, "e", **paged))]:
    for a, b in zip(dense, got):
      assert a.response_ids == b.response_ids, name
      assert a.loss_mask == b.loss_mask and a.stop_reason == b.stop_reason, name
      assert a.queries == b.queries and a.docs == b.docs, name
      np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4, err_msg=name)


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
@pytest.mark.parametrize("layout_kw", [dict(), dict(kv_layout="paged", page_size=8,
                                                    decode_attention="gather")],
                         ids=["dense", "paged"])
def test_sharded_tail_shrink_equals_single_device(tmp_path, layout_kw):
  """The tail batch shrinking (rollout.tail_min_batch) on the data x tensor mesh: the batch
  halves only to multiples of the data axes (8 -> 4 here) and the greedy rollouts equal the
  single-device engine that never shrinks."""
  path = make_tiny_checkpoint(str(tmp_path), "qwen2", "chatml", seed=2, heads=4, kv_heads=2)
  sharder = Sharder(make_mesh((("data", 4), ("tensor", 2))))
  budgets = [60, 8, 40, 6, 50, 12, 30, 10]
  outs = []
  for sh, tmb in ((None, 0), (sharder, 2)):
    cfg, params = load_params(path, sharder=sh)
    rc = get_rollout_config()
    rc.update(dict(dtype="float32", cache_dtype="float32", batch_size=8, cache_min_len=32,
                   prefill_chunk=16, steps_per_call=12, max_obs_tokens=40, topk=2,
                   search_open=" ", search_close="e", max_searches=2, tail_min_batch=tmb,
                   **layout_kw))
    eng = RolloutEngine(cfg, Tokenizer.from_dir(path), rc, SmallBM25Retriever(), sh)
    outs.append(eng.generate(params, PROMPTS, jax.random.key(4), temperature=0.0,
                             max_new_tokens=budgets, stop=["e"]))
  (single, _), (sharded, stats) = outs
  assert stats["batch_shrinks"] == 1 and stats["batch_min"] == 4
  for a, b in zip(single, sharded):
    assert a.response_ids == b.response_ids
    assert a.loss_mask == b.loss_mask and a.stop_reason == b.stop_reason
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
def test_paged_pools_split_over_kv_heads_and_compile_ahead_on_the_mesh(tmp_path):
  """On the data x tensor mesh the paged pools [K, P, T, H] are split over the KV heads from the
  first state on (the constraint named the cache's length axis before 2026-12-04, so the empty
  pools were whole on every device and changed layout at the first prefill). With
  rollout.compile_ahead every prefill and decode program of the sharded call was compiled ahead
  (none again by the call: the planned shardings are the ones the call passes) and the tokens
  are the single-device engine's."""
  from ssp_jax import sampling as S
  path = make_tiny_checkpoint(str(tmp_path), "qwen2", "chatml", seed=2, heads=4, kv_heads=2)
  sharder = Sharder(make_mesh((("data", 4), ("tensor", 2))))
  cfg, _ = load_params(path, sharder=sharder)
  st = S.init_paged_state(cfg, 4, 40, 8, 16, 8, np.float32, sharder)
  assert tuple(st.cache["k"][0].sharding.spec)[:1] == ("tensor",)
  assert not any(tuple(st.cache["k"][0].sharding.spec)[1:])
  paged = dict(kv_layout="paged", page_size=8, decode_attention="gather")
  single = _run(path, None, 0.0, "e", **paged)
  # steps and page size no other test here uses: the programs are not in the cache yet
  eng_out = _run_stats(path, sharder, compile_ahead=2, steps_per_call=10,
                       **dict(paged, page_size=4))
  by_fn = eng_out.stats["compiled_functions"]
  assert "jit(decode)" not in by_fn and "jit(prefill_pages)" not in by_fn, by_fn
  assert by_fn.get("jit(decode) [ahead]", 0) >= 1 and eng_out.stats.get("ahead_errors", 0) == 0
  for a, b in zip(single, eng_out.trajectories):
    assert a.response_ids == b.response_ids
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)


def _run_stats(path, sharder, **kw):
  cfg, params = load_params(path, sharder=sharder)
  rc = get_rollout_config()
  rc.update(dict(dtype="float32", cache_dtype="float32", batch_size=4, cache_min_len=32,
                 prefill_chunk=16, steps_per_call=12, max_obs_tokens=40, topk=2,
                 search_open=" ", search_close="e", max_searches=2))
  rc.update(kw)
  eng = RolloutEngine(cfg, Tokenizer.from_dir(path), rc, SmallBM25Retriever(), sharder)
  return eng.generate(params, PROMPTS, jax.random.key(4), temperature=0.0, max_new_tokens=60,
                      stop=["e"])
