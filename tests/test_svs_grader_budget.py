"""The SvS grader never hangs and never scores a hedge correct (fault drill: grader budgets).

Every case of the drill: power towers written with nested braces, flat or through products
(sympy's parser ran 60+ s on each), a 100,000-digit answer (82 s), 50,000 nested braces (60+ s),
and two long hedges that scored 1.0 against 5; then a batch with a pathological answer among
normal ones, which must come back complete and correct within a small multiple of the budget.
"""
import time

import pytest

from ssp_jax.svs import answer_guard, hedge
from ssp_jax.svs import math_grader as M
from ssp_jax.svs.answer_extract import extract_answer
from ssp_jax.svs.grade_pool import GradePool, budget_problem, check_budgets
from ssp_jax.svs.grader_bench import FORMS, NEAR_MISSES, PATHOLOGICAL, TOWERS

BUDGET_S = 1.5          # per-answer budget of the pools made here (normal answers: < 0.4 s)
SLACK_S = 12.0          # worker start-up (sympy + math_verify imports) on a loaded 2-core host
# A huge binomial passes every guard (no guard knows \binom) and math_verify computes it; its
# own 2-s SIGALRM timeouts end it after >= 2 s, the worker's deadline at BUDGET_S.
SLOW = "\\boxed{\\binom{10^{8}}{5 \\cdot 10^{7}}}"


@pytest.fixture(scope="module")
def pool():
  p = GradePool(0, answer_timeout_s=BUDGET_S, batch_timeout_s=60.0)
  p.grade(["\\boxed{x+1}"], ["1+x"])           # the worker is started before any timing
  yield p
  p.close()


def _timed(pool, responses, references):
  t0 = time.perf_counter()
  got = pool.grade(responses, references)
  return got, time.perf_counter() - t0


@pytest.mark.parametrize("response", TOWERS)
def test_power_towers_score_zero_at_once(pool, response):
  got, dt = _timed(pool, [response], ["1"])
  assert got == [0.0] and dt < 1.0
  assert pool.last["refused"] == 1 and pool.last["timeouts"] == 0
  assert M.grade(response, "10") == 0.0


def test_a_100000_digit_answer_scores_zero_at_once(pool):
  digits = "7" * 100_000
  got, dt = _timed(pool, ["\\boxed{%s}" % digits, "The answer is %s." % digits], ["5", "5"])
  assert got == [0.0, 0.0] and dt < 3 * BUDGET_S
  assert pool.grade(["\\boxed{%s}" % digits], [digits]) == [1.0]   # still equal to itself


def test_50000_nested_braces_score_zero_at_once(pool):
  response = "\\boxed{" + "{" * 50_000 + "5" + "}" * 50_000 + "}"
  got, dt = _timed(pool, [response, "\\boxed{" + "{" * 20 + "5" + "}" * 20 + "}"], ["5", "5"])
  assert got == [0.0, 0.0] and dt < 1.0
  assert pool.grade(["\\boxed{{{5}}}"], ["5"]) == [1.0]


def test_the_two_long_hedges_score_zero(pool):
  listed = "\\boxed{" + ", ".join(str(i) for i in range(1000, 1080)) + ", 5}"
  terms = " + ".join(str(i) for i in range(1, 151))              # = 11325
  got, dt = _timed(pool, [listed, "\\boxed{%s = 5}" % terms], ["5", "5"])
  assert got == [0.0, 0.0] and dt < 3 * BUDGET_S
  assert pool.last["hedge"] == 2
  assert pool.grade(["\\boxed{%s = 11325}" % terms], ["11325"]) == [1.0]   # a true chain


@pytest.mark.parametrize("response,ref,score", [
    ("\\boxed{5 or 6}", "5", 0.0), ("The answer is 5 or 6.", "6", 0.0),
    ("\\boxed{5 \\text{ or } 6}", "5", 0.0), ("\\boxed{\\{5, 6\\}}", "5", 0.0),
    ("\\boxed{5; 6}", "5", 0.0), ("\\boxed{\\pm 5}", "5", 0.0), ("\\boxed{2 + 2 = 5}", "5", 0.0),
    ("\\boxed{x = 6 = 5}", "5", 0.0), ("\\boxed{1 + 2 + \\cdots + 150 = 5}", "5", 0.0),
    ("\\boxed{1,000, 5}", "5", 0.0),
    # legitimate answers stay correct
    ("\\boxed{x = 5}", "5", 1.0), ("\\boxed{2 + 3 = 5}", "5", 1.0), ("\\boxed{1,000}", "1000", 1.0),
    ("\\boxed{12,345,678}", "12345678", 1.0), ("\\boxed{1{,}000}", "1000", 1.0),
    ("\\boxed{(1, 2)}", "(1,2)", 1.0), ("\\boxed{[2, 3)}", "[2,3)", 1.0),
    ("\\boxed{x \\in [2, 3)}", "[2,3)", 1.0), ("\\boxed{\\{1, 2\\}}", "\\{2, 1\\}", 1.0),
    ("\\boxed{y = 2x + 3}", "2x+3", 1.0), ("\\boxed{f(2) = 7}", "7", 1.0),
    ("\\boxed{\\frac{1}{2} = 0.5}", "\\frac12", 1.0), ("\\boxed{x^2 + y^2}", "y^2+x^2", 1.0),
])
def test_hedges_score_zero_and_legitimate_answers_stay_correct(pool, response, ref, score):
  assert pool.grade([response], [ref]) == [score]


def test_a_pathological_answer_does_not_stall_the_batch(pool):
  normal = FORMS + NEAR_MISSES
  bad = [(SLOW, "1")] + PATHOLOGICAL                 # in the middle of the batch
  pairs = normal[:12] + bad + normal[12:]
  responses, refs = [r for r, _ in pairs], [a for _, a in pairs]
  expected = [1.0 if p in FORMS else 0.0 for p in pairs]
  got, dt = _timed(pool, responses, refs)
  assert got == expected
  assert pool.last["timeouts"] == 1 and pool.last["worker_restarts"] == 1
  assert dt < 3 * BUDGET_S + SLACK_S, dt          # the old grader hung here for 60+ s
  got, dt = _timed(pool, [SLOW], ["1"])           # remembered: not graded (and waited on) again
  assert got == [0.0] and dt < 0.5


def test_the_batch_budget_bounds_a_call_of_many_slow_answers():
  p = GradePool(2, answer_timeout_s=30.0, batch_timeout_s=60.0)
  slow = ["\\boxed{\\binom{10^{8}}{%d \\cdot 10^{6}}}" % k for k in (41, 43, 47)]
  late = "\\boxed{x^2 - 1}"                   # queued behind the slow ones on both workers
  try:
    p.grade(["\\boxed{x+1}", "\\boxed{x+2}"], ["1+x", "2+x"])   # both workers started
    p.batch_timeout_s = 1.5
    got, dt = _timed(p, slow + [late, "\\boxed{7}", "The answer is 8."],
                     ["1", "1", "1", "(x-1)(x+1)", "7", "8"])
    assert got == [0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    assert p.last["timeouts"] == 4
    assert dt < 1.5 + SLACK_S, dt
    p.batch_timeout_s = 60.0                     # left over, not graded: not remembered as 0
    assert p.grade([late], ["(x-1)(x+1)"]) == [1.0]
  finally:
    p.close()


def test_guards_and_extraction_are_linear():
  t0 = time.perf_counter()
  assert extract_answer("<answer>" * 100_000) is None           # a lazy regex: quadratic
  assert extract_answer("x" + "<answer>1" * 50_000 + "</answer>") == "1"
  assert answer_guard.refusal("9" * 50_000 + "!" * 50_000) == "too_long"
  for n in (10_000, 100_000):
    assert answer_guard._factorial_refusal("1!" * n) is None
    assert not hedge.several_values("1" * n) and len(hedge.equation_parts("1=" * n)) == n + 1
    assert answer_guard._power_refusal("x^{2}+" * n) is None
  assert time.perf_counter() - t0 < 5.0


@pytest.mark.parametrize("text,reason", [
    ("2^{99999}", None), ("2^{100000}", "huge_power"), ("(10^{999})^{999}", "huge_power"),
    ("((10^{99})^{99})^{99}", "huge_power"), ("2^{2^{100}}", "tower"), ("e^{-x^2}", "tower"),
    ("x^2 + y^2", None), ("(x^2+1)^{2}", None), ("100000!", "big_factorial"), ("1000!", None),
    ("(10^{10})!", "big_factorial"), ("1e999999999", "big_e_notation"), ("2**3", "python_power"),
    ("\\frac{\\sqrt{2}}{2}", None), ("1" * 1001, "too_long"), ("{" * 17 + "}" * 17, "too_deep"),
])
def test_refusal_reasons(text, reason):
  assert answer_guard.refusal(text) == reason


def test_budgets_are_checked_with_the_field_named():
  from ml_collections import ConfigDict
  from ssp_jax.run.validate import ConfigError
  assert budget_problem(0, 5.0, 0.0) is None
  with pytest.raises(ConfigError, match="grader_answer_timeout_s=0.*must be > 0"):
    check_budgets(ConfigDict({"grader_answer_timeout_s": 0.0}))
  with pytest.raises(ConfigError, match="grader_batch_timeout_s=-1"):
    check_budgets(ConfigDict({"grader_batch_timeout_s": -1.0}))
  with pytest.raises(ValueError, match="grader_workers=-2"):
    GradePool(-2)
  p = GradePool.from_config(ConfigDict({"grader_workers": 3, "grader_answer_timeout_s": 2.5}))
  assert (p.workers, p.answer_timeout_s, p.batch_timeout_s) == (3, 2.5, 300.0)


@pytest.mark.parametrize("override,key", [
    ("--config.svs.grader_answer_timeout_s=0", "svs.grader_answer_timeout_s"),
    ("--config.svs.grader_batch_timeout_s=-1", "svs.grader_batch_timeout_s"),
])
def test_a_bad_budget_is_rejected_before_compute(tmp_path, capsys, override, key):
  import os
  from ssp_jax import cli
  config = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs",
                        "svs_tiny.py")
  rc = cli.main(["train", "--config", config, f"--config.workdir={tmp_path / 'never'}", override])
  err = capsys.readouterr().err
  assert rc == 2 and key in err and len(err.strip().splitlines()) == 1, err
  assert not (tmp_path / "never").exists()


def test_the_game_reports_grading_counts_per_step():
  import types
  from ssp_jax.svs import config as svs_config
  from ssp_jax.svs import game as G
  from ssp_jax.svs.data import MathProblem, ProblemIterator
  cfg = svs_config.get_svs_config()
  cfg.update(grader_answer_timeout_s=BUDGET_S)
  data = ProblemIterator([MathProblem("p", "1 + 1?", "2", "t")], shuffle=False)
  game = G.SvSGame(cfg, svs_config.base_run_config().rl, None, data, max_prompt_tokens=64)
  try:
    assert game.grader.answer_timeout_s == BUDGET_S
    texts = [TOWERS[0], "\\boxed{5 or 6}", "\\boxed{2}", SLOW]
    trajs = [types.SimpleNamespace(text=t, meta={}) for t in texts]
    assert game._grade(trajs, ["2", "5", "2", "2"]) == [0.0, 0.0, 1.0, 0.0]
    got = game._counters()
    assert (got["grade/refused"], got["grade/hedge"], got["grade/timeouts"]) == (1.0, 1.0, 1.0)
    assert trajs[2].meta["reward"] == 1.0 and "time/grade" in got
  finally:
    game.grader.close()
