"""Index builds: E5 prefixes, resume after an interrupted build, metadata, IVF/HNSW variants."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("transformers")

from models import bert  # noqa: E402
from retrieval import index as index_lib  # noqa: E402
from retrieval.corpus import DocStore  # noqa: E402
from retrieval.encoders import DenseEncoder, detect_spec  # noqa: E402
from retrieval.search import load_retriever  # noqa: E402
from retrieval_helpers import corpus_records, make_tiny_bert, write_corpus  # noqa: E402

CPU = [jax.devices("cpu")[0]]


@pytest.fixture(scope="module")
def tiny_e5(tmp_path_factory):
  return make_tiny_bert(str(tmp_path_factory.mktemp("m") / "tiny-e5-random"))


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
  recs = corpus_records()[:70]
  return write_corpus(str(tmp_path_factory.mktemp("c") / "small.jsonl"), recs), recs


def test_e5_prefixes_applied(tiny_e5):
  spec = detect_spec(tiny_e5)   # "e5" in the directory name -> the E5 convention
  assert (spec.query_prefix, spec.passage_prefix, spec.pooling, spec.max_length) == (
      "query: ", "passage: ", "mean", 256)
  enc = DenseEncoder(spec, batch_size=4, devices=CPU)
  text = "who wrote animal farm"
  want_ids = enc.tokenizer.encode("query: " + text).ids
  assert enc.tokenize([text], "query") == [want_ids]
  assert enc.tokenize([text], "passage") == [enc.tokenizer.encode("passage: " + text).ids]
  cfg, params = bert.load_bert(tiny_e5)
  want = bert.embed(cfg, params, jnp.asarray([want_ids]), jnp.ones((1, len(want_ids)), jnp.int32))
  got_q, got_p = enc.encode([text], "query"), enc.encode([text], "passage")
  assert np.max(np.abs(got_q - np.asarray(want))) < 1e-5
  assert np.max(np.abs(got_q - got_p)) > 1e-4   # the prefix changes the embedding
  plain = detect_spec(tiny_e5, "plain")
  assert plain.query_prefix == plain.passage_prefix == ""


def test_encoder_batches_equal_single(tiny_e5, small_corpus):
  _, recs = small_corpus
  texts = [r["contents"] for r in recs[:9]]
  enc = DenseEncoder(detect_spec(tiny_e5), batch_size=4, devices=CPU)
  batched = enc.encode(texts, "passage")
  single = np.concatenate([enc.encode([t], "passage") for t in texts])
  assert np.max(np.abs(batched - single)) < 1e-5


class Interrupting:
  """Wraps an encoder; raises after `fail_after` encode calls (None: never). Counts calls."""

  def __init__(self, inner, fail_after=None):
    self.inner, self.fail_after, self.calls = inner, fail_after, 0
    self.dim, self.spec, self.tokenize = inner.dim, inner.spec, inner.tokenize
    self.tokenize_with_offsets = inner.tokenize_with_offsets
    self.encoded = []                            # the token sequences of each call

  def encode_many(self, ids, progress=None, **kw):   # what index builds call, once per shard
    if self.fail_after is not None and self.calls >= self.fail_after:
      raise KeyboardInterrupt("simulated interruption")
    self.calls += 1
    self.encoded.append(list(ids))
    return self.inner.encode_many(ids, progress, **kw)


def test_interrupted_build_resumes_and_equals_uninterrupted(tiny_e5, small_corpus, tmp_path):
  corpus, recs = small_corpus
  spec = detect_spec(tiny_e5)
  enc = DenseEncoder(spec, batch_size=8, devices=CPU)
  kw = dict(shard_size=16, progress=False)   # 70 passages -> 5 shards
  full = str(tmp_path / "full")
  index_lib.build_dense(corpus, full, spec, encoder=enc, **kw)

  part = str(tmp_path / "part")
  with pytest.raises(KeyboardInterrupt):
    index_lib.build_dense(corpus, part, spec, encoder=Interrupting(enc, fail_after=2), **kw)
  assert len(index_lib.shard_files(part)) == 2
  assert not os.path.exists(os.path.join(part, index_lib.META_FILE))
  resumed = Interrupting(enc)
  meta = index_lib.build_dense(corpus, part, spec, encoder=resumed, **kw)
  assert resumed.calls == 3                     # only the missing shards were encoded
  assert meta["num_passages"] == 70 and meta["spec"]["query_prefix"] == "query: "

  import faiss
  a = faiss.read_index(os.path.join(full, index_lib.FAISS_FILE))
  b = faiss.read_index(os.path.join(part, index_lib.FAISS_FILE))
  assert a.ntotal == b.ntotal == 70
  np.testing.assert_array_equal(a.reconstruct_n(0, 70), b.reconstruct_n(0, 70))
  with open(os.path.join(full, "docs.jsonl")) as f1, open(os.path.join(part, "docs.jsonl")) as f2:
    assert f1.read() == f2.read()
  with open(os.path.join(full, index_lib.META_FILE)) as f:
    assert json.load(f) == meta


def test_search_uses_recorded_spec(tiny_e5, small_corpus, tmp_path):
  corpus, recs = small_corpus
  spec = detect_spec(tiny_e5)
  out = str(tmp_path / "idx")
  index_lib.build_dense(corpus, out, spec, shard_size=32, devices=CPU, progress=False)
  r = load_retriever(out)
  assert r.spec == spec
  q = "query: " + "anarchism and the state"
  got = r.search(["anarchism and the state"], 3)[0]
  emb = r.encoder.encode_ids([r.encoder.tokenizer.encode(q).ids])
  scores, rows = r.index.search(emb, 3)
  assert [d["id"] for d in got] == [recs[i]["id"] for i in rows[0]]
  assert set(got[0]) >= {"id", "title", "text", "contents", "score"}
  assert got[0]["contents"] == f'"{got[0]["title"]}"\n{got[0]["text"]}'


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approximate_indexes_find_themselves(tiny_e5, small_corpus, tmp_path, kind):
  corpus, _ = small_corpus
  spec = detect_spec(tiny_e5)
  out = str(tmp_path / kind)
  meta = index_lib.build_dense(corpus, out, spec, index_type=kind, shard_size=32, devices=CPU,
                               progress=False)
  assert meta["index_type"] == kind
  r = load_retriever(out)
  vecs = np.concatenate([np.load(p) for p in index_lib.shard_files(out)])
  _, rows = r.index.search(vecs, 1)
  assert np.mean(rows[:, 0] == np.arange(len(vecs))) >= 0.95


def test_doc_store_round_trip(small_corpus, tmp_path):
  corpus, recs = small_corpus
  index_lib.build_bm25(corpus, str(tmp_path), progress=False)
  store = DocStore(str(tmp_path))
  assert len(store) == len(recs)
  assert [store.get(i) for i in (0, 33, 69)] == [recs[i] for i in (0, 33, 69)]


def test_bad_inputs_are_named(tmp_path):
  with pytest.raises(FileNotFoundError, match="corpus file"):
    index_lib.build_bm25(str(tmp_path / "nope.jsonl"), str(tmp_path / "o"), progress=False)
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"id": "0", "title": "T", "text": "ok"}\n{"id": "1"}\n')
  with pytest.raises(ValueError, match="bad.jsonl:2.*contents"):
    index_lib.build_bm25(str(bad), str(tmp_path / "o2"), progress=False)
  with pytest.raises(FileNotFoundError, match="not a complete index"):
    load_retriever(str(tmp_path))


def test_cli_index_build(tiny_e5, small_corpus, tmp_path, capsys):
  from ssp_jax import cli
  corpus, recs = small_corpus
  out = str(tmp_path / "cli_dense")
  assert cli.main(["index", "build", "--corpus", corpus, "--encoder", "dense", "--encoder-path",
                   tiny_e5, "--out", out, "--index-type", "flat", "--batch-size", "16",
                   "--max-length", "128", "--quiet"]) == 0
  stdout = capsys.readouterr().out
  assert len(stdout.strip().splitlines()) == 1 and "meta.json" in stdout   # a summary, no JSON
  meta = json.load(open(os.path.join(out, "meta.json")))
  assert meta["spec"]["max_length"] == 128 and meta["spec"]["passage_prefix"] == "passage: "
  assert meta["num_passages"] == len(recs)
  # the defaults are the default index's: 1-sentence contextual windows, bf16 matmuls
  assert meta["windows"]["sentences"] == 1 and meta["windows"]["encoding"] == "contextual"
  assert meta["matmul_dtype"] == "bfloat16" and meta["dtype"] == "float32"
  assert f"{len(recs)} passages" in stdout and "1-sentence windows" in stdout
  out_bm25 = str(tmp_path / "cli_bm25")
  assert cli.main(["index", "build", "--corpus", corpus, "--encoder", "bm25", "--out", out_bm25,
                   "--quiet"]) == 0
  assert load_retriever(out_bm25).search([recs[5]["contents"]], 1)[0][0]["id"] == recs[5]["id"]
