"""The whole search loop on the embedded SmolLM2-135M-Instruct with a real BM25 index over the
shipped Wikipedia sample. The 135M model rarely opens a search on its own, so the assistant turn
is pre-filled with `<search>`; the query, the closing tag and everything after are the model's."""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
  import models
  import retrieval
  from retrieval.corpus import default_corpus_path
  from retrieval.index import build_bm25
  from ssp_jax.rollout import RolloutEngine, get_rollout_config
  from ssp_jax.tokenizer import load_tokenizer
  index = str(tmp_path_factory.mktemp("bm25"))
  build_bm25(default_corpus_path(), index, progress=False)
  ret = retrieval.load_retriever(index)
  cfg, params, tok_dir = models.load_checkpoint(None)
  tok = load_tokenizer(tok_dir)
  rc = get_rollout_config()
  rc.update(dict(dtype="float32", cache_dtype="float32", batch_size=4, cache_min_len=256,
                 steps_per_call=64, max_obs_tokens=160, topk=2))
  return cfg, params, tok, ret, RolloutEngine(cfg, tok, rc, ret)


def test_smollm2_search_loop(loop):
  from ssp_jax import prompts_format as pf
  from ssp_jax.rollout.observations import observation_ids
  from ssp_jax.ssp.prompts import solver_messages
  cfg, params, tok, ret, eng = loop
  qs = ["Who wrote the novel Moby-Dick?", "What is the capital of Scotland?",
        "Who painted the Mona Lisa?", "Which river flows through Paris?"]
  prompts = [tok.apply_chat_template(solver_messages(q)) + tok.encode("<search>") for q in qs]
  trajs, _ = eng.generate(params, prompts, jax.random.key(0), temperature=0.0,
                          max_new_tokens=320, stop=("</search>", "</answer>"))
  searched = [t for t in trajs if t.num_searches > t.num_failed_searches]
  assert searched, [t.text for t in trajs]
  for tr in searched:
    q, docs = tr.queries[0], tr.docs[0]
    assert len(docs) == 2 and [d["id"] for d in docs] == [d["id"] for d in ret.search([q], 2)[0]]
    obs = observation_ids(tok, pf.render_docs(docs), 160)
    m = np.asarray(tr.loss_mask)
    start = int(np.argmin(m))                      # first observation token
    assert tr.response_ids[start:start + len(obs)] == obs
    assert (m[start:start + len(obs)] == 0).all() and m[:start].all()
    assert tr.stop_reason in ("eos", "answer", "length", "max_searches")
    # after the splice the policy continues exactly as a fresh forward over the whole sequence
    seq = tr.prompt_ids + tr.response_ids
    logits = jax.jit(lambda p, t: __import__("models").forward(cfg, p, t))(params,
                                                                           jnp.asarray([seq]))
    logp = np.asarray(jax.nn.log_softmax(logits[0], -1))
    P = len(tr.prompt_ids)
    want = logp[np.arange(P - 1, len(seq) - 1), np.asarray(tr.response_ids)]
    np.testing.assert_allclose(np.asarray(tr.logprobs)[m == 1], want[m == 1], atol=1e-3)
