"""Answer checking for math RLVR (SvS; anchors.md 2.3): the last `\\boxed{}`, normalised, compared.

  grade(response, "\\frac{1}{2}")  # 1.0 iff the response's last \\boxed{...} equals 1/2

The response's final part (the text after the last `</think>`, the whole text without one) is
searched for its last `\\boxed{...}` (nested braces; also `\\fbox{}` and `\\boxed 5`). The
prediction and the reference then go through a cascade where the first success wins:

  1. string equality after `normalize` (MATH-style clean-up: `\\left`/`\\right`, spacing commands,
     `dfrac`/`tfrac`, degrees, percent, dollars, `\\text{}` wrappers, simple unit words after a
     number, an `x =` prefix, thousands separators, a trailing period, spaces);
  2. numeric equality of integers, decimals, `a/b` and `\\frac{a}{b}` (relative tolerance 1e-6);
  3. symbolic equality with sympy of a small LaTeX subset (numbers, + - * / ^, `\\frac`,
     `\\sqrt`, `\\pi`, `\\cdot`, one-letter variables). Anything outside that subset is not
     handed to sympy, whose parser evaluates Python.

Results are binary and `grade` never raises (any error scores 0). The original cascade (prime_math
`grade_answer`, the lighteval checker, math_verify, the DAPO verifier) is broader; this one covers
the answer forms of MATH-style data: numbers, fractions, radicals, simple expressions, tuples and
short text answers (string equality).
"""
from __future__ import annotations

import math
import re
from typing import Optional

THINK_CLOSE = "</think>"
REL_TOL = 1e-6
_BOX_COMMANDS = ("\\boxed", "\\fbox")
_SYMPY_MAX_CHARS = 120

# Unit words dropped after a plain number ("90 degrees" -> "90"); never after an expression.
_UNITS = ("degrees", "degree", "units", "unit", "square units", "sq units", "cm", "centimeters",
          "mm", "meters", "metres", "km", "kilometers", "inches", "inch", "feet", "foot", "ft",
          "yards", "miles", "mph", "dollars", "dollar", "cents", "hours", "hour", "minutes",
          "seconds", "days", "weeks", "years", "kg", "grams", "pounds", "liters", "people",
          "students", "ways")
_UNITS_RE = re.compile(r"^(?P<num>[-+]?[\d.,]+|[-+]?\\frac\{\d+\}\{\d+\})\s*(?:\\,)?\s*(?:"
                       + "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
                       + r")(?:\^\{?[23]\}?)?$")
_TEXT_WRAP_RE = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_PREFIX_RE = re.compile(r"^(?:[a-zA-Z]|\\[a-zA-Z]+)(?:_\{?\w+\}?)?\s*=\s*(?P<rhs>[^=]+)$")
_THOUSANDS_RE = re.compile(r"^[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_NUMBER_RE = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")
_FRAC_RE = re.compile(r"^(?P<sign>[-+]?)\\frac\{(?P<a>[-+]?[\d.]+)\}\{(?P<b>[-+]?[\d.]+)\}$")
_SLASH_RE = re.compile(r"^(?P<a>[-+]?[\d.]+)/(?P<b>[-+]?[\d.]+)$")
_MIXED_RE = re.compile(r"^(?P<sign>-?)(?P<w>\d+)\\frac\{(?P<a>\d+)\}\{(?P<b>\d+)\}$")  # 2\frac{1}{2}


# ------------------------------------------------------------------------------------------
# Extraction
# ------------------------------------------------------------------------------------------
def final_segment(text: str) -> str:
  """The text after the last `</think>` (all of it when there is none)."""
  i = text.rfind(THINK_CLOSE)
  return text[i + len(THINK_CLOSE):] if i >= 0 else text


def _braced(text: str, start: int) -> Optional[tuple[str, int]]:
  """(content, index after the closing brace) of the `{...}` opening at text[start]."""
  if start >= len(text) or text[start] != "{":
    return None
  depth = 0
  for i in range(start, len(text)):
    if text[i] == "{":
      depth += 1
    elif text[i] == "}":
      depth -= 1
      if depth == 0:
        return text[start + 1:i], i + 1
  return None


def last_boxed(text: str) -> Optional[str]:
  """Content of the last `\\boxed{...}` / `\\fbox{...}` (or `\\boxed 5`) in `text`, or None."""
  at, cmd = max((text.rfind(c), c) for c in _BOX_COMMANDS)
  if at < 0:
    return None
  rest = text[at + len(cmd):]
  stripped = rest.lstrip()
  if stripped.startswith("{"):
    got = _braced(stripped, 0)
    return got[0].strip() if got else None
  if rest[:1].isspace() and stripped:          # "\boxed 5": up to the next space or "$"
    return re.split(r"[\s$]", stripped, maxsplit=1)[0]
  return None


def extract_answer(response: str) -> Optional[str]:
  """The final answer of a response: its last boxed expression after `</think>`, or None."""
  return last_boxed(final_segment(response or ""))


# ------------------------------------------------------------------------------------------
# Normalisation
# ------------------------------------------------------------------------------------------
def _fix_fracs(s: str) -> str:
  """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{2}` -> `\\frac{1}{2}`, `\\frac{1}2` -> `\\frac{1}{2}`."""
  s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
  s = re.sub(r"\\frac(\d)\{", r"\\frac{\1}{", s)
  return re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)


def _strip_outer_braces(s: str) -> str:
  while s.startswith("{") and s.endswith("}"):
    got = _braced(s, 0)
    if not got or got[1] != len(s):
      break
    s = got[0]
  return s


def normalize(answer: str) -> str:
  """A canonical string form of an answer (see the module docstring); "" for an empty one."""
  s = str(answer).strip()
  boxed = last_boxed(s)
  if boxed is not None:                        # a reference written as "\boxed{...}"
    s = boxed
  s = s.replace("\n", " ").replace("\\!", "")
  for space in ("\\,", "\\;", "\\:", "\\quad", "\\qquad", "~"):
    s = s.replace(space, " ")
  s = s.replace("\\ ", " ")
  s = re.sub(r"\\(?:left|right)(?![a-zA-Z])", "", s)
  s = s.replace("dfrac", "frac").replace("tfrac", "frac")
  s = re.sub(r"\^\s*\{?\s*\\circ\s*\}?", "", s).replace("\\circ", "").replace("°", "")
  s = s.replace("\\%", "").replace("%", "").replace("\\$", "").replace("$", "")
  s = _TEXT_WRAP_RE.sub(r"\1", s).strip()
  m = _PREFIX_RE.match(s)
  if m:
    s = m.group("rhs").strip()
  m = _UNITS_RE.match(s)
  if m:
    s = m.group("num")
  s = s.strip().rstrip(".").strip()
  s = s.replace("{,}", "").replace(" ", "")
  if _THOUSANDS_RE.match(s):
    s = s.replace(",", "")
  s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)
  s = _fix_fracs(s)
  s = re.sub(r"(?<![\d}])\.(\d)", r"0.\1", s)   # ".5" -> "0.5"
  return _strip_outer_braces(s)


# ------------------------------------------------------------------------------------------
# Comparison
# ------------------------------------------------------------------------------------------
def to_number(s: str) -> Optional[float]:
  """The value of a normalised integer, decimal, `a/b`, `\\frac{a}{b}` or mixed number
  `2\\frac{1}{2}` (= 2.5, a proper fraction after a whole number); None otherwise."""
  try:
    if _NUMBER_RE.match(s):
      x = float(s)
    elif (m := _MIXED_RE.match(s)) and int(m.group("a")) < int(m.group("b")):
      x = int(m.group("w")) + int(m.group("a")) / int(m.group("b"))
      x = -x if m.group("sign") else x
    elif (m := _FRAC_RE.match(s)) or (m := _SLASH_RE.match(s)):
      x = float(m.group("a")) / float(m.group("b"))
      if m.groupdict().get("sign") == "-":
        x = -x
    else:
      return None
  except (ValueError, ZeroDivisionError):
    return None
  return x if math.isfinite(x) else None


def numbers_close(a: float, b: float) -> bool:
  return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-9)


def _replace_command(s: str, cmd: str, nargs: int, fmt: str) -> Optional[str]:
  """Rewrites every `cmd{a}{b}...` (nested braces) as fmt.format(a, b, ...); None if malformed."""
  while (at := s.find(cmd)) >= 0:
    pos, args = at + len(cmd), []
    for _ in range(nargs):
      got = _braced(s, pos)
      if got is None:
        return None
      args.append(got[0])
      pos = got[1]
    s = s[:at] + fmt.format(*args) + s[pos:]
  return s


def to_sympy_text(s: str) -> Optional[str]:
  """A normalised LaTeX answer as sympy-parseable text, or None outside the safe subset."""
  if len(s) > _SYMPY_MAX_CHARS:
    return None
  s = s.replace("\\cdot", "*").replace("\\times", "*").replace("\\pi", " pi ")
  s = _replace_command(s, "\\frac", 2, "(({0})/({1}))")
  s = s and _replace_command(s, "\\sqrt", 1, "sqrt({0})")
  if not s:
    return None
  s = s.replace("{", "(").replace("}", ")").replace("^", "**")
  if not re.fullmatch(r"[0-9a-zA-Z+\-*/().\s]*", s):
    return None                                # backslashes, commas, "_", quotes, brackets...
  words = set(re.findall(r"[a-zA-Z]+", s))
  if any(len(w) > 1 and w not in ("sqrt", "pi") for w in words):
    return None
  if re.search(r"[a-zA-Z]\s*\.|\.\s*[a-zA-Z]", s):
    return None                                # no attribute access
  if re.search(r"\*\*\s*\(?\s*[-+]?\d{3,}", s):
    return None                                # 2**(10**10) would never finish
  return s


def symbolic_equal(a: str, b: str) -> bool:
  """sympy equality of two normalised answers (False when sympy cannot tell)."""
  import sympy
  from sympy.parsing.sympy_parser import (implicit_multiplication_application, parse_expr,
                                          standard_transformations)
  ta, tb = to_sympy_text(a), to_sympy_text(b)
  if not ta or not tb:
    return False
  names = set(re.findall(r"[a-zA-Z]+", ta + " " + tb)) - {"sqrt", "pi"}
  local = {"sqrt": sympy.sqrt, "pi": sympy.pi, **{n: sympy.Symbol(n) for n in names}}
  # only what the parser's own rewrites call (no `from sympy import *` namespace)
  env = {k: getattr(sympy, k) for k in ("Integer", "Float", "Rational", "Symbol", "Function")}
  tr = standard_transformations + (implicit_multiplication_application,)
  try:
    ea = parse_expr(ta, local_dict=local, global_dict=env, transformations=tr)
    eb = parse_expr(tb, local_dict=local, global_dict=env, transformations=tr)
    diff = sympy.simplify(ea - eb)
    if diff == 0:
      return True
    if diff.is_number and eb.is_number:
      return numbers_close(complex(sympy.N(ea)).real, complex(sympy.N(eb)).real) and \
          abs(complex(sympy.N(diff)).imag) < REL_TOL
  except Exception:  # noqa: BLE001 (any parse or simplify failure means "cannot tell")
    return False
  return False


def is_equiv(prediction: Optional[str], reference: str) -> bool:
  """Whether a predicted answer equals the reference (the cascade of the module docstring)."""
  if prediction is None:
    return False
  try:
    p, r = normalize(prediction), normalize(reference)
    if not p or not r:
      return False
    if p == r or (p.isalpha() and p.lower() == r.lower()):
      return True
    x, y = to_number(p), to_number(r)
    if x is not None and y is not None:
      return numbers_close(x, y)
    return symbolic_equal(p, r)
  except Exception:  # noqa: BLE001 (a grader error scores 0, as the original's)
    return False


def grade(response: str, reference: str) -> float:
  """1.0 if the response's final boxed answer equals `reference`, else 0.0; never raises."""
  try:
    return float(is_equiv(extract_answer(response), reference))
  except Exception:  # noqa: BLE001
    return 0.0
