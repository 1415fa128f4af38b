"""The multi-turn search loop on a tiny random checkpoint with a real (BM25) retriever.

A random model never writes `<search>`, so the search tags are cut from its own greedy output
(`rollout.search_open/close`); the loop mechanics are the same as with the real tags.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models.decoder import forward_jit
from retrieval.base import RetrieverError
from ssp_jax import prompts_format as pf
from ssp_jax.rollout import RolloutEngine, get_rollout_config
from ssp_jax.rollout.observations import observation_ids
from ssp_jax.testing.small_retriever import SmallBM25Retriever
from ssp_jax.testing.tiny_checkpoint import load_params, make_tiny_checkpoint
from ssp_jax.tokenizer import Tokenizer

PROMPTS = ["Who wrote Moby-Dick?", "The capital of France is", "a", "Paris is",
           "Numbers 1851 2024", "<think> I need to find"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
  path = make_tiny_checkpoint(str(tmp_path_factory.mktemp("loop")), "qwen2", "chatml", seed=1)
  cfg, params = load_params(path)
  return cfg, params, Tokenizer.from_dir(path)


def _engine(model, retriever, **kw):
  cfg, params, tok = model
  rc = get_rollout_config()
  rc.update(dict(dtype="float32", cache_dtype="float32", batch_size=4, cache_min_len=32,
                 prefill_chunk=16, steps_per_call=12, max_obs_tokens=48, topk=2))
  rc.update(kw)
  return RolloutEngine(cfg, tok, rc, retriever)


@pytest.fixture(scope="module")
def tags(model):
  """(open, close) tags cut from the greedy output of PROMPTS[0], with a non-empty query."""
  cfg, params, tok = model
  ((g,), _) = _engine(model, None).generate(params, PROMPTS[:1], jax.random.key(0), temperature=0.0,
                                            max_new_tokens=40, stop=[])
  text = tok.decode(g.response_ids)
  for a in range(len(text) - 12, 4, -1):
    close = text[a:a + 2]
    first = text.find(close)
    for o in range(first - 4, 0, -1):
      open_ = text[o:o + 2]
      if pf.extract_query(text[:first + 2], open_, close):
        return open_, close
  pytest.fail("no usable tags in the greedy output")


def _fresh_logprobs(cfg, params, tr, T=1.0):
  seq = tr.prompt_ids + tr.response_ids
  padded = seq + [0] * (192 - len(seq))
  logp = jax.nn.log_softmax(forward_jit(cfg, params, jnp.asarray([padded]))[0] / T, axis=-1)
  P = len(tr.prompt_ids)
  return np.asarray([float(logp[P - 1 + i, t]) for i, t in enumerate(tr.response_ids)]), logp


def _obs_spans(tr):
  spans, i, m = [], 0, tr.loss_mask
  while i < len(m):
    if m[i] == 0:
      j = i
      while j < len(m) and m[j] == 0:
        j += 1
      spans.append((i, j))
      i = j
    else:
      i += 1
  return spans


def test_search_loop_masks_docs_and_resume(model, tags):
  cfg, params, tok = model
  open_, close = tags
  ret = SmallBM25Retriever()
  eng = _engine(model, ret, search_open=open_, search_close=close, max_searches=3)
  trajs, _ = eng.generate(params, PROMPTS, jax.random.key(0), temperature=0.0, max_new_tokens=120,
                          stop=[close])
  assert trajs[0].num_searches >= 1
  sent = [q for c in ret.calls for q in c]   # what the engine asked, in batched calls
  assert sorted(sent) == sorted(q for tr in trajs for q in tr.queries if q)
  assert len(ret.calls) <= len(sent)
  for tr in trajs:
    spans = _obs_spans(tr)
    assert len(spans) == tr.num_searches   # every search's observation, the last one too
    for (i, j), q, docs in zip(spans, tr.queries, tr.docs):
      assert (q or None) == pf.extract_query(tok.decode(tr.response_ids[:i]), open_, close)
      # the last observation of a row that the budget cut is cut to what was left
      cap = 48 if j < len(tr.response_ids) or tr.stop_reason != "length" else min(48, j - i)
      if not q:  # an empty query is a failed search with a notice, not a retriever call
        assert docs == [] and tr.response_ids[i:j] == observation_ids(tok, pf.NO_QUERY, cap)
        continue
      # the observation spliced in is exactly the rendered docs of this query's search
      assert docs == ret.search([q], 2)[0]
      assert tr.response_ids[i:j] == observation_ids(tok, pf.render_docs(docs), cap)
    # resume after an observation == recompute: every policy token is the argmax of a fresh
    # forward over prompt + response, and its recorded log-prob matches
    want, logp = _fresh_logprobs(cfg, params, tr)
    pol = np.asarray(tr.loss_mask) == 1
    np.testing.assert_allclose(np.asarray(tr.logprobs)[pol], want[pol], atol=2e-4)
    P = len(tr.prompt_ids)
    argmax = np.asarray(jnp.argmax(logp, -1))[P - 1:P - 1 + len(tr.response_ids)]
    assert (argmax[pol] == np.asarray(tr.response_ids)[pol]).all()
    assert all(lp == 0.0 for lp, m in zip(tr.logprobs, tr.loss_mask) if m == 0)
    assert tr.stop_reason in ("eos", "length", "max_searches", "stop")


def test_sampled_search_loop_logprobs(model, tags):
  cfg, params, tok = model
  open_, close = tags
  eng = _engine(model, SmallBM25Retriever(), search_open=open_, search_close=close)
  trajs, _ = eng.generate(params, PROMPTS[:4], jax.random.key(7), temperature=1.0,
                          max_new_tokens=100, stop=[close, "</answer>"])
  for tr in trajs:
    want, _ = _fresh_logprobs(cfg, params, tr)
    pol = np.asarray(tr.loss_mask) == 1
    np.testing.assert_allclose(np.asarray(tr.logprobs)[pol], want[pol], atol=2e-4)


@pytest.mark.parametrize("failure", ["error", "timeout"])
def test_retriever_failure_becomes_observation(model, tags, failure):
  cfg, params, tok = model
  open_, close = tags
  ret = (SmallBM25Retriever(fail=RetrieverError("index offline")) if failure == "error"
         else SmallBM25Retriever(delay_s=1.0))
  eng = _engine(model, ret, search_open=open_, search_close=close, search_timeout_s=0.2,
                max_searches=2)
  ((tr,), _) = eng.generate(params, PROMPTS[:1], jax.random.key(0), temperature=0.0,
                            max_new_tokens=100, stop=[close])
  assert tr.num_searches >= 1 and tr.num_failed_searches == tr.num_searches
  assert "Search failed" in tr.text
  assert tr.docs[0] == []


def test_limits(model, tags):
  cfg, params, tok = model
  open_, close = tags
  ret = SmallBM25Retriever()
  eng = _engine(model, ret, search_open=open_, search_close=close, max_searches=0)
  ((tr,), _) = eng.generate(params, PROMPTS[:1], jax.random.key(0), temperature=0.0,
                            max_new_tokens=100, stop=[close])
  assert tr.stop_reason == "max_searches" and tr.num_searches == 0 and not ret.calls
  assert tok.decode(tr.response_ids).endswith(close) or close in tok.decode(tr.response_ids[-2:])
  ((tr,), _) = eng.generate(params, PROMPTS[:1], jax.random.key(0), temperature=0.0,
                            max_new_tokens=5, stop=[])
  assert tr.stop_reason in ("length", "eos") and len(tr.response_ids) <= 5
  eng = _engine(model, ret, search_open=open_, search_close=close, use_search=False)
  ((tr,), _) = eng.generate(params, PROMPTS[:1], jax.random.key(0), temperature=0.0,
                            max_new_tokens=100, stop=[close])
  assert tr.stop_reason == "stop" and tr.num_searches == 0


def test_observation_rendering_and_cap(model):
  cfg, params, tok = model
  docs = SmallBM25Retriever().search(["capital of France Seine"], 2)[0]
  assert docs[0]["title"] == "Paris"
  body = pf.render_docs(docs)
  assert body.startswith("Doc 1 (Title: Paris)\nParis is the capital")
  text = pf.observation_text(body)
  assert text.startswith("\n<information>\nDoc 1") and text.endswith("</information>\n\n")
  full = observation_ids(tok, body, 10_000)
  assert tok.decode(full) == text
  cut = observation_ids(tok, body, 20)
  assert len(cut) <= 20 and tok.decode(cut).endswith("</information>\n\n")
  assert pf.extract_query("<search> a </search> x <search> b c </search>") == "b c"
  assert pf.extract_query("<search>  </search>") is None
