"""Refuses answers whose checking could not finish in time, in one linear pass (SvS grading).

  refusal("10^{99\\cdot 99\\cdot 99\\cdot 99}")   # "huge_power": the value has ~10^8 digits
  refusal("\\frac{1}{2}")                         # None: safe to hand to sympy and math_verify

A refused answer scores 0 (math_grader.py), before any stage evaluates it: a big-integer power
or factorial runs inside C code where neither math_verify's SIGALRM timeouts nor anything short
of killing the process can stop it. What is refused:
  * `too_long`: more than MAX_ANSWER_CHARS characters (a 100,000-digit "answer");
  * `too_deep`: brackets (`{ ( [`) nested deeper than MAX_DEPTH (50,000 nested braces);
  * `tower`: a power in an exponent (`2^{2^{100}}`, `10^{{10}^{10}}`) or a power of a power
    written flat (`10^{10}^{10}`);
  * `huge_power`: an exponent that may exceed 10^MAX_EXPONENT_LOG10 (`10^{100000}`,
    `10^{99\\cdot 99\\cdot 99\\cdot 99}`), also through powers of powers (`((10^{99})^{99})^{99}`);
    the bound adds up log10 of every number in the exponent, so it over-estimates sums;
  * `big_factorial` (`100000!`, `(10^{10})!`), `big_e_notation` (`1e999999999`) and
    `python_power` (`**`).
Every check is a single scan (each character is read a bounded number of times), so a guard is
never the slow part. Anything slow that gets past these (a huge `\\binom{}{}`, say) is stopped by
the per-answer deadline of grade_pool.py instead.
"""
from __future__ import annotations

import math
import re
from typing import Optional

MAX_ANSWER_CHARS = 1000          # an extracted final answer longer than this is not an answer
MAX_DEPTH = 16                   # bracket nesting; MATH answers stay under ~6
MAX_EXPONENT_LOG10 = 5.0         # exponents up to ~10^5: 2^{99999} has 30,103 digits
_OPEN, _CLOSE = "{([", "})]"
_E_NOTATION_RE = re.compile(r"\d\s*[eE]\s*[-+]?\d{3}")
_DIGITS_RE = re.compile(r"\d+")


def depth_exceeds(text: str, limit: int = MAX_DEPTH) -> bool:
  """Whether brackets of any kind nest deeper than `limit` (unbalanced closers are ignored)."""
  depth = 0
  for c in text:
    if c in _OPEN:
      depth += 1
      if depth > limit:
        return True
    elif c in _CLOSE and depth:
      depth -= 1
  return False


def _log10_bound(exponent: str) -> float:
  """An upper bound of log10|value| of a numeric exponent: the sum of log10(n + 1) over its
  numbers (products add, so `99\\cdot 99` is 4; sums are over-estimated, which only refuses
  more). Letters count as 0: `2^{n+1}` is a symbolic power, cheap for sympy."""
  total = 0.0
  for m in _DIGITS_RE.finditer(exponent):
    run = m.group()
    total += len(run) if len(run) > 6 else math.log10(int(run) + 1)
  return total


def _exponent(text: str, i: int) -> tuple[str, int]:
  """(exponent text, index after it) of the `^` at text[i - 1]: a `{...}`/`(...)` group, a
  signed digit run, a command name or one character."""
  n = len(text)
  while i < n and text[i].isspace():
    i += 1
  if i >= n:
    return "", i
  if text[i] in "{(":
    depth = 0
    for j in range(i, n):                    # exponents cannot nest (a tower is refused), so
      if text[j] in _OPEN:                   # each character is scanned here at most once
        depth += 1
      elif text[j] in _CLOSE:
        depth -= 1
        if depth == 0:
          return text[i + 1:j], j + 1
    return text[i + 1:], n
  start = i
  if text[i] in "+-":
    i += 1
    while i < n and text[i].isspace():
      i += 1
  j = i + 1
  if i < n and text[i].isdigit():
    while j < n and text[j].isdigit():
      j += 1
  elif i < n and text[i] == "\\":
    while j < n and text[j].isalpha():
      j += 1
  return text[start:j], min(j, n)


def _power_refusal(text: str) -> Optional[str]:
  """`tower` / `huge_power` / None, scanning once with a stack of the largest exponent bound
  inside each open bracket (the bound of a power of a bracket adds its inner bound)."""
  stack = [0.0]                   # largest exponent bound inside each open bracket
  closed = -1.0                   # bound inside the bracket that closed just before, or -1
  i, n = 0, len(text)
  while i < n:
    c = text[i]
    if c in _OPEN:
      stack.append(0.0)
      closed = -1.0
    elif c in _CLOSE:
      inner = stack.pop() if len(stack) > 1 else 0.0
      stack[-1] = max(stack[-1], inner)
      closed = inner
    elif c == "^":
      exponent, i = _exponent(text, i + 1)
      if "^" in exponent or "**" in exponent:
        return "tower"                         # 2^{2^{100}}, 10^{{10}^{10}}
      bound = _log10_bound(exponent) + max(closed, 0.0)
      if bound > MAX_EXPONENT_LOG10:
        return "huge_power"
      stack[-1] = max(stack[-1], bound)
      if text[i:i + 64].lstrip().startswith("^"):
        return "tower"                         # 10^{10}^{10}: a second `^` right after
      closed = -1.0
      continue                                 # the exponent holds no power: skip it
    elif not c.isspace():
      closed = -1.0
    i += 1
  return None


def _factorial_refusal(text: str) -> Optional[str]:
  at = text.find("!")
  while at >= 0:
    before = text[max(0, at - 64):at].rstrip()   # a bounded look back: linear overall
    if before.endswith(tuple(_CLOSE)):
      return "big_factorial"                   # (10^{10})!: the argument's size is unknown
    digits = len(before) - len(before.rstrip("0123456789"))
    if digits >= 5:
      return "big_factorial"
    at = text.find("!", at + 1)
  return None


def refusal(text: str) -> Optional[str]:
  """Why `text` (an extracted answer or a reference) must not be evaluated, or None."""
  if len(text) > MAX_ANSWER_CHARS:
    return "too_long"
  if depth_exceeds(text):
    return "too_deep"
  if "**" in text:
    return "python_power"
  if _E_NOTATION_RE.search(text):
    return "big_e_notation"
  return _power_refusal(text) or _factorial_refusal(text)
