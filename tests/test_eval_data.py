"""Eval data: FlashRAG JSONL loading, deterministic subsampling, TFDS (mock data)."""
import gzip
import json

import pytest

from ssp_jax.eval import data


def _write(path, recs, gz=False):
  opener = gzip.open if gz else open
  with opener(path, "wt", encoding="utf-8") as f:
    for r in recs:
      f.write(json.dumps(r) + "\n")
  return str(path)


def _recs(n):
  return [{"id": f"q{i}", "question": f"question {i}?", "golden_answers": [f"a{i}"]}
          for i in range(n)]


def test_load_jsonl_plain_and_gz(tmp_path):
  recs = _recs(3)
  recs[1].pop("id")
  recs[2]["golden_answers"] = "single"
  recs[2]["extra"] = 7
  for gz in (False, True):
    path = _write(tmp_path / ("d.jsonl.gz" if gz else "d.jsonl"), recs, gz)
    exs = data.load_jsonl(path, "nq")
    assert [e["id"] for e in exs] == ["q0", "nq-1", "q2"]
    assert exs[2]["golden_answers"] == ["single"] and exs[2]["extra"] == 7


@pytest.mark.parametrize("bad,match", [
    ({"golden_answers": ["x"]}, "question"),
    ({"question": "q?", "golden_answers": []}, "golden_answers"),
    ({"question": "q?", "golden_answers": [3]}, "golden_answers"),
])
def test_load_jsonl_rejects_bad_records(tmp_path, bad, match):
  path = _write(tmp_path / "bad.jsonl", [bad])
  with pytest.raises(ValueError, match=match):
    data.load_jsonl(path)


def test_load_jsonl_missing_file(tmp_path):
  with pytest.raises(FileNotFoundError, match="--data"):
    data.load_jsonl(str(tmp_path / "nope.jsonl"))


def test_subsample_is_deterministic_and_nested():
  exs = [{"id": f"q{i}", "question": "?", "golden_answers": ["a"]} for i in range(1000)]
  a = data.subsample(exs, 100, seed=3)
  b = data.subsample(list(reversed(exs)), 100, seed=3)
  assert len(a) == 100
  assert {e["id"] for e in a} == {e["id"] for e in b}          # independent of file order
  assert [e["id"] for e in a] == sorted((e["id"] for e in a), key=lambda s: int(s[1:]))
  c = data.subsample(exs, 100, seed=4)
  assert {e["id"] for e in a} != {e["id"] for e in c}          # the seed matters
  small = data.subsample(exs, 30, seed=3)
  assert {e["id"] for e in small} <= {e["id"] for e in a}      # nested limits


def test_subsample_keeps_all_when_limit_is_large_or_off():
  exs = [{"id": str(i)} for i in range(125)]
  assert data.subsample(exs, 500, seed=0) == exs               # Bamboogle: all 125
  assert data.subsample(exs, 0, seed=0) == exs
  assert data.subsample(exs, None, seed=0) == exs


def test_parse_data_args():
  assert data.parse_data_args(["nq=a.jsonl", "hotpotqa = b=c.jsonl"]) == {
      "nq": "a.jsonl", "hotpotqa": "b=c.jsonl"}
  with pytest.raises(ValueError, match="NAME=FILE"):
    data.parse_data_args(["nq"])
  with pytest.raises(ValueError, match="twice"):
    data.parse_data_args(["nq=a", "nq=b"])


def test_tfds_record_mapping():
  nq = data.tfds_record_to_example({"question": b"who?", "answer": [b"A", b"B", b"A"]}, "nq-0")
  assert nq == {"question": "who?", "golden_answers": ["A", "B"], "id": "nq-0"}
  tq = data.tfds_record_to_example(
      {"question": "what?", "question_id": b"tq_7",
       "answer": {"value": "Paris", "aliases": ["Paris", "Paris, France"]}}, "x")
  assert tq["id"] == "tq_7" and tq["golden_answers"] == ["Paris", "Paris, France"]


@pytest.mark.parametrize("builder", ["natural_questions_open", "trivia_qa/rc.nocontext"])
def test_tfds_mock_data(builder):
  tfds = pytest.importorskip("tensorflow_datasets")
  with tfds.testing.mock_data(num_examples=7, policy=tfds.testing.MockPolicy.USE_CODE):
    exs = data.load_dataset(f"tfds:{builder}@validation")
  assert len(exs) == 7
  for e in exs:
    assert isinstance(e["question"], str) and e["question"]
    assert e["golden_answers"] and all(isinstance(g, str) for g in e["golden_answers"])
  assert len({e["id"] for e in exs}) == 7
  assert len(data.subsample(exs, 3, seed=0)) == 3
