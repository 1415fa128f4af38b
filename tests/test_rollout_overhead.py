"""Where multi-turn rollout time goes, and what must not come back: the engine's time breakdown
(the stats `generate` returns), no recompilation in a second identical rollout, the write-first
decode attention equal to the read-only one in whole rollouts, and the decode step's compiled
scratch memory (the 7B multi-turn step once needed 33.5 GiB of it; bench/decode_memory.py)."""
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models.config import ModelConfig
from ssp_jax.rollout import compiles
from ssp_jax.testing.small_retriever import SmallBM25Retriever

from test_rollout_loop import PROMPTS, _engine, model, tags  # noqa: F401 (fixtures)

# appended, not first: bench/retrieval.py must not shadow the retrieval package
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from decode_memory import decode_memory  # noqa: E402


def _rollout(model, tags, **kw):
  cfg, params, tok = model
  open_, close = tags
  eng = _engine(model, SmallBM25Retriever(), search_open=open_, search_close=close,
                max_searches=3, **kw)
  trajs, stats = eng.generate(params, PROMPTS, jax.random.key(0), temperature=0.0,
                              max_new_tokens=100, stop=[close])
  return eng, trajs, stats


def test_compile_counter_counts_a_new_shape():
  compiles.install()
  before = compiles.snapshot()
  jax.jit(lambda x: x * 3 + 1)(jnp.zeros((7, 13)))
  n, secs, by_fn = compiles.since(before)
  assert n >= 1 and secs > 0 and by_fn


def test_a_program_read_back_from_the_persistent_cache_still_counts():
  """The test session stores compiled programs on disk (tests/conftest.py). JAX times a read
  from that cache as a backend compile, so the counter still sees it and the "compiles
  nothing" checks below keep failing for a program a call had to fetch; guarded here."""
  if not (jax.config.jax_enable_compilation_cache and jax.config.jax_compilation_cache_dir):
    pytest.skip("the persistent compilation cache is off (SSP_JAX_TEST_COMPILE_CACHE=0)")
  compiles.install()
  hits = []
  jax.monitoring.register_event_listener(
      lambda e, **kw: hits.append(e) if e == "/jax/compilation_cache/cache_hits" else None)
  f = lambda x: jnp.tanh(x @ x.T) * 5 + 2
  x = jnp.ones((11, 17))
  old = jax.config.jax_persistent_cache_min_compile_time_secs
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  try:
    jax.jit(f)(x).block_until_ready()
    jax.clear_caches()                 # forgotten in memory, stored on disk
    before, n_hits = compiles.snapshot(), len(hits)
    jax.jit(f)(x).block_until_ready()
  finally:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", old)
  n, _, by_fn = compiles.since(before)
  assert len(hits) - n_hits == 1                     # read back from disk, not compiled
  assert n == 1 and by_fn == {"jit(<lambda>)": 1}    # and counted all the same


def test_second_identical_rollout_compiles_nothing_and_stats_add_up(model, tags):
  _, first, _ = _rollout(model, tags)
  eng2, second, st = _rollout(model, tags)
  assert sum(t.num_searches for t in second) >= 1 and st["searches"] >= 1
  assert st["compiles"] == 0, st["compiled_functions"]
  for a, b in zip(first, second):
    assert a.response_ids == b.response_ids and a.logprobs == b.logprobs
  # the breakdown: every part timed, the parts within the wall time
  parts = ("plan_s", "prefill_s", "decode_s", "transfer_s", "absorb_s", "search_s", "splice_s")
  assert all(st[k] >= 0 for k in parts)
  assert sum(st[k] for k in parts) + st["other_s"] <= st["wall_s"] * 1.001 + 1e-6
  assert st["policy_tokens"] == sum(sum(t.loss_mask) for t in second)
  assert 0 < st["decode_steps"] <= st["decode_calls"] * int(eng2.cfg.steps_per_call)
  assert st["slot_steps"] == st["decode_steps"] * int(eng2.cfg.batch_size)
  assert st["occupancy"] == st["policy_tokens"] / st["slot_steps"] and 0 < st["occupancy"] <= 1
  assert st["decode_ms_per_step"] > 0


def test_write_first_attention_equals_read_only_in_rollouts(model, tags):
  _, new, _ = _rollout(model, tags, decode_attention="einsum")
  _, old, _ = _rollout(model, tags, decode_attention="einsum_readonly")
  assert sum(t.num_searches for t in new) >= 1
  for a, b in zip(new, old):
    assert a.response_ids == b.response_ids and a.stop_reason == b.stop_reason
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=2e-5)


@pytest.mark.parametrize("layout", ["dense", "paged"])
def test_unrolled_decode_loop_gives_the_same_rollouts(model, tags, layout):
  """rollout.decode_unroll runs several decode steps a while-loop iteration, those past the
  loop's exit gated off: sampled multi-turn rollouts (calls that exit early, searches, the
  tail shrinking) are the same token for token as one step an iteration."""
  cfg, params, tok = model
  open_, close = tags
  out = {}
  for unroll in (1, 3):
    eng = _engine(model, SmallBM25Retriever(), search_open=open_, search_close=close,
                  max_searches=3, kv_layout=layout, decode_unroll=unroll, steps_per_call=7,
                  tail_min_batch=2)
    out[unroll], stats = eng.generate(params, PROMPTS, jax.random.key(3), temperature=1.0,
                                      max_new_tokens=60, stop=[close])
    assert stats["decode_calls"] > 3
  assert sum(t.num_searches for t in out[1]) >= 1
  for a, b in zip(out[1], out[3]):
    assert a.response_ids == b.response_ids and a.stop_reason == b.stop_reason
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-6)
  with pytest.raises(ValueError, match="rollout.decode_unroll=0"):
    _engine(model, None, decode_unroll=0)


def sampled_rollouts_equal(model, tags, layout, field, impl="pallas"):
  """Sampled multi-turn rollouts (searches, early exits, the tail shrinking to batches that
  are not multiples of 16) with rollout.<field> "xla" and `impl`: the same tokens and stop
  reasons, the log-probs within fp32 rounding."""
  cfg, params, tok = model
  open_, close = tags
  out = {}
  for name in ("xla", impl):
    eng = _engine(model, SmallBM25Retriever(), search_open=open_, search_close=close,
                  max_searches=3, kv_layout=layout, steps_per_call=7, tail_min_batch=2,
                  **{field: name})
    out[name], _ = eng.generate(params, PROMPTS, jax.random.key(3), temperature=1.0,
                                max_new_tokens=60, stop=[close])
  assert sum(t.num_searches for t in out["xla"]) >= 1
  for a, b in zip(out["xla"], out[impl]):
    assert a.response_ids == b.response_ids and a.stop_reason == b.stop_reason
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=2e-5)


def engine_refuses_bad_choices(model, field, monkeypatch):
  """rollout.<field>: an unknown name, and "pallas" on a backend without Triton, are errors
  naming the field."""
  with pytest.raises(ValueError, match=f"rollout.{field}='fused' unknown"):
    _engine(model, None, **{field: "fused"})
  with monkeypatch.context() as m:
    m.setattr(jax, "default_backend", lambda: "tpu")
    with pytest.raises(ValueError, match=f"rollout.{field}='pallas' is a Triton kernel"):
      _engine(model, None, **{field: "pallas"})


@pytest.mark.parametrize("layout", ["dense", "paged"])
def test_fused_head_gives_the_same_rollouts(model, tags, layout, monkeypatch):
  """rollout.decode_head="pallas" (the projection and the draw's block statistics in one
  kernel, sampling/head_pallas.py; interpret mode here): sampled multi-turn rollouts with
  searches, early exits and the tail shrinking to batches that are not multiples of 16 are
  the same tokens as the XLA head's, the log-probs within fp32 rounding."""
  cfg, params, tok = model
  sampled_rollouts_equal(model, tags, layout, "decode_head")
  engine_refuses_bad_choices(model, "decode_head", monkeypatch)
  eng = _engine(model, None, decode_head="pallas")
  with pytest.raises(ValueError, match="rollout.decode_head='pallas' draws without top-k"):
    eng.generate(params, PROMPTS[:1], jax.random.key(0), temperature=1.0, top_k=5,
                 max_new_tokens=4)


def test_decode_step_scratch_is_small_next_to_the_cache():
  """The read-only step copied the whole carried cache each step (scratch ~1.5x the cache);
  the write-first step must need a small fraction of it."""
  cfg = ModelConfig(model_type="qwen2", vocab_size=256, hidden_size=64, intermediate_size=128,
                    num_layers=4, num_heads=4, num_kv_heads=2, head_dim=16)
  new = decode_memory(cfg, 16, 1024, jnp.dtype("float32"), "einsum", steps=8)
  old = decode_memory(cfg, 16, 1024, jnp.dtype("float32"), "einsum_readonly", steps=8)
  assert old["temp_over_cache"] > 1.0          # the bug this guards against, still visible
  assert new["temp_over_cache"] < 0.3, new
  assert new["alias_bytes"] >= new["cache_bytes"]   # the cache is updated in place (donated)


def test_decode_loop_makes_no_copy_of_a_layers_cache():
  """The compiled decode loop updates each layer's K/V buffer in place and reads it as stored:
  no copy, transpose or slice of a cache-sized buffer per step (with the stacked
  [L, B, S, K, H] cache there were three per layer, for K and V each)."""
  import re
  from ssp_jax import sampling as S
  cfg = ModelConfig(model_type="qwen2", vocab_size=256, hidden_size=64, intermediate_size=128,
                    num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16)
  B, L = 4, 96
  sds = jax.ShapeDtypeStruct
  params = jax.tree.map(lambda s: sds(s, jnp.float32), __import__("models").param_shapes(cfg),
                        is_leaf=lambda t: isinstance(t, tuple))
  dparams = jax.eval_shape(lambda p: S.decode_params(cfg, p, jnp.float32), params)
  host = S.build_stop_tables([b"x"] * cfg.vocab_size, ["</search>"])
  tables = S.StopTables(*(sds(getattr(host, f).shape, getattr(host, f).dtype)
                          for f in S.StopTables._fields))
  st = jax.eval_shape(lambda: S.init_state(cfg, B, L, tables.prefix_VM.shape[1], jnp.float32))
  hlo = S.decode.lower(cfg, st, dparams, tables, sds((1,), jnp.int32), sds((B,), bool),
                       sds((B,), jnp.int32), sds((), jnp.int32), jax.random.key(0), num_steps=4,
                       sampling=S.SamplingParams(1.0), dtype=jnp.float32,
                       attn_impl="einsum").compile().as_text()
  layer = {f"f32[{B},{L},2,16]", f"f32[{B},2,{L},16]"}            # either order of K and S
  ops = [(m.group(1), m.group(3)) for m in re.finditer(
      r"%?([\w.-]+) = (f32\[[0-9,]+\])\S* ([\w-]+)\(", hlo) if m.group(2) in layer]
  writes = [n for n, op in ops if "scatter" in n or op == "scatter"]
  assert len(writes) >= 2 * cfg.num_layers, ops                 # K and V written in place
  moved = [(n, op) for n, op in ops if op in ("copy", "transpose", "slice", "dynamic-slice")
           or (op == "fusion" and "scatter" not in n)]
  assert not moved, moved


def test_prefill_row_groups_are_powers_of_two_with_little_padding():
  from ssp_jax.rollout.prefill import row_parts as _row_parts
  for cap in (64, 96, 256):
    for n in range(1, cap + 1):
      rows = list(range(100, 100 + n))
      parts = _row_parts(rows, cap)
      flat = [b for p in parts for b in p]
      assert sorted(set(flat)) == rows                          # every row, once...
      assert len(flat) - n <= max(len(p) for p in parts) // 4   # ...plus at most 25% padding
      for p in parts:
        assert len(p) <= cap and (len(p) & (len(p) - 1) == 0 or len(p) == cap)
        assert all(b == p[0] for b in p[len(set(p)):])          # padding repeats the first row
  assert [len(p) for p in _row_parts(list(range(37)), 256)] == [32, 4, 1]


def test_auto_decode_attention_resolves_per_backend(model, tags, monkeypatch):
  """rollout.decode_attention="auto": the batched GEMMs on a CPU, the Pallas kernels on a GPU
  when no mesh axis splits rows or heads; the caller's config is left as it was."""
  from ssp_jax.rollout.config import get_rollout_config
  assert get_rollout_config().decode_attention == "auto"
  eng = _engine(model, SmallBM25Retriever(), decode_attention="auto")
  assert eng.cfg.decode_attention == "einsum"
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  from ssp_jax.rollout.engine import RolloutEngine
  rc = get_rollout_config()
  eng = RolloutEngine(model[0], model[2], rc, SmallBM25Retriever())
  assert eng.cfg.decode_attention == "pallas" and rc.decode_attention == "auto"


def test_auto_kv_layout_resolves_per_backend(model, monkeypatch):
  """rollout.kv_layout="auto": the dense layout wherever decode attention is not the Pallas
  kernels (a CPU), the paged layout with the paged kernel on a GPU; explicit layouts stay."""
  from ssp_jax.rollout.config import get_rollout_config
  from ssp_jax.rollout.engine import RolloutEngine
  rc = get_rollout_config()
  rc.kv_layout = "auto"
  eng = RolloutEngine(model[0], model[2], rc, SmallBM25Retriever())
  assert (eng.cfg.kv_layout, eng.cfg.decode_attention) == ("dense", "einsum")
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  eng = RolloutEngine(model[0], model[2], rc, SmallBM25Retriever())
  assert (eng.cfg.kv_layout, eng.cfg.decode_attention) == ("paged", "pallas")
  assert rc.kv_layout == "auto"
  rc.kv_layout = "dense"
  eng = RolloutEngine(model[0], model[2], rc, SmallBM25Retriever())
  assert (eng.cfg.kv_layout, eng.cfg.decode_attention) == ("dense", "pallas_rope")


def test_auto_prefill_attention_resolves_per_backend_and_dtype(model, monkeypatch):
  """rollout.prefill_attention="auto": the stored-scores XLA path on a CPU, cuDNN's flash
  kernel on an unsplit GPU at bf16/fp16 compute (cuDNN takes no fp32), xla at fp32 there; an
  unknown name is refused naming the field."""
  import pytest
  from ssp_jax.rollout.config import get_rollout_config
  from ssp_jax.rollout.engine import RolloutEngine
  rc = get_rollout_config()
  assert rc.prefill_attention == "auto"
  assert RolloutEngine(model[0], model[2], rc, SmallBM25Retriever()).cfg.prefill_attention == "xla"
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  assert RolloutEngine(model[0], model[2], rc,
                       SmallBM25Retriever()).cfg.prefill_attention == "cudnn"
  rc.dtype = "float32"
  assert RolloutEngine(model[0], model[2], rc, SmallBM25Retriever()).cfg.prefill_attention == "xla"
  assert rc.prefill_attention == "auto"
  rc.prefill_attention = "flash"
  with pytest.raises(ValueError, match="rollout.prefill_attention='flash'"):
    RolloutEngine(model[0], model[2], rc, SmallBM25Retriever())


def test_unknown_prefill_attention_impl_is_refused():
  import pytest
  from ssp_jax.sampling.paged_prefill import slots_attention
  q = jnp.zeros((1, 2, 4, 8))
  kv = jnp.zeros((1, 2, 4, 8))
  with pytest.raises(ValueError, match="prefill attention 'flash' unknown"):
    slots_attention(q, kv, kv, jnp.ones((1, 2, 4), bool), "flash")


def test_bad_layout_names_are_refused_before_any_model_is_loaded():
  """check_rollout_config (run by the CLIs before the index and the model) refuses an unknown
  kv_layout, kv_pool or prefill_attention, naming the field and the choices."""
  import pytest
  from ssp_jax.rollout.config import check_rollout_config, get_rollout_config
  check_rollout_config(get_rollout_config())
  for name in ("kv_layout", "kv_pool", "prefill_attention"):
    rc = get_rollout_config()
    rc[name] = "flash"
    with pytest.raises(ValueError, match=f"rollout.{name}='flash' unknown; use one of"):
      check_rollout_config(rc)
