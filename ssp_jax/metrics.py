"""Answer metrics: SQuAD-style normalisation, exact match, token F1, `<answer>` extraction.

Normalisation follows the SQuAD v1.1 script that Search-R1, FlashRAG and SSP use (lowercase,
strip punctuation, drop the articles a/an/the, collapse whitespace). On ASCII text the result is
identical to that script. Unicode handling, decided here and kept on purpose:

- The text is first put in NFKC form, so compatibility characters compare equal to their plain
  forms (full-width "１２" -> "12", the ligature "ﬁ" -> "fi", no-break space -> space).
- Lowercasing uses `str.lower()` (as SQuAD), which covers all scripts ("ÉCOLE" -> "école").
- Punctuation is every character in `string.punctuation` plus every Unicode character whose
  category is P* (curly quotes, dashes, "¿", "«»", CJK full stops). SQuAD only strips ASCII
  punctuation, so "Ender’s Game" (curly apostrophe) would not match "Ender's Game" there; here it
  does. Symbols outside ASCII (currency "€", "°") are kept: they carry meaning.
- Diacritics are kept: "Zürich" does not match "Zurich" (the LLM judge is the lenient metric).

F1 follows FlashRAG/HotpotQA: token-level F1 after normalisation, best over the golden answers,
and a yes/no/noanswer prediction (or golden answer) gets no partial credit unless it is equal.
"""
from __future__ import annotations

import collections
import re
import string
import unicodedata
from typing import Optional, Sequence, Union

Golden = Union[str, Sequence[str]]

_ASCII_PUNCT = frozenset(string.punctuation)
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NO_PARTIAL_CREDIT = ("yes", "no", "noanswer")


def _is_punct(ch: str) -> bool:
  return ch in _ASCII_PUNCT or unicodedata.category(ch).startswith("P")


def normalize_answer(text: str) -> str:
  """SQuAD normalisation with the Unicode rules in the module docstring."""
  text = unicodedata.normalize("NFKC", text).lower()
  text = "".join(ch for ch in text if not _is_punct(ch))
  text = _ARTICLES_RE.sub(" ", text)
  return " ".join(text.split())


def _golden_list(golden_answers: Golden) -> list[str]:
  if isinstance(golden_answers, str):
    return [golden_answers]
  golden = [str(g) for g in golden_answers]
  if not golden:
    raise ValueError("golden_answers is empty; each question needs at least one golden answer "
                     "(check the `golden_answers` field of the data file)")
  return golden


def exact_match(prediction: Optional[str], golden_answers: Golden) -> float:
  """1.0 if the normalised prediction equals any normalised golden answer, else 0.0.

  `prediction=None` (no answer extracted) scores 0.0; `golden_answers` is a str or a list.
  """
  golden = _golden_list(golden_answers)
  if prediction is None:
    return 0.0
  pred = normalize_answer(prediction)
  return float(any(pred == normalize_answer(g) for g in golden))


def _f1_one(pred: str, gold: str) -> float:
  """Token F1 of two normalised strings."""
  if (pred in _NO_PARTIAL_CREDIT or gold in _NO_PARTIAL_CREDIT) and pred != gold:
    return 0.0
  pred_toks, gold_toks = pred.split(), gold.split()
  common = collections.Counter(pred_toks) & collections.Counter(gold_toks)
  num_same = sum(common.values())
  if num_same == 0:
    return 0.0
  precision = num_same / len(pred_toks)
  recall = num_same / len(gold_toks)
  return 2 * precision * recall / (precision + recall)


def f1(prediction: Optional[str], golden_answers: Golden) -> float:
  """Best token-level F1 of the prediction over the golden answers (0.0 for None/empty)."""
  golden = _golden_list(golden_answers)
  if prediction is None:
    return 0.0
  pred = normalize_answer(prediction)
  return max(_f1_one(pred, normalize_answer(g)) for g in golden)


def extract_answer(text: str) -> Optional[str]:
  """The stripped content of the last `<answer>...</answer>` block in `text`, or None."""
  matches = _ANSWER_RE.findall(text or "")
  if not matches:
    return None
  return matches[-1].strip()


def aliases(answer: Golden) -> list[str]:
  """The ground truth as a list of non-empty aliases (a string is one alias)."""
  items = [answer] if isinstance(answer, str) else list(answer)
  out = [str(a) for a in items if str(a).strip()]
  if not out:
    raise ValueError(f"ground truth {answer!r} has no non-empty alias; fix the answer set line")
  return out


def contains_answer(text: str, answer: Golden) -> bool:
  """Whether any normalised alias of `answer` appears in the normalised `text`, on word
  boundaries (an answer leaked into a question)."""
  q = f" {normalize_answer(text)} "
  for alias in aliases(answer):
    a = normalize_answer(alias)
    if a and f" {a} " in q:
      return True
  return False
