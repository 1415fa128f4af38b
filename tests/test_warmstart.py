"""Warm-start demonstrations (tags, real observations, filters) and the SFT pass on a tiny model."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from ssp_jax import prompts_format as pf
from ssp_jax.rollout.observations import observation_ids
from ssp_jax.ssp import filters
from ssp_jax.testing.small_retriever import WIKI_SNIPPETS, SmallBM25Retriever
from ssp_jax.testing.tiny_checkpoint import make_tiny_checkpoint
from ssp_jax.tokenizer import load_tokenizer
from ssp_jax.ssp.warmstart import demos as D
from ssp_jax.rl.learner import sequence_logprobs
from ssp_jax.ssp.warmstart.sft import nll_loss, num_scored, sft

TOPK, MAX_OBS = 2, 400
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
  sources = D.load_sources(str(answers))
  demos = D.build_demos(sources, retriever, tok, topk=TOPK, max_obs_tokens=MAX_OBS,
                        filter_cfg=filters.FilterConfig())
  return ckpt, tok, retriever, sources, demos, str(answers), str(corpus)


def test_answers_load_in_a_seeded_order_and_bad_lines_are_skipped(setup, tmp_path):
  sources = setup[3]
  assert sorted(s.answer for s in sources) == sorted(a for a, _ in ANSWERS)
  assert [s.answer for s in D.load_sources(setup[5], seed=3)] == \
      [s.answer for s in D.load_sources(setup[5], seed=3)]
  bad = tmp_path / "a.jsonl"
  bad.write_bytes(b'{"ground_truth": "Paris", "search_turns": 2}\n\xff\xfe\nnot json\n'
                  b'{"ground_truth": ""}\n{"ground_truth": "Seine", "search_turns": "x"}\n'
                  b'{"ground_truth": "Vistula", "search_turns": 1e9}\n')
  assert [s.answer for s in D.load_sources(str(bad))] == ["Paris"]


def test_proposer_quotes_what_its_first_search_showed(setup):
  """The proposer searches the answer it was given, and its question blanks the answer in a
  sentence of that search's observation as the policy sees it (after the cap)."""
  _, tok, _, _, demos, _, _ = setup
  props = [d for d in demos if d.role == "proposer"]
  assert len(props) >= 3
  for d in props:
    assert d.traj.queries[0] == d.answer
    seen = tok.decode(d.traj.response_ids[:len(d.traj.response_ids)])  # the whole response
    first_obs = D._visible(tok, D._search(SmallBM25Retriever(), tok, [d.answer], TOPK,
                                          MAX_OBS)[0])
    quote = d.question.split(": \"", 1)[1].rsplit("\"", 1)[0]
    assert "___" in quote and d.answer.lower() not in d.question.lower()
    assert quote.replace("___", d.answer) in first_obs, (quote, first_obs)
    assert first_obs in seen


def test_excluded_passages_are_never_quoted(setup):
  _, tok, retriever, sources, demos, _, _ = setup
  melville = [str(i) for i, c in enumerate(WIKI_SNIPPETS) if "Melville" in c]
  assert any("Melville" in d.answer for d in demos if d.role == "proposer")
  got = D.build_demos(sources, retriever, tok, topk=TOPK, max_obs_tokens=MAX_OBS,
                      filter_cfg=filters.FilterConfig(), exclude_ids=melville)
  for d in got:
    assert "Melville" not in d.question


def test_want_limits_the_proposers_and_noise_mixes_other_materials(setup):
  _, tok, retriever, sources, _, _, _ = setup
  got = D.build_demos(sources, retriever, tok, topk=TOPK, max_obs_tokens=MAX_OBS,
                      filter_cfg=filters.FilterConfig(), want=2, noise_docs=1)
  props = [d for d in got if d.role == "proposer"]
  vers = [d for d in got if d.role == "verifier"]
  assert len(props) == len(vers) == 2
  n_docs = [len({x["contents"] for x in p.traj.all_docs}) for p in props]
  for i, (p, v) in enumerate(zip(props, vers)):
    prompt = tok.decode(v.traj.prompt_ids)
    assert all(pf.doc_title_text(x)[1] in prompt for x in p.traj.all_docs)
    # its own documents and the other proposal's, each material once (as the game mixes them)
    assert prompt.count("(Title:") == n_docs[i] + n_docs[1 - i]


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


def _sft_inputs(setup, n_demos: int):
  """(model cfg, params, the first n_demos demonstrations, step config, packed rows of 2,048
  tokens, packer stats) for the SFT tests."""
  from ssp_jax.rl.config import get_rl_config
  from ssp_jax.rl.learner import StepConfig
  from ssp_jax.ssp.warmstart.sft import packed_rows
  ckpt, _, _, _, demos, _, _ = setup
  cfg, params = models.hf_io.load_hf_checkpoint(ckpt)
  trajs = [d.traj for d in demos][:n_demos]
  rl = get_rl_config()
  rl.remat, rl.compute_dtype = "none", "float32"
  rows, stats = packed_rows(trajs, 2048)
  return cfg, params, trajs, StepConfig.from_config(rl), rows, stats


def test_sft_lowers_the_demonstration_loss(setup):
  cfg, params, trajs, sc, rows, stats = _sft_inputs(setup, 6)
  assert 0.5 < stats["fill_rate"] <= 1.0
  # every demonstration is in the packed rows once, whole: loss tokens are preserved
  # (each segment's first token is a prompt token, never a loss token)
  assert rows[1].sum() == sum(sum(t.loss_mask) for t in trajs)
  n = num_scored(rows[1], rows[1].shape[0])
  loss_fn = jax.jit(lambda p: nll_loss(p, *rows, cfg=cfg, sc=sc, num_scored=n))
  before = float(loss_fn(params))
  # scoring only the gathered loss positions is the masked NLL over every position: same value
  # and gradient
  def full(p):
    logp_BT, _ = sequence_logprobs(cfg, p, jnp.asarray(rows[0]), sc,
                                   segment_ids_BT=jnp.asarray(rows[2]),
                                   positions_BT=jnp.asarray(rows[3]))
    return -jnp.sum(logp_BT * rows[1]) / max(rows[1].sum(), 1.0)
  lv, g = jax.jit(jax.value_and_grad(lambda p: nll_loss(p, *rows, cfg=cfg, sc=sc,
                                                         num_scored=n)))(params)
  fv, fg = jax.jit(jax.value_and_grad(full))(params)
  assert float(lv) == pytest.approx(float(fv), rel=1e-5)
  for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(fg)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-3, atol=1e-6)
  # a count below the batch's loss tokens drops some of them: the guard of `num_scored` matters
  assert float(jax.jit(lambda p: nll_loss(p, *rows, cfg=cfg, sc=sc, num_scored=8))(params)) \
      != pytest.approx(before, rel=1e-3)
  warm, epoch_loss = sft(cfg, params, trajs, epochs=4, lr=3e-3, batch_size=2, max_len=2048,
                         progress=False)
  assert len(epoch_loss) == 4
  assert float(loss_fn(warm)) < 0.7 * before
  # the original params are untouched (sft works on a copy)
  assert float(loss_fn(params)) == pytest.approx(before, rel=1e-6)


def test_demonstrations_longer_than_a_row_are_named(setup, capsys):
  from ssp_jax.ssp.warmstart.run import fit_to_rows
  demos = setup[4]
  size = lambda d: len(d.traj.prompt_ids) + len(d.traj.response_ids)
  verifiers = [d for d in demos if d.role == "verifier"]
  with pytest.raises(ValueError, match="every verifier demonstration.*warmstart.max_len"):
    fit_to_rows(verifiers, min(size(d) for d in verifiers) - 1)
  longest = max(size(d) for d in demos)
  kept = fit_to_rows(demos, longest - 1)
  assert len(kept) == sum(size(d) < longest for d in demos) < len(demos)
  assert "left out" in capsys.readouterr().err
  assert fit_to_rows(demos, longest) == demos


def test_shipped_data_files_the_code_names_exist():
  """Paths built from a module's own location break when the module moves (the warm start's
  eval-support file did when warmstart/ moved under ssp/: the first run died after the index)."""
  from ssp_jax.ssp.warmstart.run import EVAL_SUPPORT
  from ssp_jax.svs import arith, gsm
  assert os.path.isfile(EVAL_SUPPORT), EVAL_SUPPORT
  assert D.eval_support_ids([EVAL_SUPPORT])        # the passages demonstrations must avoid
  assert os.path.isfile(arith.DEFAULT_PATH) and os.path.isdir(gsm.DATA_DIR)


def test_train_layers_freezes_the_layers_below(setup):
  """warmstart.train_layers: the bottom layers get no update, the top ones move, and the loss
  value is the full model's (the forward is unchanged)."""
  cfg, params, trajs, sc, rows, _ = _sft_inputs(setup, 4)
  n = num_scored(rows[1], rows[1].shape[0])
  top = cfg.num_layers - 1
  loss = lambda p, f: nll_loss(p, *rows, cfg=cfg, sc=sc, num_scored=n, frozen_layers=f)
  assert float(loss(params, top)) == pytest.approx(float(loss(params, 0)), rel=1e-6)
  g = jax.grad(loss)(params, top)
  g_all = jax.grad(loss)(params, 0)
  for name, w in g["layers"].items():
    assert not np.any(np.asarray(w[:top])), name          # frozen: no gradient at all
    np.testing.assert_allclose(np.asarray(w[top:]), np.asarray(g_all["layers"][name][top:]),
                               rtol=1e-4, atol=1e-7)
  warm, _ = sft(cfg, params, trajs, epochs=1, lr=3e-3, batch_size=2, max_len=2048,
                train_layers=1, progress=False)
  for name, w in warm["layers"].items():
    np.testing.assert_array_equal(np.asarray(w[:top]), np.asarray(params["layers"][name][:top]))
  assert any(not np.array_equal(np.asarray(w[top:]), np.asarray(params["layers"][k][top:]))
             for k, w in warm["layers"].items())


def test_non_finite_batches_are_skipped_and_all_of_them_is_an_error(setup):
  """A non-finite loss or gradient leaves the params untouched (as the RL step does); a warm
  start whose every batch is non-finite raises, naming the settings to try, instead of handing
  an untrained policy to the run."""
  cfg, params, trajs, *_ = _sft_inputs(setup, 4)
  bad = jax.tree.map(lambda x: x, params)
  bad["final_norm"] = bad["final_norm"].at[0].set(jnp.nan)
  with pytest.raises(FloatingPointError, match="all .* batches.*rl.attn_impl=xla"):
    sft(cfg, bad, trajs, epochs=1, lr=3e-3, batch_size=2, max_len=2048, progress=False)


def test_a_flat_warm_start_loss_is_named():
  from ssp_jax.ssp.warmstart.sft import learned
  assert learned([0.4061, 0.0345]) is None and learned([0.9]) is None
  msg = learned([1.4508, 1.4483])          # the 2026-12-05 cuDNN fault's warm start
  assert msg and "did not fall" in msg and "rl.attn_impl=xla" in msg
  assert learned([float("nan"), float("nan")])


def test_zero_lr_warm_start_is_flat(setup):
  from ssp_jax.ssp.warmstart.sft import learned
  cfg, params, trajs, *_ = _sft_inputs(setup, 4)
  _, epoch_loss = sft(cfg, params, trajs, epochs=2, lr=0.0, batch_size=2, max_len=2048,
                      progress=False)
  assert learned(epoch_loss) is not None
