"""The math answer checker: extraction, normalisation and the equal / not-equal cascade."""
import pytest

from ssp_jax.svs import math_grader as M

EQUAL = [
    # plain numbers and formatting
    ("42", "42"), (" 42 ", "42"), ("42.", "42"), ("42.0", "42"), ("0.50", "0.5"), (".5", "0.5"),
    ("-3", "-3"), ("1,000", "1000"), ("1{,}000", "1000"), ("12,345,678", "12345678"),
    ("0.33333333", "\\frac{1}{3}"), ("0.666667", "\\frac{2}{3}"),   # decimals to 6 places
    # fractions
    ("\\frac{1}{2}", "1/2"), ("\\dfrac{1}{2}", "\\frac{1}{2}"), ("\\tfrac12", "0.5"),
    ("\\frac12", "\\frac{1}{2}"), ("-\\frac{3}{4}", "-0.75"), ("\\frac{-3}{4}", "-3/4"),
    ("\\frac{6}{8}", "\\frac{3}{4}"), ("2\\frac{1}{2}", "\\frac{5}{2}"), ("17/12", "\\frac{17}{12}"),
    # wrappers and units
    ("\\left(1, 2\\right)", "(1,2)"), ("90^\\circ", "90"), ("90^{\\circ}", "90"), ("90°", "90"),
    ("50\\%", "50"), ("\\$5", "5"), ("$5$", "5"), ("5 \\text{ cm}", "5"), ("12 degrees", "12"),
    ("\\text{7 ways}", "7"), ("x = 5", "5"), ("y=\\frac{1}{3}", "\\frac{1}{3}"),
    ("\\mathrm{A}", "A"), ("\\text{(B)}", "(B)"), ("yes", "Yes"), ("\\!\\,5", "5"),
    ("{12}", "12"), ("\\boxed{7}", "7"),
    # radicals and expressions (sympy)
    ("2\\sqrt{2}", "\\sqrt{8}"), ("\\sqrt2", "\\sqrt{2}"), ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}"),
    ("9\\sqrt{3}", "\\sqrt{243}"), ("25\\pi", "\\pi \\cdot 25"), ("x+1", "1+x"),
    ("x^2-1", "(x-1)(x+1)"), ("10^{3}", "1000"), ("\\sqrt{2}", "1.41421356"),
    ("2 \\times 3", "6"),
]

NOT_EQUAL = [
    ("3.14159", "3.141592"),      # two decimals are exact: no tolerance between them
    ("3", "4"), ("-3", "3"), ("0.5", "0.51"), ("3.1415", "3.141592"), ("0.333", "\\frac{1}{3}"), ("\\frac{1}{2}", "\\frac{1}{3}"),
    ("1/2", "2"), ("2\\frac{1}{2}", "1"), ("1,000", "1"), ("(1,2)", "(2,1)"), ("\\sqrt{2}", "1.4142"),
    ("x+1", "x+2"), ("25\\pi", "25"), ("A", "B"), ("", "0"), ("5", ""), ("12 or 13", "12"), ("12x", "12"),
    ("1/0", "0"), ("\\frac{1}{0}", "0"), ("inf", "inf0"), ("2^{100000}", "1"),
    ("__import__('os').getcwd()", "1"), ("x.real", "x"), ("\\sqrt{-1}", "1"),
]


@pytest.mark.parametrize("pred,ref", EQUAL)
def test_equal(pred, ref):
  assert M.is_equiv(pred, ref) and M.is_equiv(ref, pred)


@pytest.mark.parametrize("pred,ref", NOT_EQUAL)
def test_not_equal(pred, ref):
  assert not M.is_equiv(pred, ref)


@pytest.mark.parametrize("text,boxed", [
    ("so the answer is \\boxed{5}.", "5"),
    ("\\boxed{1} then \\boxed{2}", "2"),                           # the last one
    ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{1}{\\sqrt{2}}"),      # nested braces
    ("\\boxed {x = 3}", "x = 3"),
    ("\\fbox{9}", "9"),
    ("\\boxed 7$ done", "7"),
    ("\\boxed{3", None),                                            # unbalanced
    ("no box here", None),
    ("\\boxed", None),
])
def test_last_boxed(text, boxed):
  assert M.last_boxed(text) == boxed


def test_extract_answer_reads_after_the_last_think():
  assert M.extract_answer("<think> maybe \\boxed{3} </think> so \\boxed{4}") == "4"
  assert M.extract_answer("<think> maybe \\boxed{3} </think> no box after") is None
  assert M.extract_answer("") is None and M.extract_answer(None) is None


@pytest.mark.parametrize("response,ref,score", [
    ("2 + 2 = 4, so \\boxed{4}.", "4", 1.0),
    ("The answer is \\boxed{\\dfrac{3}{4}}", "0.75", 1.0),
    ("The answer is 4.", "4", 1.0),                                # no box: a marker
    ("The answer is 5.", "4", 0.0),
    ("\\boxed{5}", "4", 0.0),
    ("\\boxed{}", "4", 0.0),
    ("\\boxed{\\frac{}{}}", "\\frac{1}{2}", 0.0),
    ("\\boxed{" + "(" * 500 + "}", "1", 0.0),                      # garbage never raises
])
def test_grade(response, ref, score):
  assert M.grade(response, ref) == score


def test_grade_never_raises_on_odd_inputs():
  for resp, ref in [(None, "1"), ("\\boxed{1}", None), (123, "1"), ("\\boxed{1}", 1)]:
    assert M.grade(resp, ref) in (0.0, 1.0)


def test_normalize_examples():
  assert M.normalize("\\left( \\dfrac{1}{2}, 3 \\right)") == "(\\frac{1}{2},3)"
  assert M.normalize("x = 1{,}234.") == "1234"
  assert M.normalize("\\text{ 45 } \\%") == "45"


def test_to_sympy_text_rejects_unsafe_input():
  for s in ("__import__('os')", "x.y", "abc", "lambda", "2**(1000)", "a_1", "[1]"):
    assert M.to_sympy_text(M.normalize(s)) is None
  assert M.to_sympy_text("\\frac{1}{\\sqrt{2}}") == "((1)/(sqrt(2)))"


# -- issue 13: near misses, the original's answer forms, fallbacks, never raising -------------
from ssp_jax.svs.grader_bench import FORMS, NEAR_MISSES  # noqa: E402


@pytest.mark.parametrize("ref,pred", [
    ("1000000", "1000001"), ("1000000", "999999"), ("1000000", "1000000.4"),
    ("1000000", "1000000.000001"), ("123456789012", "123456789013"), ("10^{6}", "1000001"),
    ("1000000", "10^6 + 1"), ("1000000", "1000000 + 10^{-9}"), ("2.5", "2.500001"),
    ("0.1", "0.10000001"), ("\\frac{1}{3}", "0.33"), ("\\sqrt{2}", "1.4142"),
])
def test_near_miss_integers_and_decimals_are_rejected(ref, pred):
  assert M.grade("\\boxed{%s}" % pred, ref) == 0.0
  assert M.grade("The answer is %s." % pred, ref) == 0.0
  assert not M.is_equiv(pred, ref)


@pytest.mark.parametrize("ref", ["1000000", "123456789012", "055"])
def test_integers_are_equal_exactly(ref):
  assert M.grade("\\boxed{%s}" % ref, ref) == 1.0
  assert M.grade("\\boxed{%d}" % int(ref), ref) == 1.0


@pytest.mark.parametrize("response,ref", FORMS)
def test_the_originals_answer_forms_are_accepted(response, ref):
  assert M.grade(response, ref) == 1.0


@pytest.mark.parametrize("response,ref", NEAR_MISSES)
def test_near_misses_hedges_and_garbage_score_zero(response, ref):
  assert M.grade(response, ref) == 0.0


@pytest.mark.parametrize("response,answer", [
    ("So the final answer is 5.", "5"),
    ("The answer is $\\frac{1}{2}$. Done.", "\\frac{1}{2}"),
    ("Thus, the answer is \\(x+1\\)", "x+1"),
    ("Work...\nAnswer: 42\n", "42"),
    ("The answer: 7", "7"),
    ("<answer> 3 </answer>", "3"),
    ("The answers are 1, 2\n", "1, 2"),
    ("The answer is 3.5.", "3.5"),
    ("<think>the answer is 1</think> no marker here", None),
    ("nothing to see", None),
])
def test_non_boxed_fallbacks(response, answer):
  assert M.extract_answer(response) == answer
  assert M.extract_answer(response, fallbacks=False) is None


def test_a_box_wins_over_a_marker_and_one_candidate_only():
  assert M.extract_answer("Answer: 6. Check: \\boxed{5}") == "5"
  assert M.grade("\\boxed{5} Answer: 6", "6") == 0.0            # no hedging across forms


def test_without_a_candidate_math_verify_reads_the_tail():
  assert M.grade("we get x = 2 and then 3 + 4 = 7", "7") == 1.0     # the original's stage 3
  assert M.grade("we get x = 2 and then 3 + 4 = 8", "7") == 0.0


@pytest.mark.parametrize("response", [
    None, "", " ", "\\boxed{", "\\boxed{}", "}}}{{{", "\\boxed{\\frac{1}{0}}", "Answer:",
    "\\boxed{" + "\\sqrt{" * 200 + "2" + "}" * 200 + "}", "\\boxed{1e999999999}",
    "\\boxed{__import__('os').system('true')}", "\\x00\\boxed{\\begin{pmatrix}}", b"\\boxed{1}",
    "\\boxed{10^{10^{10}}!}",
])
def test_malformed_or_empty_responses_score_zero_without_raising(response):
  assert M.grade(response, "1") == 0.0


def test_grade_in_a_thread_has_no_sigalrm_and_still_works():
  import concurrent.futures
  with concurrent.futures.ThreadPoolExecutor(2) as ex:
    got = list(ex.map(lambda rf: M.grade(*rf), FORMS[:6] + NEAR_MISSES[:6]))
  assert got == [1.0] * 6 + [0.0] * 6


def test_narrow_mode_is_the_earlier_checker():
  assert M.grade("The answer is 4.", "4", fallbacks=False, use_math_verify=False) == 0.0
  assert M.grade("\\boxed{3, 1, 2}", "1, 2, 3", fallbacks=False, use_math_verify=False) == 0.0
  assert M.grade("\\boxed{4}", "4", fallbacks=False, use_math_verify=False) == 1.0


def test_grade_pool_with_several_workers_matches_one_worker():
  from ssp_jax.svs.grade_pool import GradePool
  pairs = FORMS + NEAR_MISSES
  responses, refs = [r for r, _ in pairs], [a for _, a in pairs]
  pool, one = GradePool(workers=2), GradePool(0)
  try:
    got = pool.grade(responses, refs)
    assert len(pool._procs) == 2                   # really spread over two worker processes
    assert got == one.grade(responses, refs)
  finally:
    pool.close()
    one.close()
  assert got == [1.0 if (r, a) in FORMS else 0.0 for r, a in pairs]
  with pytest.raises(ValueError, match="references"):
    GradePool(0).grade(["a"], [])
