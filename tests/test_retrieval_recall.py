"""Recall when querying with a distinctive sentence of a passage (dense and BM25).

BM25 and the default dense index (MiniLM with 1-sentence windows pooled from one passage pass,
`retrieval/windows.py`) find the passage first for >= 95% of sampled passages (the default
index: 0.975 over the whole corpus; windows encoded separately: 0.994). MiniLM with passage vectors only (the paper's
layout, `--sentence-windows 0`) puts it first for about 87% over the whole corpus (neighbouring
passages of the same article score close) and in the top 3 for >= 95%: guarded as such.
"""
import jax
import numpy as np
import pytest

from retrieval import index as index_lib
from retrieval.corpus import default_corpus_path
from retrieval.encoders import detect_spec
from retrieval.search import default_index_dir, load_retriever
from retrieval_helpers import corpus_records, hit_ranks, recall_at_k, write_corpus


@pytest.fixture(scope="module")
def records():
  return corpus_records()


def test_bm25_recall_on_embedded_corpus(records, tmp_path):
  index_lib.build_bm25(default_corpus_path(), str(tmp_path), progress=False)
  sample = np.random.default_rng(0).choice(len(records), 300, replace=False).tolist()
  assert recall_at_k(load_retriever(str(tmp_path)), records, sample, k=1) >= 0.95


def check_dense(retriever, records, sample):
  """The issue's bar: first for >= 95% of sampled passages (windowed index)."""
  ranks = hit_ranks(retriever, records, sample, k=3)
  assert np.mean(ranks < 1) >= 0.95, f"recall@1 {np.mean(ranks < 1):.3f}"
  assert np.mean(ranks < 3) >= 0.98, f"recall@3 {np.mean(ranks < 3):.3f}"


def check_dense_passages_only(retriever, records, sample):
  ranks = hit_ranks(retriever, records, sample, k=3)
  assert np.mean(ranks < 3) >= 0.95, f"recall@3 {np.mean(ranks < 3):.3f}"
  assert np.mean(ranks < 1) >= 0.80, f"recall@1 {np.mean(ranks < 1):.3f}"
  assert recall_at_k(retriever, records, sample, k=1, n_sentences=2) >= 0.95


@pytest.fixture(scope="module")
def blocks(records, tmp_path_factory):
  """12 blocks of 20 neighbouring passages (neighbours from the same article are the hardest
  distractors) as a corpus file, and its records."""
  rng = np.random.default_rng(1)
  starts = sorted(rng.choice(len(records) - 20, 12, replace=False))
  rows = sorted({r for s in starts for r in range(s, s + 20)})
  sub = [records[r] for r in rows]
  return write_corpus(str(tmp_path_factory.mktemp("b") / "blocks.jsonl"), sub), sub


@pytest.mark.parametrize("sentence_windows", [1, 0])
def test_dense_minilm_recall_on_corpus_blocks(blocks, tmp_path, sentence_windows):
  """MiniLM (the default encoder) over the blocks, every passage queried. The whole corpus:
  the slow test."""
  corpus, sub = blocks
  out = str(tmp_path / "idx")
  index_lib.build_dense(corpus, out, detect_spec(), devices=[jax.devices("cpu")[0]],
                        batch_size=64, sentence_windows=sentence_windows, progress=False)
  check = check_dense if sentence_windows else check_dense_passages_only
  check(load_retriever(out), sub, list(range(len(sub))))


@pytest.mark.slow
def test_dense_recall_on_default_index(records):
  """The cached default index (MiniLM over all ~3.9k passages; built on first use)."""
  r = load_retriever(default_index_dir())
  assert r.meta["num_passages"] == len(records)
  sample = np.random.default_rng(0).choice(len(records), 300, replace=False).tolist()
  check_dense(r, records, sample)


@pytest.mark.slow
def test_default_index_finds_eval_supporting_passages(records):
  """The 141 hand-written evaluation questions: their supporting passages are in the top 3 for
  >= 80% (measured 0.84 with the default contextual 1-sentence windows, 0.83 with separately
  encoded ones; 0.75 with passage vectors only)."""
  from retrieval.corpus import iter_jsonl
  from ssp_jax.eval.data import builtin_path
  r = load_retriever(default_index_dir())
  ev = [e for _, e in iter_jsonl(builtin_path("wiki_sample"))]
  results = r.search([e["question"] for e in ev], 3)
  recall = np.mean([np.mean([s in {d["id"] for d in res} for s in e["supporting_ids"]])
                    for e, res in zip(ev, results)])
  assert recall >= 0.80, f"supporting-passage recall@3 {recall:.3f}"
