"""Recall when querying with a distinctive sentence of a passage (dense and BM25).

BM25 finds the passage first for >= 95% of sampled passages. The default dense encoder (MiniLM,
384-d) puts it in the top 3 (what the search tool returns) for >= 95%, and first for >= 95% when
the query is the passage's two most distinctive sentences; with a single sentence it is first for
about 87% of passages over the whole corpus (neighbouring passages of the same article score
close), so that figure is guarded at 80%.
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
  ranks = hit_ranks(retriever, records, sample, k=3)
  assert np.mean(ranks < 3) >= 0.95, f"recall@3 {np.mean(ranks < 3):.3f}"
  assert np.mean(ranks < 1) >= 0.80, f"recall@1 {np.mean(ranks < 1):.3f}"
  assert recall_at_k(retriever, records, sample, k=1, n_sentences=2) >= 0.95


def test_dense_minilm_recall_on_corpus_blocks(records, tmp_path):
  """MiniLM (the default encoder) over 12 blocks of 20 neighbouring passages (neighbours from the
  same article are the hardest distractors), all queried. The whole corpus: the slow test."""
  rng = np.random.default_rng(1)
  starts = sorted(rng.choice(len(records) - 20, 12, replace=False))
  rows = sorted({r for s in starts for r in range(s, s + 20)})
  sub = [records[r] for r in rows]
  corpus = write_corpus(str(tmp_path / "blocks.jsonl"), sub)
  out = str(tmp_path / "idx")
  index_lib.build_dense(corpus, out, detect_spec(), devices=[jax.devices("cpu")[0]],
                        batch_size=64, progress=False)
  check_dense(load_retriever(out), sub, list(range(len(sub))))


@pytest.mark.slow
def test_dense_recall_on_default_index(records):
  """The cached default index (MiniLM over all ~3.9k passages; built on first use)."""
  r = load_retriever(default_index_dir())
  assert r.meta["num_passages"] == len(records)
  sample = np.random.default_rng(0).choice(len(records), 300, replace=False).tolist()
  check_dense(r, records, sample)
