"""Warm-start demonstrations from a world's graph (`warmstart.demos = "world"`): many question
forms and hop counts, each search a name the trajectory has seen, the game's filters passed."""
import collections
import json
import os

import pytest

from ssp_jax import world
from ssp_jax.metrics import normalize_answer
from ssp_jax.ssp import filters
from ssp_jax.testing.small_retriever import SmallBM25Retriever
from ssp_jax.testing.tiny_checkpoint import make_tiny_checkpoint
from ssp_jax.tokenizer import load_tokenizer
from ssp_jax.ssp.warmstart import world_demos as W


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  d = tmp_path_factory.mktemp("wd")
  wdir = world.ensure_world(seed=3, size=300, root=str(d / "cache"))
  with open(os.path.join(wdir, "corpus.jsonl"), encoding="utf-8") as f:
    contents = [json.loads(line)["contents"] for line in f]
  tok = load_tokenizer(make_tiny_checkpoint(str(d / "ckpt")))
  retriever = SmallBM25Retriever(contents)
  sources = W.load_world_sources(wdir, limit=200, seed=0)
  demos = W.build_world_demos(sources, retriever, tok, topk=3, max_obs_tokens=256,
                              filter_cfg=filters.FilterConfig(), max_searches=4, want=20)
  return wdir, tok, sources, demos


def test_sources_come_from_train_only(built):
  wdir, _, sources, _ = built
  with open(os.path.join(wdir, "qa_heldout.jsonl"), encoding="utf-8") as f:
    heldout = {json.loads(line)["question"] for line in f}
  assert sources and not {s.question for s in sources} & heldout
  assert all(s.chain and 1 <= s.hops <= 3 for s in sources)


def test_demos_vary_in_form_and_hops_and_pass_the_filters(built):
  _, _, _, demos = built
  roles = collections.Counter(d.role for d in demos)
  assert roles["proposer"] == 20 and roles["verifier"] == 20 and roles["solver"] >= 5
  props = [d for d in demos if d.role == "proposer"]
  # not one template: several distinct question openings and search counts
  assert len({" ".join(d.question.split()[:2]) for d in props}) >= 4
  assert len({d.traj.num_searches for d in props}) >= 2
  for d in props:
    assert filters.check_proposal(d.traj, d.answer, filters.FilterConfig())[1] is None
    assert d.traj.text.rstrip().endswith("</question>") and d.question in d.traj.text
    assert d.traj.queries[0] == d.answer                  # reverse engineering starts at the answer
    assert normalize_answer(d.answer) not in normalize_answer(d.question)


def test_each_search_names_what_the_last_observation_showed(built):
  _, tok, sources, demos = built
  comparisons = {s.question for s in sources if s.kind == "comparison"}
  for d in demos:
    if d.role == "verifier" or d.question in comparisons:   # a comparison names both ends
      continue
    seen = [tok.decode(ids) for ids in _obs_segments(d.traj)]
    for prev, query in zip(seen, d.traj.queries[1:]):
      assert normalize_answer(query) in normalize_answer(prev), (d.question, query)
  for d in (d for d in demos if d.role == "solver"):
    last = tok.decode(_obs_segments(d.traj)[-1])
    assert normalize_answer(d.answer) in normalize_answer(last)
    assert d.traj.text.rstrip().endswith(f"<answer> {d.answer} </answer>")


def _obs_segments(traj):
  """The loss-masked (observation) token runs of a trajectory, in order."""
  out, cur = [], []
  for t, m in zip(traj.response_ids, traj.loss_mask):
    if m == 0:
      cur.append(t)
    elif cur:
      out.append(cur)
      cur = []
  if cur:
    out.append(cur)
  return out
