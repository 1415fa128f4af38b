"""Tools as a protocol (ssp_jax/rollout/tools.py): a toy calculator defined here runs through the
engine unchanged, and a response that the token limit cuts right after a tool call keeps that
call's observation (loss-masked, cut to the budget) instead of dropping it.

A random model never writes `<calc>` or `<search>`, so the tags are cut from its own greedy output
(the `tags` fixture of test_rollout_loop.py); the loop mechanics are the same as with real tags.
"""
import ast
import operator

import jax
import numpy as np
import pytest

from ssp_jax import prompts_format as pf
from ssp_jax.rollout import Observation, RolloutEngine, SearchTool
from ssp_jax.rollout.observations import observation_ids
from ssp_jax.testing.small_retriever import SmallBM25Retriever

from test_rollout_loop import PROMPTS, _engine, _fresh_logprobs, model, tags  # noqa: F401

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _calc(expr: str):
  """The value of an integer + - * expression; None for anything else."""
  def ev(n):
    if isinstance(n, ast.Constant) and isinstance(n.value, int):
      return n.value
    if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
      return _OPS[type(n.op)](ev(n.left), ev(n.right))
    raise ValueError(expr)
  try:
    return ev(ast.parse(expr.strip(), mode="eval").body)
  except (SyntaxError, ValueError, RecursionError):
    return None


class Calc:
  """A calculator tool: the text between `open_` and the trigger is the expression, the
  observation `<result>value</result>` (or `<result>error</result>`, a failed call)."""
  name = "calcs"

  def __init__(self, tok, open_: str, trigger: str, max_calls: int = 2):
    self.tok, self.open, self.trigger, self.max_calls = tok, open_, trigger, max_calls
    self.seen: list[str] = []

  def __call__(self, calls):
    out = []
    for c in calls:
      text = c.response
      start = text.rfind(self.open, 0, len(text) - len(self.trigger))
      expr = text[start + len(self.open):len(text) - len(self.trigger)] if start >= 0 else ""
      self.seen.append(expr)
      value = _calc(expr)
      ids = self.tok.encode(f"<result>{'error' if value is None else value}</result>")
      out.append(Observation(ids, query=expr, failed=value is None))
    return out


def _calc_engine(model, tags, **kw):
  cfg, params, tok = model
  open_, close = tags
  calc = Calc(tok, open_, close)
  eng = _engine(model, None, **kw)
  return RolloutEngine(cfg, tok, eng.cfg, tools=[calc]), calc


def test_a_toy_tool_runs_through_the_engine(model, tags):
  cfg, params, tok = model
  open_, close = tags
  eng, calc = _calc_engine(model, tags)
  assert _calc(" 2 + 3 * 4 ") == 14 and _calc("x") is None
  trajs, stats = eng.generate(params, PROMPTS, jax.random.key(0), temperature=0.0,
                              max_new_tokens=100, stop=[close])
  called = [t for t in trajs if t.num_searches]
  assert called and stats["searches"] == len(calc.seen) == sum(t.num_searches for t in trajs)
  for tr in called:
    ends = [i for i in range(1, len(tr.loss_mask)) if tr.loss_mask[i - 1] and not tr.loss_mask[i]]
    assert len(ends) == tr.num_searches   # each call's observation, spliced after its trigger
    for i, q in zip(ends, tr.queries):
      assert close in tok.decode(tr.response_ids[i - 2:i])   # its last token may run past it
      want = tok.encode(f"<result>{'error' if _calc(q) is None else _calc(q)}</result>")
      assert tr.response_ids[i:i + len(want)] == want[:len(tr.response_ids) - i]
    assert tr.num_failed_searches == sum(_calc(q) is None for q in tr.queries)
    assert tr.stop_reason in ("eos", "length", "max_calcs")
    # decoding resumes after the observation as a fresh forward over the whole sequence would
    want, _ = _fresh_logprobs(cfg, params, tr)
    pol = np.asarray(tr.loss_mask) == 1
    np.testing.assert_allclose(np.asarray(tr.logprobs)[pol], want[pol], atol=2e-4)
  calc.max_calls = 0   # a trigger past the tool's max_calls ends the row, named for the tool
  (tr,), _ = eng.generate(params, [called[0].prompt_ids], jax.random.key(0), temperature=0.0,
                          max_new_tokens=100, stop=[close])
  assert tr.stop_reason == "max_calcs" and tr.num_searches == 0
  # use_search=False turns the tools off: the trigger only stops
  off, _ = eng.generate(params, PROMPTS[:1], jax.random.key(0), temperature=0.0,
                        max_new_tokens=100, stop=[close], use_search=False)
  assert off[0].stop_reason == "stop" and off[0].num_searches == 0


@pytest.mark.parametrize("kv", [dict(), dict(kv_layout="paged", page_size=8,
                                             decode_attention="gather")], ids=["dense", "paged"])
def test_a_response_cut_after_a_search_keeps_its_last_observation(model, tags, kv):
  cfg, params, tok = model
  open_, close = tags
  ret = SmallBM25Retriever()
  eng = _engine(model, ret, search_open=open_, search_close=close, max_searches=3, **kv)
  (full,), _ = eng.generate(params, PROMPTS[:1], jax.random.key(0), temperature=0.0,
                            max_new_tokens=100, stop=[close])
  i = full.loss_mask.index(0)                 # where the first observation was spliced
  obs = observation_ids(tok, pf.render_docs(full.docs[0]), 48)
  assert len(obs) > 20
  for left in (20, 3):   # budget left after the trigger: the observation cut, closing tag kept
    (cut,), stats = eng.generate(params, PROMPTS[:1], jax.random.key(0), temperature=0.0,
                                 max_new_tokens=i + left, stop=[close])
    assert cut.stop_reason == "length" and len(cut.response_ids) == i + left
    assert cut.response_ids[:i] == full.response_ids[:i] and cut.num_searches == 1
    assert cut.loss_mask == [1] * i + [0] * left and cut.logprobs[i:] == [0.0] * left
    assert cut.response_ids[i:] == observation_ids(tok, pf.render_docs(cut.docs[0]), left)[:left]
    assert stats["obs_tokens"] == left
    if left == 20:
      assert tok.decode(cut.response_ids[i:]).endswith(pf.INFO_CLOSE + "\n\n")


def test_tools_sharing_a_trigger_are_refused(model):
  cfg, params, tok = model
  rc = _engine(model, None).cfg
  with pytest.raises(ValueError, match="share the trigger"):
    RolloutEngine(cfg, tok, rc, tools=[SearchTool(None, tok, rc), Calc(tok, "<", rc.search_close)])


def test_decode_weights_fuse_unless_heads_are_split(model):
  """A one-device mesh (every training run on one GPU has one) fuses the decode projections;
  a mesh that splits the heads over `tensor` keeps them separate."""
  import models
  cfg, params, tok = model
  eng = _engine(model, None)
  one = models.Sharder(models.make_mesh((("data", -1), ("tensor", 1)), jax.devices()[:1]),
                       models.DEFAULT_RULES)
  two = models.Sharder(models.make_mesh((("data", 1), ("tensor", 2)), jax.devices()[:2]),
                       models.DEFAULT_RULES)
  assert RolloutEngine(cfg, tok, eng.cfg)._can_fuse()
  assert RolloutEngine(cfg, tok, eng.cfg, None, one)._can_fuse()
  assert not RolloutEngine(cfg, tok, eng.cfg, None, two)._can_fuse()


def test_observations_tokenized_in_one_batch_equal_one_at_a_time(model):
  """run_searches tokenizes a round's observations in batched calls (observations_ids); the ids
  equal the one-at-a-time encoding, with and without the cut, the closing tag kept."""
  from ssp_jax.rollout.observations import observations_ids
  _, _, tok = model
  docs = SmallBM25Retriever().search(["paris", "river", "the moon"], 3)
  bodies = [pf.render_docs(d) for d in docs] + [pf.NO_QUERY]
  caps = [0, 30, 10_000, 5]
  one = []
  for body, cap in zip(bodies, caps):
    ids = tok.encode(pf.observation_text(body))
    if 0 < cap < len(ids):
      tail = tok.encode("\n" + pf.OBS_SUFFIX)
      ids = tok.encode(pf.OBS_PREFIX + body)[:max(cap - len(tail), 0)] + tail
    one.append(ids)
  got = observations_ids(tok, bodies, caps)
  assert got == one
  tail = tok.encode("\n" + pf.OBS_SUFFIX)
  assert len(got[0]) > 30 and len(got[1]) == 30 and got[1][-len(tail):] == tail
  assert got[2] == tok.encode(pf.observation_text(bodies[2]))        # under its cap: uncut
  assert tok.encode_batch([pf.observation_text(b) for b in bodies]) == \
      [tok.encode(pf.observation_text(b)) for b in bodies]
