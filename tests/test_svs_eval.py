"""Unbiased pass@k (hand-computed values) and the per-source summaries of the SvS evaluation."""
import math

import pytest

from ssp_jax.rollout import Rollout
from ssp_jax.svs import eval as E
from ssp_jax.svs.data import MathProblem


@pytest.mark.parametrize("n,c,k,expected", [
    (1, 0, 1, 0.0), (1, 1, 1, 1.0),
    (4, 1, 1, 0.25),                       # pass@1 = c / n
    (4, 2, 2, 1 - 1 / 6),                  # 1 - C(2,2)/C(4,2) = 5/6
    (5, 1, 2, 0.4),                        # 1 - C(4,2)/C(5,2) = 1 - 6/10
    (10, 3, 5, 1 - 21 / 252),              # 1 - C(7,5)/C(10,5) = 11/12
    (8, 0, 8, 0.0), (8, 1, 8, 1.0),        # any correct sample counts when k = n
    (8, 5, 4, 1.0),                        # n - c < k: every k-subset has a correct one
    (32, 1, 1, 1 / 32), (32, 1, 32, 1.0),
])
def test_pass_at_k_hand_computed(n, c, k, expected):
  assert E.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_binomials_and_stays_stable_for_large_n():
  for n, c, k in [(20, 4, 3), (50, 7, 10), (100, 1, 32)]:
    exact = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert E.pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-12)
  v = E.pass_at_k(5000, 3, 1000)        # C(5000, 1000) overflows a float; the product does not
  assert 0.0 < v < 1.0 and math.isfinite(v)
  assert v == pytest.approx(1 - (4000 * 3999 * 3998) / (5000 * 4999 * 4998), rel=1e-9)


@pytest.mark.parametrize("n,c,k", [(4, 5, 1), (4, -1, 1), (4, 1, 0), (4, 1, 5)])
def test_pass_at_k_rejects_bad_arguments(n, c, k):
  with pytest.raises(ValueError):
    E.pass_at_k(n, c, k)


def test_score_and_summarize_per_source():
  probs = [MathProblem("a", "1+1?", "2", "MATH-500"), MathProblem("b", "2+2?", "4", "AIME"),
           MathProblem("c", "3+3?", "6", "AIME")]
  texts = ["\\boxed{2}", "\\boxed{3}",              # a: 1 of 2
           "\\boxed{4}", "\\boxed{4}",              # b: 2 of 2
           "no box", "\\boxed{7}"]                  # c: 0 of 2
  recs = E.score(probs, texts, 2)
  assert [r["num_correct"] for r in recs] == [1, 2, 0]
  assert recs[0]["predictions"] == ["2", "3"]
  s = E.summarize([r for r in recs if r["source"] == "AIME"], 2, (1, 2))
  assert s == {"problems": 2, "samples_per_problem": 2, "acc": 0.5, "pass@1": 0.5,
               "pass@2": 0.5}
  s = E.summarize(recs[:1], 2, (1, 2))
  assert s["acc"] == 0.5 and s["pass@2"] == 1.0


class EchoEngine:
  """Answers each solving prompt with a boxed number parsed from the problem text."""

  def generate(self, params, prompts, rng, **kw):
    from ssp_jax.types import Trajectory
    out = []
    for i, msgs in enumerate(prompts):
      guess = msgs[-1]["content"].split("?")[0].split()[-1]
      out.append(Trajectory([1], [2], [1], [0.0], text=f"\\boxed{{{guess if i % 2 else 0}}}"))
    return Rollout(out, {})


def test_run_eval_groups_by_source_and_flattens_metrics(tmp_path):
  import ml_collections
  cfg = ml_collections.ConfigDict(dict(seed=0, n=2, ks=(1, 2), temperature=1.0, top_p=0.95,
                                       max_new_tokens=0, batch_size=1))
  sets = {"set": [MathProblem("a", "What is 5?", "5"), MathProblem("b", "What is 6?", "6", "src")]}
  results, preds = E.run_eval(EchoEngine(), None, sets, cfg)
  assert set(results) == {"set", "src"}
  assert results["set"]["acc"] == 0.5 and results["set"]["pass@2"] == 1.0
  flat = E.flat_metrics(results)
  assert flat["val/src/pass@1"] == 0.5 and "val/set/problems" not in flat
  path = E.write_results(str(tmp_path), results, preds)
  assert (tmp_path / "predictions_set.jsonl").read_text().count("\n") == 2
  assert "| set | 1 | 50.0 | 50.0 | 100.0 |" in E.results_markdown(results)
  assert path.endswith("results.json")
