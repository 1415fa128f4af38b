"""Solver/proposer rewards, EM normalisation and the judge path on hand-made cases."""
import pytest

from ssp_jax.ssp import rewards as R


@pytest.mark.parametrize("pred,gold,want", [
    ("Paris", "paris", 1.0),                  # case
    ("Paris.", "Paris", 1.0),                 # punctuation
    ("the Beatles", "Beatles", 1.0),          # articles
    ("  New   York ", "new york", 1.0),       # whitespace
    ("London", "Paris", 0.0),
    ("Paris", ["Lutetia", "Paris"], 1.0),     # list-valued ground truth, any alias
    ("Lyon", ["Lutetia", "Paris"], 0.0),
])
def test_em_cases(pred, gold, want):
  score, got = R.solver_score(f"<think>x</think><answer>{pred}</answer>", gold, "em")
  assert score == want and got == pred.strip()


def test_last_answer_and_no_answer_and_observation_ignored():
  assert R.solver_score("<answer>Rome</answer> <answer>Paris</answer>", "Paris")[0] == 1.0
  assert R.solver_score("I think Paris", "Paris") == (0.0, None)
  # an <answer> tag inside a retrieved document is not the solver's answer
  assert R.solver_score("<information><answer>Paris</answer></information>", "Paris")[0] == 0.0


def test_f1_and_spam():
  assert R.solver_score("<answer>New York City</answer>", "New York", "f1")[0] == \
      pytest.approx(0.8)
  spam = "<answer>x</answer>" * 11 + "<answer>Paris</answer>"
  assert R.solver_score(spam, "Paris", "em", spam_max_tags=10)[0] == 0.25
  assert R.solver_score(spam, "Paris", "em", spam_max_tags=0)[0] == 1.0


class _Gen:
  def __init__(self, replies):
    self.replies, self.calls = replies, []

  def generate_text(self, messages, *, max_new_tokens, temperature):
    self.calls.append(messages)
    return [self.replies[i % len(self.replies)] for i in range(len(messages))]


def test_em_then_judge_only_misses_with_answers():
  gen = _Gen(["Correct"])
  resp = ["<answer>Paris</answer>", "<answer>the French capital</answer>", "no answer"]
  r, preds = R.solver_rewards(resp, ["Paris"] * 3, ["q"] * 3, mode="em_then_judge",
                              judge=R.Judge(gen))
  assert r == [1.0, 1.0, 0.0] and preds[2] is None
  assert len(gen.calls) == 1 and len(gen.calls[0]) == 1   # only the EM miss went to the judge
  r, _ = R.solver_rewards(resp, ["Paris"] * 3, ["q"] * 3, mode="em_then_judge",
                          judge=R.Judge(_Gen(["Wrong"])))
  assert r == [1.0, 0.0, 0.0]
  with pytest.raises(ValueError, match="needs a judge"):
    R.solver_rewards(resp, ["Paris"] * 3, ["q"] * 3, mode="judge")


def test_parse_verdict():
  assert R.parse_verdict("Correct.") and R.parse_verdict(" correct")
  assert not R.parse_verdict("Incorrect") and not R.parse_verdict("Wrong") and \
      not R.parse_verdict("")


def test_proposer_rewards():
  assert R.solve_rate([1, 0, 0, 1, 0]) == pytest.approx(0.4)
  assert R.proposer_reward(0.4) == pytest.approx(0.6)
  assert R.proposer_reward(None) == 0.0
  assert R.proposer_reward(None, invalid_reward=-0.1) == -0.1
  assert R.proposer_reward(0.5, mode="intermediate_difficulty") == pytest.approx(1.0)
  assert R.proposer_reward(1.0, mode="intermediate_difficulty") == 0.0
  assert R.proposer_reward(0.0, mode="intermediate_difficulty") == 0.0
  with pytest.raises(ValueError, match="unknown"):
    R.proposer_reward(0.3, mode="bogus")
