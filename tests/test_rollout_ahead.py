"""rollout.compile_ahead (rollout/ahead.py): the paged call's prefill and decode programs compile
on host threads before they are needed. The jitted calls must then find every one of them in
JAX's cache (none compiled again on the calling thread, so the plan predicted every shape the
call used), and the trajectories must be those of a call that compiles as it goes."""
import os
import sys

import jax
import numpy as np
import pytest

import models
from models.config import ModelConfig
from ssp_jax.rollout import RolloutEngine, get_rollout_config
from ssp_jax.rollout import ahead
from ssp_jax.testing.small_retriever import SmallBM25Retriever

# appended, not first: bench/retrieval.py must not shadow the retrieval package
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from sampler import SyntheticTokenizer  # noqa: E402

# A shape no other test compiles, so the first call here starts from an empty cache.
CFG = ModelConfig(model_type="qwen2", vocab_size=96, hidden_size=24, intermediate_size=40,
                  num_layers=2, num_heads=4, num_kv_heads=2, head_dim=6)


def _engine(compile_ahead, cfg=CFG, **kw) -> RolloutEngine:
  rc = get_rollout_config()
  rc.update(dict(dtype="float32", cache_dtype="float32", batch_size=8, max_prompt_tokens=12,
                 max_response_tokens=120, steps_per_call=16, max_obs_tokens=24,
                 max_searches=100, kv_layout="paged", page_size=4, decode_attention="gather",
                 prefill_piece=8, prefill_tokens=128, tail_min_batch=2, temperature=1.0,
                 compile_ahead=compile_ahead))
  rc.update(kw)
  return RolloutEngine(cfg, SyntheticTokenizer(cfg.vocab_size, search_every=16), rc,
                       SmallBM25Retriever())


def test_programs_compiled_ahead_are_the_ones_the_call_runs():
  """Eight rows with budgets from 120 down to 24 tokens, searches, the tail batch shrinking
  8 -> 4 -> 2, table widths growing: every decode loop and paged prefill the call runs was
  compiled on a compile-ahead thread, none on the calling thread; same sampled tokens as without (same key, same programs)."""
  params = models.init_params(CFG, jax.random.key(0))
  rng = np.random.default_rng(0)
  prompts = [rng.integers(0, CFG.vocab_size, 12).tolist() for _ in range(8)]
  budgets = [120, 110, 90, 80, 60, 50, 40, 24]
  on, stats = _engine(2).generate(params, prompts, jax.random.key(1), max_new_tokens=budgets)
  by_fn = stats["compiled_functions"]
  assert stats["batch_min"] == 2 and stats["searches"] >= 8, stats
  assert "jit(decode)" not in by_fn and "jit(prefill_pages)" not in by_fn, by_fn
  assert by_fn.get("jit(decode) [ahead]", 0) >= 3, by_fn        # batches 8, 4 and 2 at least
  assert by_fn.get("jit(prefill_pages) [ahead]", 0) >= 2, by_fn
  assert stats.get("ahead_errors", 0) == 0
  assert stats["ahead_compiled"] >= 5 and stats["ahead_wait_s"] >= 0.0
  off, stats_off = _engine(0).generate(params, prompts, jax.random.key(1),
                                       max_new_tokens=budgets)
  assert not any(k.endswith("[ahead]") for k in stats_off["compiled_functions"])
  assert "ahead_compiled" not in stats_off
  assert [t.response_ids for t in on] == [t.response_ids for t in off]
  assert [t.loss_mask for t in on] == [t.loss_mask for t in off]
  np.testing.assert_allclose(np.concatenate([t.logprobs for t in on]),
                             np.concatenate([t.logprobs for t in off]), rtol=1e-6, atol=1e-6)


def test_a_failed_compile_ahead_is_counted_and_the_call_compiles_it(monkeypatch):
  """A program that cannot compile ahead (here: every one) costs nothing but the attempt: the
  call compiles it itself and its tokens are unchanged."""
  def broken(self, key, fn, args, kwargs):
    raise RuntimeError("no compiler here")
  monkeypatch.setattr(ahead.CompileAhead, "_compile", broken)
  params = models.init_params(CFG, jax.random.key(0))
  prompts = [[3, 4, 5, 6]] * 2
  trajs, stats = _engine(1, batch_size=2, max_response_tokens=20).generate(
      params, prompts, jax.random.key(1))
  assert stats["ahead_errors"] >= 2 and stats.get("ahead_compiled", 0) == 0
  assert [len(t.response_ids) for t in trajs] == [20, 20]


def test_threads_setting_and_plan_helpers():
  assert ahead.threads(-1, backend="cpu") == 0
  assert 1 <= ahead.threads(-1, backend="gpu") <= 4
  assert ahead.threads(3) == 3 and ahead.threads("0") == 0
  for bad in (-2, "many"):
    with pytest.raises(ValueError, match="rollout.compile_ahead"):
      ahead.threads(bad)
  assert ahead.tail_batches(256, 16, 1) == [256, 128, 64, 32, 16]
  assert ahead.tail_batches(256, 0, 1) == [256]
  assert ahead.tail_batches(24, 2, 4) == [24, 12]        # 6 is not divisible by the data axes
  assert ahead.widths_upto(1, 64) == [8]
  assert ahead.widths_upto(64, 64) == [8, 16, 32, 64]
  assert ahead.widths_upto(20, 64) == [8, 16, 32]


def test_bad_compile_ahead_is_a_config_error():
  from ssp_jax.rollout.config import check_rollout_config
  rc = get_rollout_config()
  rc.compile_ahead = -3
  with pytest.raises(ValueError, match="rollout.compile_ahead=-3"):
    check_rollout_config(rc)


def test_urgent_programs_compile_before_the_rest_start():
  """The programs a call needs first compile alone; the others start once they are done."""
  import threading
  import time
  log, lock = [], threading.Lock()

  class Fake:
    def __init__(self, name, secs):
      self.name, self.secs = name, secs

    def lower(self, *a, **kw):
      return self

    def compile(self):
      with lock:
        log.append(("start", self.name))
      time.sleep(self.secs)
      with lock:
        log.append(("end", self.name))

  import collections
  stats = collections.Counter()
  ca = ahead.CompileAhead(4, stats)
  ca.submit("a", Fake("a", 0.3), urgent=True)
  ca.submit("b", Fake("b", 0.1), urgent=True)
  ca.submit("c", Fake("c", 0.0))
  ca.submit("d", Fake("d", 0.0))
  ca.start_rest()
  for k in "abcd":
    ca.wait(k)
  ca.close()
  ends = {n: i for i, (e, n) in enumerate(log) if e == "end"}
  starts = {n: i for i, (e, n) in enumerate(log) if e == "start"}
  assert max(ends["a"], ends["b"]) < min(starts["c"], starts["d"]), log
  assert stats["ahead_compiled"] == 4 and stats["ahead_unused"] == 0


def test_a_closed_plan_compiles_nothing_more():
  """When the call ends while programs still wait for the urgent ones, they are skipped, not
  compiled in the background for nothing."""
  import collections
  import threading
  started = []
  release = threading.Event()

  class Fake:
    def __init__(self, name, block=False):
      self.name, self.block = name, block

    def lower(self, *a, **kw):
      return self

    def compile(self):
      started.append(self.name)
      if self.block:
        release.wait(5)

  stats = collections.Counter()
  ca = ahead.CompileAhead(3, stats)
  ca.submit("urgent", Fake("urgent", block=True), urgent=True)
  ca.submit("later", Fake("later"))
  ca.start_rest()
  ca.close()            # "later" waits for "urgent", which is still compiling
  release.set()
  ca._pool.shutdown(wait=True)
  assert started == ["urgent"] and stats["ahead_compiled"] == 0


def test_no_prompts_plan_nothing():
  """An empty call returns no trajectories with compiling ahead on (the plan read the longest
  queued row and failed on an empty queue)."""
  params = models.init_params(CFG, jax.random.key(0))
  trajs, stats = _engine(2).generate(params, [], jax.random.key(1))
  assert trajs == [] and "ahead_compiled" not in stats


@pytest.mark.parametrize("field", ["decode_head", "decode_matmul"])
def test_pallas_head_and_gemm_programs_are_compiled_ahead_too(field):
  """rollout.decode_head / decode_matmul "pallas" reach the compile-ahead plan: every decode
  loop the call runs was compiled ahead (one compiled on the calling thread would be a program
  the plan got wrong, e.g. with the XLA head or GEMMs)."""
  cfg = ModelConfig(model_type="qwen2", vocab_size=96, hidden_size=32, intermediate_size=40,
                    num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8)   # width % 16 == 0
  params = models.init_params(cfg, jax.random.key(0))
  rng = np.random.default_rng(1)
  prompts = [rng.integers(0, cfg.vocab_size, 12).tolist() for _ in range(8)]
  _, stats = _engine(2, cfg, **{field: "pallas"}).generate(
      params, prompts, jax.random.key(1), max_new_tokens=[60, 50, 40, 30, 30, 24, 24, 24])
  by_fn = stats["compiled_functions"]
  assert "jit(decode)" not in by_fn and by_fn.get("jit(decode) [ahead]", 0) >= 2, by_fn
  assert stats.get("ahead_errors", 0) == 0
  if field == "decode_head":
    with pytest.raises(ValueError, match="multiple of 16 .* not 24"):   # CFG's width
      _engine(2, decode_head="pallas")
