"""Answer checking for math RLVR (SvS; anchors.md 2.3): one final answer, a cascade of checks.

  grade(response, "\\frac{1}{2}")  # 1.0 iff the response's final answer equals 1/2

1. **Extraction** (`answer_extract.py`): the last `\\boxed{}` after the last `</think>`; without a
   box, the last `<answer>` tag or "the answer is ..."/"Answer: ..." line (the original's
   non-boxed fallbacks). One candidate per response: a response cannot hedge with a boxed
   answer and a different "Answer:" line.
2. **String equality** after `normalize` (MATH-style clean-up: `\\left`/`\\right`, spacing
   commands, `dfrac`/`tfrac`, degrees, percent, dollars, `\\text{}`/`\\textbf{}` wrappers, a
   unit word after a number, an `x =` prefix, thousands separators, a trailing period, spaces,
   a parenthesised choice number `(55)`).
3. **Numbers** (integers, decimals, `a/b`, `\\frac{a}{b}`, mixed numbers) are compared as exact
   fractions, and this check is final when both sides are numbers: `1000001` is never
   `1000000`. The one tolerance: a decimal against a non-terminating value (`0.333333` for
   `\\frac13`) is equal when both round to the same 6 decimal places (math_verify's rule).
4. **sympy** on a safe LaTeX subset (numbers, + - * / ^, `\\frac`, `\\sqrt`, `\\pi`, `\\cdot`,
   one-letter variables): equal when the difference simplifies to 0, or (a decimal against an
   irrational) by the 6-decimal rule. Anything outside the subset is not handed to sympy's
   parser, which evaluates Python.
5. **math_verify** (the `math-verify` package, the original's third verifier;
   `math_verify_stage.py`): sets and lists in any order, intervals and `x \\in [a,b)`, `\\pm`,
   matrices, tuples mixing fractions and decimals, units after a radical, `\\sqrt[3]{}`; integers
   are compared exactly here too. A response with no candidate at all (no box, no marker) is
   handed to math_verify whole (its last 300 characters), as the original does.

Results are binary and `grade` never raises (any error or timeout scores 0).
"""
from __future__ import annotations

import functools
import re
from fractions import Fraction
from typing import Optional

from ssp_jax.svs import math_verify_stage
from ssp_jax.svs.answer_extract import (THINK_CLOSE, braced, extract_answer, final_segment,
                                        last_boxed)

__all__ = ["THINK_CLOSE", "extract_answer", "final_segment", "last_boxed", "normalize",
           "is_equiv", "grade", "to_fraction"]
DECIMALS = 6                  # a decimal stands for a non-terminating value to 6 places
_SYMPY_MAX_CHARS = 120

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


def _replace_command(s: str, cmd: str, nargs: int, fmt: str) -> Optional[str]:
  """Rewrites every `cmd{a}{b}...` (nested braces) as fmt.format(a, b, ...); None if malformed."""
  while (at := s.find(cmd)) >= 0:
    pos, args = at + len(cmd), []
    for _ in range(nargs):
      got = braced(s, pos)
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


_PROBE_POINTS = ((0.5772156649, 1.3247179572, 2.7182818285),   # symbol values for a quick
                 (1.6180339887, 0.3678794412, 1.4142135624))   # "certainly different" test


def _differs(diff, symbols) -> bool:
  """True when `diff` is numerically non-zero somewhere (at a probe point, or as a constant)."""
  import sympy
  names = sorted(symbols, key=str)
  for point in (_PROBE_POINTS if names else ((),)):
    value = complex(sympy.N(diff.subs(dict(zip(names, point * 2))), 30))
    if abs(value) > 1e-9:
      return True
  return False


def symbolic_equal(a: str, b: str) -> Optional[bool]:
  """sympy equality of two normalised answers of the safe subset: True or False when both parse
  (final), None when either does not (outside the subset, or a parse or evaluation failure).

  A difference that is clearly non-zero (a constant, or at a probe point) is "not equal" at
  once; otherwise it must simplify to 0, except a decimal against an irrational (6 places)."""
  import sympy
  from sympy.parsing.sympy_parser import (implicit_multiplication_application, parse_expr,
                                          standard_transformations)
  ta, tb = to_sympy_text(a), to_sympy_text(b)
  if not ta or not tb:
    return None
  names = set(re.findall(r"[a-zA-Z]+", ta + " " + tb)) - {"sqrt", "pi"}
  local = {"sqrt": sympy.sqrt, "pi": sympy.pi, **{n: sympy.Symbol(n) for n in names}}
  # only what the parser's own rewrites call (no `from sympy import *` namespace)
  env = {k: getattr(sympy, k) for k in ("Integer", "Float", "Rational", "Symbol", "Function")}
  tr = standard_transformations + (implicit_multiplication_application,)
  try:
    ea = parse_expr(ta, local_dict=local, global_dict=env, transformations=tr)
    eb = parse_expr(tb, local_dict=local, global_dict=env, transformations=tr)
    diff = ea - eb
    decimal = is_decimal(a) or is_decimal(b)
    if decimal and diff.is_number and ea.is_real and eb.is_real:
      # the one tolerance: a decimal written for an irrational or non-terminating value
      return round_equal(float(sympy.N(ea, 30)), float(sympy.N(eb, 30)))
    if _differs(diff, diff.free_symbols):
      return False
    return bool(sympy.simplify(diff) == 0)
  except Exception:  # noqa: BLE001 (any parse or simplify failure means "cannot tell")
    return None


def is_equiv(prediction: Optional[str], reference: str, *, use_math_verify: bool = True) -> bool:
  """Whether a predicted answer equals the reference (stages 2-5 of the module docstring).
  Results are cached per (prediction, reference): a group's solutions often repeat an answer."""
  if prediction is None or not isinstance(prediction, str) or not isinstance(reference, str):
    return False
  return _is_equiv(prediction, reference, bool(use_math_verify))


@functools.lru_cache(maxsize=1 << 16)
def _is_equiv(prediction: str, reference: str, use_math_verify: bool) -> bool:
  try:
    p, r = normalize(prediction), normalize(reference)
    if not p or not r:
      return False
    if p == r or (p.isalpha() and p.lower() == r.lower()):
      return True
    if normalize(prediction, unit_power=True) == r:   # "864 \\mbox{ inches}^2" for "864^2"
      return True
    x, y = to_fraction(p), to_fraction(r)
    if x is not None and y is not None:
      return numbers_equal(p, x, r, y)           # final for two plain numbers
    if math_verify_stage.too_costly(p) or math_verify_stage.too_costly(r):
      return False                               # 1e999999999, 2^{2^{100}}: never evaluated
    same = symbolic_equal(p, r)
    if same is not None:
      return same                                # final when both sides parse (safe subset)
    return use_math_verify and math_verify_stage.verify_text(
        "\\boxed{" + str(prediction).strip() + "}", str(reference).strip())
  except Exception:  # noqa: BLE001 (a grader error scores 0, as the original's)
    return False


def grade(response: str, reference: str, *, fallbacks: bool = True,
          use_math_verify: bool = True) -> float:
  """1.0 if the response's final answer equals `reference`, else 0.0; never raises.

  `fallbacks=False, use_math_verify=False` is ssp-jax's earlier, narrower checker (last box
  only, no math_verify stage)."""
  try:
    answer = extract_answer(response, fallbacks=fallbacks)
    if answer is not None:
      return float(is_equiv(answer, reference, use_math_verify=use_math_verify))
    if not (fallbacks and use_math_verify):
      return 0.0
    tail = final_segment(str(response or ""))
    return float(math_verify_stage.verify_text(tail, str(reference).strip()))
  except Exception:  # noqa: BLE001
    return 0.0
