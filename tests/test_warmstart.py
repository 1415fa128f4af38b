"""Warm-start demonstrations (tags, real observations, filters) and the SFT pass on a tiny model."""
import json
import os

import jax
import numpy as np
import pytest

import models
from ssp_jax import prompts_format as pf
from ssp_jax.rollout.observations import observation_ids
from ssp_jax.ssp import filters
from ssp_jax.testing.small_retriever import WIKI_SNIPPETS, SmallBM25Retriever
from ssp_jax.testing.tiny_checkpoint import make_tiny_checkpoint
from ssp_jax.tokenizer import load_tokenizer
from ssp_jax.warmstart import demos as D
from ssp_jax.warmstart.sft import nll_loss, sft

TOPK, MAX_OBS = 2, 120
ANSWERS = [("Herman Melville", "person"), ("Edinburgh", "place"), ("1867", "date"),
           ("Vistula", "place"), ("1952", "date"), ("Warsaw", "place")]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  d = tmp_path_factory.mktemp("ws")
  ckpt = make_tiny_checkpoint(str(d / "ckpt"))
  tok = load_tokenizer(ckpt)
  corpus = d / "corpus.jsonl"
  corpus.write_text("".join(json.dumps({"id": str(i), "contents": c}) + "\n"
                            for i, c in enumerate(WIKI_SNIPPETS)))
  answers = d / "answers.jsonl"
  answers.write_text("".join(json.dumps({"ground_truth": a, "category": k, "search_turns": 2})
                             + "\n" for a, k in ANSWERS))
  retriever = SmallBM25Retriever()
  sources = D.load_sources(str(answers), str(corpus), retriever=retriever)
  demos = D.build_demos(sources, retriever, tok, topk=TOPK, max_obs_tokens=MAX_OBS,
                        filter_cfg=filters.FilterConfig())
  return ckpt, tok, retriever, sources, demos, str(answers), str(corpus)


def test_sources_hold_the_answer(setup):
  _, _, _, sources, _, _, _ = setup
  assert len(sources) == len(ANSWERS)
  for s in sources:
    assert s.answer.lower() in s.sentence.lower()
    assert "___" in D.blank(s.sentence, s.answer)
    assert s.answer.lower() not in D.make_question(s).lower()


def test_excluded_passages_are_never_used(setup):
  _, _, retriever, _, _, answers, corpus = setup
  melville = [str(i) for i, c in enumerate(WIKI_SNIPPETS) if "Melville" in c]
  got = D.load_sources(answers, corpus, retriever=retriever, exclude_ids=melville)
  assert "Herman Melville" not in [s.answer for s in got]


def test_every_role_is_demonstrated(setup):
  demos = setup[4]
  roles = [d.role for d in demos]
  assert roles.count("proposer") >= 3 and roles.count("solver") >= 3
  assert roles.count("verifier") == roles.count("proposer")


def test_tags_are_well_formed_and_filters_pass(setup):
  _, tok, _, _, demos, _, _ = setup
  for d in demos:
    policy = filters.policy_text(d.traj.text)
    if d.role == "proposer":
      assert policy.count(pf.SEARCH_OPEN) == policy.count(pf.SEARCH_CLOSE) == 2
      assert pf.extract_tag(d.traj.text, "question") == d.question
      assert filters.check_proposal(d.traj, d.answer, filters.FilterConfig()) == (d.question, None)
      assert d.traj.stop_reason == "question"
    else:
      assert pf.extract_tag(d.traj.text, "answer") == d.answer
      assert d.traj.stop_reason == "answer"
    if d.role == "solver":
      docs = " ".join(pf.doc_title_text(x)[1] for x in d.traj.all_docs)
      assert d.answer.lower() in docs.lower()   # the demonstration answers from what it read


def test_observations_are_what_the_retriever_returns(setup):
  _, tok, retriever, _, demos, _, _ = setup
  for d in (x for x in demos if x.role != "verifier"):
    ids, mask = np.asarray(d.traj.response_ids), np.asarray(d.traj.loss_mask)
    # the loss-masked runs of the response are exactly the observations of the searches, in order
    runs, start = [], None
    for i, m in enumerate(list(mask) + [1]):
      if m == 0 and start is None:
        start = i
      elif m == 1 and start is not None:
        runs.append(ids[start:i].tolist())
        start = None
    assert len(runs) == len(d.traj.queries) == d.traj.num_searches
    for q, docs, run in zip(d.traj.queries, d.traj.docs, runs):
      fresh = retriever.search([q], TOPK)[0]
      assert [x["contents"] for x in docs] == [x["contents"] for x in fresh]
      assert run == observation_ids(tok, pf.render_docs(fresh), MAX_OBS)


def test_sft_lowers_the_demonstration_loss(setup):
  ckpt, _, _, _, demos, _, _ = setup
  cfg, params = models.hf_io.load_hf_checkpoint(ckpt)
  trajs = [d.traj for d in demos]
  from ssp_jax.warmstart.sft import batches
  from ssp_jax.rl.config import get_rl_config
  from ssp_jax.rl.learner import StepConfig
  rl = get_rl_config()
  rl.remat, rl.compute_dtype = "none", "float32"
  sc = StepConfig.from_config(rl)
  (tokens, mask), = batches(trajs, len(trajs), 256, 2048, np.random.default_rng(0))

  def loss_of(p):
    return float(jax.jit(lambda p: nll_loss(p, tokens, mask, cfg=cfg, sc=sc))(p))

  before = loss_of(params)
  warm, epoch_loss = sft(cfg, params, trajs, epochs=6, lr=3e-3, batch_size=4, progress=False)
  assert len(epoch_loss) == 6
  assert loss_of(warm) < 0.7 * before
  # the original params are untouched (sft works on a copy)
  assert loss_of(params) == pytest.approx(before, rel=1e-6)
