"""EM / F1 / normalisation / answer extraction on hand-computed cases."""
import re
import string

import pytest

from ssp_jax import metrics


def _squad_normalize(s):
  """The SQuAD v1.1 reference (ASCII punctuation only), for the parity check below."""
  s = s.lower()
  s = "".join(ch for ch in s if ch not in set(string.punctuation))
  s = re.sub(r"\b(a|an|the)\b", " ", s)
  return " ".join(s.split())


@pytest.mark.parametrize("text,expected", [
    ("The Eiffel Tower", "eiffel tower"),
    ("  an  Apple a day ", "apple day"),
    ("Theatre", "theatre"),                 # "the" inside a word stays
    ("U.S.A.", "usa"),
    ("Hello, world!!", "hello world"),
    ("1,000", "1000"),
    ("3.14", "314"),
    ("Ender’s Game", "enders game"),        # curly apostrophe is punctuation
    ("«Les Misérables»", "les misérables"),  # guillemets stripped, accents kept
    ("ÉCOLE", "école"),
    ("１９８４", "1984"),                       # full-width digits (NFKC)
    ("ﬁsh", "fish"),                        # ligature (NFKC)
    ("100 €", "100 €"),                     # currency symbol is not punctuation
    ("", ""),
])
def test_normalize_answer(text, expected):
  assert metrics.normalize_answer(text) == expected


@pytest.mark.parametrize("text", [
    "The Eiffel Tower!", "A.B.C. (an example)", "  the   a an  ", "x-ray_scan", "It's 1,000$",
])
def test_normalize_matches_squad_on_ascii(text):
  assert metrics.normalize_answer(text) == _squad_normalize(text)


@pytest.mark.parametrize("pred,golden,expected", [
    ("the Eiffel Tower", "Eiffel Tower", 1.0),
    ("Eiffel Tower.", ["Louvre", "eiffel tower"], 1.0),
    ("Eiffel", ["Eiffel Tower"], 0.0),
    ("1,000", "1000", 1.0),
    ("1000", "one thousand", 0.0),
    ("Zürich", "Zurich", 0.0),
    ("Ender’s Game", "Ender's Game", 1.0),
    ("", "Paris", 0.0),
    (None, "Paris", 0.0),
])
def test_exact_match(pred, golden, expected):
  assert metrics.exact_match(pred, golden) == expected


@pytest.mark.parametrize("pred,golden,expected", [
    # pred {barack, obama} vs gold {barack, hussein, obama}: P=1, R=2/3 -> F1=0.8
    ("Barack Obama", "Barack Hussein Obama", 0.8),
    # best of golden answers: "obama" vs "obama" -> 1.0
    ("Obama", ["Barack Hussein Obama", "Obama"], 1.0),
    # "the" dropped on both sides: pred {river, thames}, gold {thames}: P=1/2, R=1 -> 2/3
    ("the river Thames", "The Thames", 2 / 3),
    # repeated tokens count once each side: {paris, paris} vs {paris}: common 1, P=1/2, R=1
    ("Paris Paris", "Paris", 2 / 3),
    ("1,000 people", "1000", 2 / 3),
    ("yes indeed", "yes", 0.0),            # yes/no: no partial credit
    ("yes", ["no", "yes"], 1.0),
    ("", "Paris", 0.0),
    (None, ["Paris"], 0.0),
    ("London", "Paris", 0.0),
])
def test_f1(pred, golden, expected):
  assert metrics.f1(pred, golden) == pytest.approx(expected)


def test_empty_golden_list_is_an_error():
  with pytest.raises(ValueError, match="golden_answers"):
    metrics.exact_match("x", [])
  with pytest.raises(ValueError, match="golden_answers"):
    metrics.f1("x", [])


@pytest.mark.parametrize("text,expected", [
    ("<think>hmm</think><answer> Paris </answer>", "Paris"),
    ("<answer>a</answer> then <answer>\nb\n</answer>", "b"),
    ("no answer here", None),
    ("<answer>unterminated", None),
    ("<answer></answer>", ""),
    ("", None),
])
def test_extract_answer(text, expected):
  assert metrics.extract_answer(text) == expected
