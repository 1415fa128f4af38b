"""The shipped hand-written evaluation set is consistent with the shipped Wikipedia passages."""
import pytest

from retrieval.corpus import default_corpus_path, iter_corpus
from ssp_jax import metrics
from ssp_jax.eval import data


@pytest.fixture(scope="module")
def examples():
  return data.load_dataset("builtin:wiki_sample")


@pytest.fixture(scope="module")
def corpus():
  return {rec["id"]: rec["contents"] for rec in iter_corpus(default_corpus_path())}


def _contains(passage: str, answer: str) -> bool:
  """The normalised answer occurs in the normalised passage as whole tokens."""
  return f" {metrics.normalize_answer(answer)} " in f" {metrics.normalize_answer(passage)} "


def test_layout_and_size(examples):
  assert len(examples) >= 100
  assert len({e["id"] for e in examples}) == len(examples)
  assert len({e["question"] for e in examples}) == len(examples)
  for e in examples:
    assert set(e) >= {"id", "question", "golden_answers", "supporting_ids", "hops"}
    assert e["golden_answers"] and all(a.strip() for a in e["golden_answers"])
    assert 1 <= e["hops"] <= 3
    if e["hops"] > 1:
      assert len(e["supporting_ids"]) >= e["hops"], e["id"]
  multi = [e for e in examples if e["hops"] > 1]
  assert len(multi) >= 20 and any(e["hops"] == 3 for e in multi)


def test_supporting_ids_exist(examples, corpus):
  missing = [(e["id"], s) for e in examples for s in e["supporting_ids"] if s not in corpus]
  assert not missing, f"supporting ids not in the shipped corpus: {missing}"


def test_every_golden_answer_is_in_a_supporting_passage(examples, corpus):
  bad = [(e["id"], a) for e in examples for a in e["golden_answers"]
         if not any(_contains(corpus[s], a) for s in e["supporting_ids"])]
  assert not bad, f"golden answers not found in their supporting passages: {bad}"


def test_multi_hop_needs_every_passage(examples, corpus):
  """A multi-hop question cites at least two distinct passages."""
  for e in examples:
    if e["hops"] > 1:
      assert len(set(e["supporting_ids"])) == len(e["supporting_ids"]) >= 2, e["id"]
