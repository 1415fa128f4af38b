"""Contextual window encoding (the default index's layout): sentence windows pooled from their
passage's own encoding pass, and bf16 matmuls with fp32 accumulation."""
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("transformers")

from models import bert  # noqa: E402
from retrieval import index as index_lib  # noqa: E402
from retrieval import windows  # noqa: E402
from retrieval.encoders import DenseEncoder, detect_spec  # noqa: E402
from retrieval.search import load_retriever  # noqa: E402
from retrieval_helpers import corpus_records, make_tiny_bert, write_corpus  # noqa: E402
from test_retrieval_index import Interrupting  # noqa: E402
from test_retrieval_windows import brute_force_scores  # noqa: E402

CPU = [jax.devices("cpu")[0]]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
  return make_tiny_bert(str(tmp_path_factory.mktemp("m") / "tiny-bert"))


def test_sentence_spans_are_the_split_sentences():
  old = re.compile(r"(?<=[.!?])\s+")      # the splitting rule as first written
  texts = [r["contents"] for r in corpus_records()]
  texts += ["", " ", "a. ", " a.  b! c", "x?\n\ny", ". . .", "No end mark"]
  for t in texts:
    spans = windows.sentence_spans(t)
    assert [t[a:b] for a, b in spans] == [s.strip() for s in old.split(t) if s.strip()]
    assert windows.split_sentences(t) == [t[a:b] for a, b in spans]


def records_with_edge_cases():
  recs = corpus_records()[:21]
  recs.append({"id": "one", "contents": '"One"\nA single sentence passage.'})   # its own window
  long = " ".join(f"Sentence number {i} is here." for i in range(60))          # > 256 tokens
  recs.append({"id": "long", "contents": '"Long"\n' + long})
  return recs


def test_contextual_windows_pool_the_passage_pass(tiny_bert, tmp_path):
  recs = records_with_edge_cases()
  corpus = write_corpus(str(tmp_path / "c.jsonl"), recs)
  spec = detect_spec(tiny_bert)
  enc = Interrupting(DenseEncoder(spec, batch_size=8, devices=CPU))
  out = str(tmp_path / "idx")
  meta = index_lib.build_dense(corpus, out, spec, encoder=enc, shard_size=8, sentence_windows=1,
                               progress=False)
  assert meta["windows"]["encoding"] == "contextual"
  assert meta["windows"]["passage_weight"] == windows.CONTEXTUAL_PASSAGE_WEIGHT
  n_sh = 3
  P = np.concatenate([np.load(index_lib.shard_path(out, k)) for k in range(n_sh)])
  W = np.concatenate([np.load(windows.shard_path(out, k)) for k in range(n_sh)])
  off = np.load(os.path.join(out, windows.OFFSETS_FILE))
  sep_texts = [w for r in recs for w in windows.passage_windows(r["contents"], 1)]
  assert len(W) == meta["windows"]["num_windows"] == len(sep_texts)
  np.testing.assert_allclose(P, enc.inner.encode([r["contents"] for r in recs], "passage"),
                             atol=1e-5)
  # One pass per shard: the passages, plus only the windows cut by truncation.
  assert enc.calls == n_sh
  n_cut = 0
  hidden = jax.jit(lambda t, m: bert.hidden_states(enc.inner.cfg, enc.inner.params, t, m))
  for j, r in enumerate(recs):
    (ids, starts, end), = enc.tokenize_with_offsets([r["contents"]], "passage")
    h_TD = np.asarray(hidden(jnp.asarray([ids]), jnp.ones((1, len(ids)), jnp.int32)))[0]
    seg, plan = windows.contextual_windows(r["contents"], 1, starts, end)
    sep = windows.passage_windows(r["contents"], 1)
    assert len(plan) == len(sep) == off[j + 1] - off[j]
    for i, x in enumerate(plan):
      got = W[off[j] + i]
      if x is None:                     # at most one sentence: the passage's own vector
        np.testing.assert_array_equal(got, P[j])
        continue
      if isinstance(x, str):            # cut by truncation: encoded as its own text
        assert x == sep[i]
        np.testing.assert_allclose(got, enc.inner.encode([x], "passage")[0], atol=1e-5)
        n_cut += 1
        continue
      sel = (seg >= x[0]) & (seg < x[1])
      # the same tokens as the separate window's sentence, now read in the passage's context
      alone = enc.tokenize([sep[i].split("\n", 1)[1]], "passage")[0][1:-1]
      assert np.asarray(ids)[sel].tolist() == alone
      want = h_TD[sel].mean(0)
      np.testing.assert_allclose(got, want / np.linalg.norm(want), atol=1e-5)
  assert n_cut > 0 and sum(len(x) for x in enc.encoded) == len(recs) + n_cut
  # search works over it, and the separate layout gives other window vectors
  r = load_retriever(out)
  queries = ["sentence number 7", recs[4]["contents"].split(". ")[1]]
  want = brute_force_scores(out, r.encoder.encode(queries, "query"))
  for res, w in zip(r.search(queries, 3), want):
    assert [d["id"] for d in res] == [recs[i]["id"] for i in np.argsort(-w, kind="stable")[:3]]
  sep_out = str(tmp_path / "sep")
  index_lib.build_dense(corpus, sep_out, spec, encoder=enc.inner, shard_size=8,
                        sentence_windows=1, window_encoding="separate", progress=False)
  W_sep = np.concatenate([np.load(windows.shard_path(sep_out, k)) for k in range(n_sh)])
  assert np.max(np.abs(W_sep - W)) > 1e-3


def test_changing_the_window_encoding_redoes_only_the_windows(tiny_bert, tmp_path):
  recs = corpus_records()[:12]
  corpus = write_corpus(str(tmp_path / "c.jsonl"), recs)
  spec = detect_spec(tiny_bert)
  enc = DenseEncoder(spec, batch_size=8, devices=CPU)
  out = str(tmp_path / "idx")
  kw = dict(encoder=enc, shard_size=8, sentence_windows=1, progress=False)
  index_lib.build_dense(corpus, out, spec, window_encoding="separate", **kw)
  before = [os.stat(index_lib.shard_path(out, k)).st_mtime_ns for k in range(2)]
  w_before = np.load(windows.shard_path(out, 0))
  meta = index_lib.build_dense(corpus, out, spec, window_encoding="contextual", **kw)
  assert [os.stat(index_lib.shard_path(out, k)).st_mtime_ns for k in range(2)] == before
  assert meta["windows"]["encoding"] == "contextual"
  assert np.max(np.abs(np.load(windows.shard_path(out, 0)) - w_before)) > 1e-3


def test_bad_window_encodings_are_named(tiny_bert, tmp_path):
  corpus = write_corpus(str(tmp_path / "c.jsonl"), corpus_records()[:3])
  spec = detect_spec(tiny_bert)
  with pytest.raises(ValueError, match="window_encoding 'late' is unknown"):
    index_lib.build_dense(corpus, str(tmp_path / "a"), spec, sentence_windows=1,
                          window_encoding="late", devices=CPU, progress=False)
  import dataclasses
  cls = dataclasses.replace(spec, pooling="cls")
  with pytest.raises(ValueError, match="needs mean pooling.*--window-encoding separate"):
    index_lib.build_dense(corpus, str(tmp_path / "b"), cls, sentence_windows=1, devices=CPU,
                          progress=False)
  meta = index_lib.build_dense(corpus, str(tmp_path / "c"), cls, sentence_windows=1,
                               window_encoding="separate", devices=CPU, progress=False)
  assert meta["windows"]["encoding"] == "separate"
  assert meta["windows"]["passage_weight"] == windows.PASSAGE_WEIGHT


def test_bf16_matmuls_stay_close_to_fp32(tiny_bert):
  spec = detect_spec(tiny_bert)
  texts = [r["contents"] for r in corpus_records()[:16]]
  fp32 = DenseEncoder(spec, batch_size=8, devices=CPU).encode(texts, "passage")
  same = DenseEncoder(spec, batch_size=8, devices=CPU, matmul_dtype=jnp.float32)
  np.testing.assert_array_equal(same.encode(texts, "passage"), fp32)
  bf16 = DenseEncoder(spec, batch_size=8, devices=CPU, matmul_dtype=jnp.bfloat16)
  got = bf16.encode(texts, "passage")
  cos = np.sum(got * fp32, axis=1)
  assert cos.min() > 0.999 and np.max(np.abs(got - fp32)) > 1e-6   # close, and really bf16


def test_pool_spans():
  sums_SD = np.array([[9.0, 9.0], [1.0, 0.0], [0.0, 3.0], [2.0, 2.0]])
  counts_S = np.array([3.0, 1.0, 3.0, 2.0])
  got = windows.pool_spans(sums_SD, counts_S, [(1, 2), (2, 4)], normalize=False)
  np.testing.assert_allclose(got, [[1.0, 0.0], [2.0 / 5, 5.0 / 5]])
  unit = windows.pool_spans(sums_SD, counts_S, [(2, 4)], normalize=True)
  np.testing.assert_allclose(unit, [[2 / np.sqrt(29), 5 / np.sqrt(29)]], rtol=1e-6)
