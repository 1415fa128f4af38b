"""Scoring trajectories, per-dataset summaries, Table-1 averages and the files written."""
import json

import pytest

from ssp_jax.eval import report, runner
from ssp_jax.ssp.rewards import Judge
from ssp_jax.types import Trajectory


def _traj(text, searches=0, policy_tokens=5, obs_tokens=0):
  n = policy_tokens + obs_tokens
  return Trajectory(prompt_ids=[1, 2], response_ids=list(range(n)),
                    loss_mask=[1] * policy_tokens + [0] * obs_tokens, logprobs=[0.0] * n,
                    text=text, queries=[f"q{i}" for i in range(searches)],
                    num_searches=searches, stop_reason="answer")


def _ex(i, golden):
  return {"id": f"x{i}", "question": f"question {i}?", "golden_answers": golden}


def test_score_uses_last_answer_and_counts_policy_tokens():
  t = _traj("<search>a</search><information>...</information><answer>Paris</answer> oops "
            "<answer>The Eiffel Tower</answer>", searches=1, policy_tokens=7, obs_tokens=30)
  p = runner.score(_ex(0, ["Eiffel Tower"]), t)
  assert p["prediction"] == "The Eiffel Tower"
  assert (p["em"], p["f1"]) == (1.0, 1.0)
  assert (p["num_searches"], p["length"], p["response_tokens"]) == (1, 7, 37)
  none = runner.score(_ex(1, ["x"]), _traj("no tags"))
  assert none["prediction"] is None and none["em"] == 0.0 and none["f1"] == 0.0


def _preds():
  exs = [_ex(0, ["Paris"]), _ex(1, ["Barack Hussein Obama"]), _ex(2, ["1999"])]
  trajs = [_traj("<answer>paris</answer>", searches=2, policy_tokens=10),
           _traj("<answer>Barack Obama</answer>", searches=1, policy_tokens=20),
           _traj("I don't know", searches=0, policy_tokens=30)]
  return [runner.score(e, t) for e, t in zip(exs, trajs)]


def test_summarize_matches_hand_computation():
  s = report.summarize(_preds())
  assert s["n"] == 3
  assert s["em"] == pytest.approx(1 / 3)
  assert s["f1"] == pytest.approx((1.0 + 0.8 + 0.0) / 3)   # "barack obama" vs 3 tokens: 0.8
  assert s["searches_mean"] == pytest.approx(1.0)
  assert s["length_mean"] == pytest.approx(20.0)
  assert s["no_answer_rate"] == pytest.approx(1 / 3)
  assert "judge" not in s


class _ContainsGenerator:
  """A text generator that answers the judge prompt by substring containment; counts calls."""

  def __init__(self, fail=False):
    self.calls, self.fail = [], fail

  def generate_text(self, messages, *, max_new_tokens, temperature):
    if self.fail:
      raise ConnectionError("judge down")
    self.calls.append(len(messages))
    out = []
    for m in messages:
      user = m[-1]["content"]
      pred = user.split("Model answer: ")[1].split("\n")[0].lower()
      ref = user.split("Reference answer: ")[1].split("\n")[0].lower()
      out.append("Correct" if pred in ref or ref in pred else "Wrong")
    return out


def test_judge_short_circuits_on_em_and_batches_misses():
  preds = _preds()
  gen = _ContainsGenerator()
  runner.add_judge(Judge(gen), preds)
  assert [p["judge"] for p in preds] == [1.0, 0.0, 0.0]  # "barack obama" not a substring
  assert gen.calls == [1]            # one call, only the miss that has a prediction
  s = report.summarize(preds)
  assert s["judge"] == pytest.approx(1 / 3) and s["judge_errors"] == 0


def test_judge_failure_counts_as_wrong():
  preds = _preds()
  runner.add_judge(Judge(_ContainsGenerator(fail=True)), preds)
  assert [p["judge"] for p in preds] == [1.0, 0.0, 0.0]
  assert report.summarize(preds)["judge_errors"] == 1


def _summary(em):
  return {"n": 10, "em": em, "f1": em + 0.1, "searches_mean": 1.0, "length_mean": 50.0}


def test_averages_macro_over_groups():
  per = {"nq": _summary(0.2), "triviaqa": _summary(0.4), "hotpotqa": _summary(0.1),
         "wiki_sample": _summary(0.9)}
  avg = report.averages(per)
  assert avg["general_qa"]["em"] == pytest.approx(0.3)
  assert avg["multi_hop"]["em"] == pytest.approx(0.1)
  assert avg["overall"]["em"] == pytest.approx((0.2 + 0.4 + 0.1) / 3)   # Table-1 sets only
  assert avg["overall"]["datasets"] == ["nq", "triviaqa", "hotpotqa"]
  only_extra = report.averages({"wiki_sample": _summary(0.9)})
  assert set(only_extra) == {"overall"} and only_extra["overall"]["em"] == pytest.approx(0.9)


def test_reserved_names_rejected():
  with pytest.raises(ValueError, match="reserved"):
    report.results_dict({"meta": _summary(0.1)})


def test_markdown_table_layout():
  """Only the columns with data: Table 1's datasets in its order, Avg., then the others."""
  res = report.results_dict({"nq": _summary(0.25), "bamboogle": _summary(0.5),
                             "wiki_sample": _summary(0.75)})
  md = report.results_markdown(res)
  header = next(line for line in md.splitlines() if line.startswith("| Metric"))
  assert header.split("|")[2:-1] == [" NQ ", " Bamboogle ", " Avg. ", " wiki_sample "]
  em_row = next(line for line in md.splitlines() if line.startswith("| EM "))
  assert [c.strip() for c in em_row.split("|")[2:-1]] == ["25.0", "50.0", "37.5", "75.0"]
  assert "–" not in md


def test_markdown_one_dataset_has_one_column_and_names_runs():
  res = report.results_dict({"wiki_sample": {**_summary(0.75), "run": "r1"}})
  md = report.results_markdown(res)
  header = next(line for line in md.splitlines() if line.startswith("| Metric"))
  assert header.split("|")[2:-1] == [" wiki_sample "]
  assert "| wiki_sample | " in md and " r1 |" in md and "evaluation runs" not in md
  two = report.results_dict({"a": {**_summary(0.5), "run": "r1"},
                             "b": {**_summary(0.5), "run": "r2"}})
  assert "come from 2 evaluation runs" in report.results_markdown(two)


def test_write_results_and_flat_metrics(tmp_path):
  preds = _preds()
  res = report.results_dict({"wiki_sample": report.summarize(preds)}, {"seed": 0})
  paths = report.write_results(str(tmp_path), res, {"wiki_sample": preds})
  loaded = json.load(open(paths["json"]))
  lines = [json.loads(line) for line in open(tmp_path / "predictions_wiki_sample.jsonl")]
  assert loaded["wiki_sample"]["n"] == len(lines) == 3
  assert loaded["wiki_sample"]["em"] == pytest.approx(sum(p["em"] for p in lines) / 3)
  assert (tmp_path / "results.md").read_text().startswith("# Evaluation")
  flat = runner.flat_metrics(loaded)
  assert flat["val/wiki_sample/em"] == pytest.approx(1 / 3)
  assert flat["val/overall/f1"] == pytest.approx(loaded["wiki_sample"]["f1"])
