"""The math answer checker: extraction, normalisation and the equal / not-equal cascade."""
import pytest

from ssp_jax.svs import math_grader as M

EQUAL = [
    # plain numbers and formatting
    ("42", "42"), (" 42 ", "42"), ("42.", "42"), ("42.0", "42"), ("0.50", "0.5"), (".5", "0.5"),
    ("-3", "-3"), ("1,000", "1000"), ("1{,}000", "1000"), ("12,345,678", "12345678"),
    ("0.33333333", "\\frac{1}{3}"), ("3.14159", "3.141592"),   # within 1e-6 relative
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
    ("3", "4"), ("-3", "3"), ("0.5", "0.51"), ("3.1415", "3.141592"), ("0.333", "\\frac{1}{3}"), ("\\frac{1}{2}", "\\frac{1}{3}"),
    ("1/2", "2"), ("2\\frac{1}{2}", "1"), ("1,000", "1"), ("(1,2)", "(2,1)"), ("\\sqrt{2}", "1.4142"),
    ("x+1", "x+2"), ("25\\pi", "25"), ("A", "B"), ("", "0"), ("5", ""), ("12 apples", "12"),
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
    ("The answer is 4.", "4", 0.0),                                # no box: wrong
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
