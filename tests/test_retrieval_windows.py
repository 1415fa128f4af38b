"""Sentence-window indexes (`--sentence-windows N`): splitting, exact scores, resume, CLI."""
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

pytest.importorskip("transformers")

from retrieval import index as index_lib  # noqa: E402
from retrieval import windows  # noqa: E402
from retrieval.encoders import DenseEncoder, detect_spec  # noqa: E402
from retrieval.search import load_retriever  # noqa: E402
from retrieval_helpers import corpus_records, make_tiny_bert, write_corpus  # noqa: E402
from test_retrieval_index import Interrupting  # noqa: E402

CPU = [jax.devices("cpu")[0]]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
  return make_tiny_bert(str(tmp_path_factory.mktemp("m") / "tiny-bert"))


def test_passage_windows():
  c = '"Ant"\nAnts are insects. They live in colonies! Do they sleep? Yes.'
  assert windows.passage_windows(c, 1) == ['"Ant"\nAnts are insects.', '"Ant"\nThey live in colonies!',
                                           '"Ant"\nDo they sleep?', '"Ant"\nYes.']
  assert windows.passage_windows(c, 3) == ['"Ant"\nAnts are insects. They live in colonies! Do they sleep?',
                                           '"Ant"\nThey live in colonies! Do they sleep? Yes.']
  assert windows.passage_windows(c, 4) == [c]         # not longer than N: the passage itself
  assert windows.passage_windows('"Empty"\n', 1) == ['"Empty"\n']
  assert windows.split_sentences("No end mark") == ["No end mark"]


def test_sharded_rows(tmp_path):
  parts = [np.arange(12, dtype=np.float32).reshape(3, 4), np.arange(12, 20, dtype=np.float32).reshape(2, 4)]
  paths = []
  for k, a in enumerate(parts):
    paths.append(str(tmp_path / f"s{k}.npy"))
    np.save(paths[-1], a)
  rows = windows.ShardedRows(paths)
  full = np.concatenate(parts)
  assert len(rows) == 5
  np.testing.assert_array_equal(rows.rows(np.array([4, 0, 3, 2])), full[[4, 0, 3, 2]])
  np.testing.assert_array_equal(rows.span(3, 5), full[3:5])
  np.testing.assert_array_equal(rows.span(0, 2), full[0:2])


def brute_force_scores(index_dir, q_QD):
  """Window-aware scores of every passage, from the stored vectors (no faiss)."""
  meta = index_lib.read_meta(index_dir)
  P = np.concatenate([np.load(p) for p in index_lib.shard_files(index_dir)])
  W = np.concatenate([np.load(windows.shard_path(index_dir, k))
                      for k in range(len(index_lib.shard_files(index_dir)))])
  off = np.load(os.path.join(index_dir, windows.OFFSETS_FILE))
  best = np.stack([np.max(q_QD @ W[off[i]:off[i + 1]].T, axis=1) for i in range(len(P))], 1)
  w = meta["windows"]["passage_weight"]
  return w * (q_QD @ P.T) + (1 - w) * best


def test_window_search_equals_brute_force(tiny_bert, tmp_path):
  recs = corpus_records()[:9]      # <= the candidate count: every passage is rescored
  corpus = write_corpus(str(tmp_path / "c.jsonl"), recs)
  out = str(tmp_path / "idx")
  meta = index_lib.build_dense(corpus, out, detect_spec(tiny_bert), shard_size=4, devices=CPU,
                               sentence_windows=1, progress=False)
  n_sent = sum(len(windows.passage_windows(r["contents"], 1)) for r in recs)
  assert meta["windows"]["sentences"] == 1 and meta["windows"]["num_windows"] == n_sent
  r = load_retriever(out)
  queries = ["anarchism", "the history of autism", recs[5]["contents"].split(". ")[1]]
  got = r.search(queries, 4)
  want = brute_force_scores(out, r.encoder.encode(queries, "query"))
  for res, w in zip(got, want):
    order = np.argsort(-w, kind="stable")[:4]
    assert [d["id"] for d in res] == [recs[i]["id"] for i in order]
    np.testing.assert_allclose([d["score"] for d in res], w[order], rtol=1e-5, atol=1e-6)


def test_interrupted_window_build_resumes(tiny_bert, tmp_path):
  recs = corpus_records()[:40]
  corpus = write_corpus(str(tmp_path / "c.jsonl"), recs)
  spec = detect_spec(tiny_bert)
  enc = DenseEncoder(spec, batch_size=8, devices=CPU)
  kw = dict(shard_size=16, sentence_windows=2, progress=False)   # 3 passage + 3 window shards
  full = str(tmp_path / "full")
  index_lib.build_dense(corpus, full, spec, encoder=enc, **kw)
  part = str(tmp_path / "part")
  with pytest.raises(KeyboardInterrupt):   # shard 0 done (passages + windows), stopped in shard 1
    index_lib.build_dense(corpus, part, spec, encoder=Interrupting(enc, fail_after=1), **kw)
  assert os.path.exists(index_lib.shard_path(part, 0)) and os.path.exists(windows.shard_path(part, 0))
  assert not os.path.exists(index_lib.shard_path(part, 1))
  assert not os.path.exists(windows.shard_path(part, 1))
  assert not os.path.exists(os.path.join(part, index_lib.META_FILE))
  resumed = Interrupting(enc)
  meta = index_lib.build_dense(corpus, part, spec, encoder=resumed, **kw)
  assert resumed.calls == 2            # only the two missing shards (passages + windows each)
  for k in range(3):
    np.testing.assert_array_equal(np.load(index_lib.shard_path(full, k)),
                                  np.load(index_lib.shard_path(part, k)))
  for k in range(3):
    np.testing.assert_array_equal(np.load(windows.shard_path(full, k)),
                                  np.load(windows.shard_path(part, k)))
  np.testing.assert_array_equal(np.load(os.path.join(full, windows.OFFSETS_FILE)),
                                np.load(os.path.join(part, windows.OFFSETS_FILE)))
  q = ["ants and colonies", recs[3]["contents"][:80]]
  assert load_retriever(full).search(q, 3) == load_retriever(part).search(q, 3)
  # A different N redoes the windows (not the passages) and the meta says which N.
  passages_before = [os.stat(index_lib.shard_path(part, k)).st_mtime_ns for k in range(3)]
  meta = index_lib.build_dense(corpus, part, spec, encoder=enc, shard_size=16, sentence_windows=1,
                               progress=False)
  assert [os.stat(index_lib.shard_path(part, k)).st_mtime_ns for k in range(3)] == passages_before
  assert meta["windows"]["sentences"] == 1
  assert meta["windows"]["num_windows"] == sum(len(windows.passage_windows(r["contents"], 1))
                                               for r in recs)


def test_cli_sentence_windows(tiny_bert, tmp_path):
  corpus = write_corpus(str(tmp_path / "c.jsonl"), corpus_records()[:12])
  out = str(tmp_path / "idx")
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  cmd = [sys.executable, "-m", "ssp_jax.cli", "index", "build", "--corpus", corpus, "--encoder",
         "dense", "--encoder-path", tiny_bert, "--out", out, "--quiet"]
  p = subprocess.run(cmd + ["--sentence-windows", "1", "--matmul-dtype", "float32"], env=env,
                     capture_output=True, text=True)
  assert p.returncode == 0, p.stderr
  meta = json.load(open(os.path.join(out, "meta.json")))
  assert meta["windows"]["sentences"] == 1 and meta["windows"]["encoding"] == "contextual"
  assert meta["matmul_dtype"] == "float32"
  assert load_retriever(out).search(["a"], 2)[0][0]["id"]
  p = subprocess.run(cmd + ["--sentence-windows", "1", "--window-encoding", "separate",
                            "--matmul-dtype", "bfloat16"], env=env, capture_output=True, text=True)
  assert p.returncode == 0, p.stderr
  meta = json.load(open(os.path.join(out, "meta.json")))
  assert meta["windows"]["encoding"] == "separate" and meta["matmul_dtype"] == "bfloat16"
  p = subprocess.run(cmd + ["--sentence-windows", "-1"], env=env, capture_output=True, text=True)
  assert p.returncode == 2 and "sentence_windows must be >= 0" in p.stderr
