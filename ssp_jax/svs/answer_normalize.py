"""Normalisation and exact numbers of SvS answers (stages 2-3 of math_grader.py's cascade).

  normalize("\\left( \\dfrac{1}{2}, 3 \\right)")   # "(\\frac{1}{2},3)"
  to_fraction("2\\frac{1}{2}")                      # Fraction(5, 2)

`normalize` is the MATH-style clean-up (`\\left`/`\\right`, spacing commands, `dfrac`/`tfrac`,
degrees, percent, dollars, `\\text{}` wrappers, a unit word after a number, an `x =` prefix,
thousands separators, a trailing period, spaces, `(55)`); `to_fraction` reads integers, decimals,
`a/b`, `\\frac{a}{b}` and mixed numbers exactly, and `numbers_equal` compares two of them (exact,
except a decimal against a non-terminating value: 6 decimal places, math_verify's rule). Callers
bound the input's length first (answer_guard.py): a few steps here are not linear.
"""
from __future__ import annotations

import re
from fractions import Fraction
from typing import Optional

from ssp_jax.svs.answer_extract import braced, last_boxed

DECIMALS = 6                  # a decimal stands for a non-terminating value to 6 places

# Unit words dropped after a plain number ("90 degrees" -> "90"); never after an expression.
_UNITS = ("degrees", "degree", "units", "unit", "square units", "sq units", "cm", "centimeters",
          "mm", "meters", "metres", "km", "kilometers", "inches", "inch", "feet", "foot", "ft",
          "yards", "miles", "mph", "dollars", "dollar", "cents", "hours", "hour", "minutes",
          "seconds", "days", "weeks", "years", "kg", "grams", "pounds", "liters", "people",
          "students", "ways")
_UNITS_RE = re.compile(r"^(?P<num>[-+]?[\d.,]+|[-+]?\\frac\{\d+\}\{\d+\})\s*(?:\\,)?\s*(?:"
                       + "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
                       + r")(?P<power>\^\{?[23]\}?)?$")
_TEXT_WRAP_RE = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_PREFIX_RE = re.compile(r"^(?:[a-zA-Z]|\\[a-zA-Z]+)(?:_\{?\w+\}?)?\s*=\s*(?P<rhs>[^=]+)$")
_THOUSANDS_RE = re.compile(r"^[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_NUMBER_RE = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")
_FRAC_RE = re.compile(r"^(?P<sign>[-+]?)\\frac\{(?P<a>[-+]?[\d.]+)\}\{(?P<b>[-+]?[\d.]+)\}$")
_SLASH_RE = re.compile(r"^(?P<a>[-+]?[\d.]+)/(?P<b>[-+]?[\d.]+)$")
_EXPONENT_RE = re.compile(r"[eE]([-+]?\d+)$")
_PAREN_NUMBER_RE = re.compile(r"^\((\d+)\)$")
_MIXED_RE = re.compile(r"^(?P<sign>-?)(?P<w>\d+)\\frac\{(?P<a>\d+)\}\{(?P<b>\d+)\}$")  # 2\frac{1}{2}


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
    got = braced(s, 0)
    if not got or got[1] != len(s):
      break
    s = got[0]
  return s


def normalize(answer: str, *, unit_power: bool = False) -> str:
  """A canonical string form of an answer (see the module docstring); "" for an empty one.

  `unit_power=True` keeps the power of a dropped unit ("864 inches^2" -> "864^2" instead of
  "864"): the form in which some MATH references store an area (`is_equiv` compares it as a
  string only)."""
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
    s = m.group("num") + ((m.group("power") or "") if unit_power else "")
  s = s.strip().rstrip(".").strip()
  s = s.replace("{,}", "").replace(" ", "")
  if _THOUSANDS_RE.match(s):
    s = s.replace(",", "")
  s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)
  s = _fix_fracs(s)
  s = re.sub(r"(?<![\d}])\.(\d)", r"0.\1", s)   # ".5" -> "0.5"
  s = _strip_outer_braces(s)
  m = _PAREN_NUMBER_RE.match(s)                  # "(55)" (a choice written as a number)
  return m.group(1) if m else s


# ------------------------------------------------------------------------------------------
# Comparison
# ------------------------------------------------------------------------------------------
def to_fraction(s: str) -> Optional[Fraction]:
  """The exact value of a normalised integer, decimal, `a/b`, `\\frac{a}{b}` or mixed number
  `2\\frac{1}{2}` (= 5/2, a proper fraction after a whole number); None otherwise."""
  try:
    if _NUMBER_RE.match(s):
      if (m := _EXPONENT_RE.search(s)) and abs(int(m.group(1))) > 100:
        return None                                # "1e99999999" would build a huge integer
      return Fraction(s)
    if (m := _MIXED_RE.match(s)) and int(m.group("a")) < int(m.group("b")):
      x = int(m.group("w")) + Fraction(int(m.group("a")), int(m.group("b")))
      return -x if m.group("sign") else x
    if (m := _FRAC_RE.match(s)) or (m := _SLASH_RE.match(s)):
      x = Fraction(m.group("a")) / Fraction(m.group("b"))
      return -x if m.groupdict().get("sign") == "-" else x
  except (ValueError, ZeroDivisionError):
    return None
  return None


def to_number(s: str) -> Optional[float]:
  """`to_fraction` as a float (None when not a plain number)."""
  x = to_fraction(s)
  return None if x is None else float(x)


def is_decimal(s: str) -> bool:
  """A decimal literal with a fractional part ("0.333", "2.50"): a possibly rounded value."""
  return bool(_NUMBER_RE.match(s)) and "." in s and not s.endswith(".")


def _terminates(x: Fraction) -> bool:
  d = x.denominator
  for p in (2, 5):
    while d % p == 0:
      d //= p
  return d == 1


def round_equal(a: float, b: float) -> bool:
  """Equal to DECIMALS decimal places (math_verify's `float_rounding=6`)."""
  return round(a, DECIMALS) == round(b, DECIMALS)


def numbers_equal(p: str, x: Fraction, r: str, y: Fraction) -> bool:
  """Two plain numbers: exact, except a decimal against a non-terminating fraction."""
  if x == y:
    return True
  if (is_decimal(p) and not _terminates(y)) or (is_decimal(r) and not _terminates(x)):
    return round_equal(float(x), float(y))
  return False
