"""Answer-set loader (bad lines skipped and counted) and the shipped answer set."""
import collections
import json

import pytest

from ssp_jax.ssp import answers as A


def test_bad_lines_skipped_counted_first_reported(tmp_path):
  p = tmp_path / "a.jsonl"
  p.write_text("\n".join([
      json.dumps({"ground_truth": "Paris", "search_turns": 2}),
      "{not json",
      json.dumps({"ground_truth": ["Lutetia", "Paris"], "search_turns": 3,
                  "sys_question_example": "Q?"}),
      json.dumps({"ground_truth": "", "search_turns": 2}),
      json.dumps({"ground_truth": {"target": ["x"]}, "search_turns": "2"}),
      json.dumps({"ground_truth": "y", "search_turns": 0}),
      "",
  ]))
  items, stats = A.load_answers(str(p))
  assert [i.ground_truth for i in items] == ["Paris", ["Lutetia", "Paris"], ["x"]]
  assert items[1].hops == 3 and items[1].examples == ("Q?",)
  assert stats.good == 3 and stats.bad == 3
  assert stats.first_bad.startswith(f"{p}:2: not JSON")
  assert "3 bad lines" in stats.report()


def test_errors_name_the_problem(tmp_path):
  with pytest.raises(FileNotFoundError, match="answers_path"):
    A.load_answers(str(tmp_path / "missing.jsonl"))
  p = tmp_path / "b.jsonl"
  p.write_text("junk\n")
  with pytest.raises(ValueError, match="no usable line"):
    A.load_answers(str(p))


def test_shipped_answer_set_mix():
  items, stats = A.load_answers(A.default_answers_path())
  assert stats.bad == 0 and len(items) >= 200
  rows = [json.loads(l) for l in open(A.default_answers_path())]
  mix = collections.Counter(r["category"] for r in rows)
  assert set(mix) == {"person", "place", "date", "number"} and min(mix.values()) >= 20
  assert {i.hops for i in items} <= {1, 2, 3, 4}
