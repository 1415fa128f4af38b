"""Hedges and equation chains in a final answer (SvS grading): a hedge is never correct.

  several_values("1000, 1001, ..., 1079, 5")   # True: a list, not one value
  several_values("1,000")                     # False: a thousands separator
  equation_parts("1 + 2 + 3 = 6")             # ["1 + 2 + 3", "6"]

A **hedge** is an answer that names several candidate values where the reference is one value:
a list (`5, 6`; commas or semicolons that are not thousands separators, at any bracket level,
so a set `\\{5, 6\\}` and an interval `[4, 6]` count), "or"/"and" (also `\\lor`, `\\vee`,
`\\land`, `\\wedge`), `\\pm`/`\\mp` or a union `\\cup`. Against a reference that itself has
several values (a tuple, a set, an interval) the answer is compared as a whole instead
(math_verify compares sets and tuples).

An **equation chain** `P1 = P2 = ... = Pn` (top-level `=`; the reference has none) answers Pn,
and every Pi that is a numeric claim (digits and no variable: `2 + 3`, `\\frac{1}{2}`, `3\\pi`)
must be shown equal to Pn, or the answer scores 0: `1 + 2 + ... + 150 = 5` and `6 = 5` are
false, and a claim elided with `\\ldots`/`\\cdots`/`...` cannot be shown. A part with a variable
(`x`, `f(2)`, `a + b`) is a label and is not checked, so `x = 5` answers 5.
"""
from __future__ import annotations

import re

_TEXT_RE = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_THOUSANDS_RE = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?![\d,])")
_WORDS_RE = re.compile(r"(?<![a-zA-Z\\])(?:or|and)(?![a-zA-Z])|\\(?:pm|mp|cup|lor|vee|land|wedge)"
                       r"(?![a-zA-Z])", re.IGNORECASE)
_SPACES_RE = re.compile(r"\\[,;:! ]|\\q?quad|~|\s")
_EQ_RE = re.compile(r"(?<![<>!:=\\])=(?!=)")
_ELISION_RE = re.compile(r"\.\.\.|\\[lcv]?dots[bcimo]?(?![a-zA-Z])|…")
_NUMERIC_COMMANDS = ("\\frac", "\\dfrac", "\\tfrac", "\\sqrt", "\\cdot", "\\times", "\\div",
                     "\\pi", "\\left", "\\right")
_COMMAND_RE = re.compile(r"\\[a-zA-Z]+")


def _unwrap(text: str) -> str:
  """Text wrappers dropped (`5 \\text{ or } 6` -> `5  or  6`), one level as normalize does."""
  return _TEXT_RE.sub(r" \1 ", text)


def several_values(text: str) -> bool:
  """Whether an answer names several values (see the module docstring); linear in its length."""
  s = _unwrap(text)
  if _WORDS_RE.search(s):
    return True
  s = _SPACES_RE.sub("", s).replace("{,}", "")
  s = _THOUSANDS_RE.sub(lambda m: m.group().replace(",", ""), s)
  return "," in s or ";" in s


def equation_parts(text: str) -> list[str]:
  """`text` split at its top-level `=` signs (not `<=`, `\\neq`, `==`, nor inside brackets);
  `[text]` when it has none."""
  parts, depth, start = [], 0, 0
  for m in re.finditer(r"[{(\[]|[})\]]|" + _EQ_RE.pattern, text):
    c = m.group()
    if c in "{([":
      depth += 1
    elif c in "})]":
      depth = max(depth - 1, 0)
    elif depth == 0:
      parts.append(text[start:m.start()].strip())
      start = m.end()
  parts.append(text[start:].strip())
  return parts


def is_numeric_claim(part: str) -> bool:
  """Digits and no variable (commands such as `\\frac`, `\\sqrt`, `\\pi` are not variables)."""
  s = _ELISION_RE.sub(" ", _unwrap(part))     # before `\cdot`, a prefix of `\cdots`
  for cmd in _NUMERIC_COMMANDS:
    s = s.replace(cmd, " ")
  return bool(re.search(r"\d", s)) and not re.search(r"[a-zA-Z]", _COMMAND_RE.sub("x", s))


def is_elided(part: str) -> bool:
  """`1 + 2 + \\cdots + 150`: a claim whose value cannot be computed."""
  return bool(_ELISION_RE.search(part))
