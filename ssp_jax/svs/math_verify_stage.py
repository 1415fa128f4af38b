"""The `math-verify` stage of the SvS answer cascade (the original's third verifier).

  verify_text("... \\boxed{[2, 3)}", "x \\in [2,3)")   # True: math_verify parses both sides

The reference is parsed as `\\boxed{reference}` with math_verify's LaTeX extraction, the
prediction with its expression and LaTeX extraction (the original's configuration), and
`math_verify.verify` compares them (sets in any order, intervals, `\\pm`, matrices, tuples of
fractions and decimals, units, `\\sqrt[3]{}`; numbers to 6 decimal places unless both are
integers, which must be equal). Reference parses are cached. math_verify's own timeouts use
SIGALRM, which only the main thread may set: there they are `TIMEOUT_S` seconds per parse and per
comparison; in another thread the stage runs without them, on inputs capped at
`MAX_PREDICTION_CHARS`. Forms whose evaluation no timeout could interrupt (`1e999999999`,
`10^{100000}`, towers of powers, factorials of huge numbers) are refused first. Any error or timeout (a `BaseException` in math_verify) counts as "not
equal"; the stage never raises.
"""
from __future__ import annotations

import functools
import re
import threading
from typing import Any, Optional

TIMEOUT_S = 2                       # seconds per parse and per comparison (main thread only)
MAX_PREDICTION_CHARS = 300          # the original hands math_verify the last 300 characters
MAX_REFERENCE_CHARS = 1000


# Inputs whose evaluation can run for minutes inside C code (big-integer powers, factorials),
# where no timeout can interrupt it: refused before math_verify sees them.
_COSTLY_RE = re.compile(r"\d\s*[eE]\s*[-+]?\d{3,}"        # 1e999999999
                        r"|\^\s*\{?\s*[-+]?\d{5,}"          # 10^{100000}
                        r"|\^\s*\{[^{}]*\^"                   # 2^{2^{100}}: a power in an exponent
                        r"|\^\s*\(?[^(){}]*\^"
                        r"|(?:\}|\d{5,}|\))\s*!"               # 10^{10}!, 100000!
                        r"|\*\*")                              # Python powers in plain text


def too_costly(text: str) -> bool:
  """Whether `text` holds a form whose evaluation could not be interrupted (see _COSTLY_RE)."""
  return bool(_COSTLY_RE.search(text))


def _timeout() -> Optional[int]:
  return TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


@functools.lru_cache(maxsize=None)
def _configs():
  from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig
  return (LatexExtractionConfig(),), (ExprExtractionConfig(), LatexExtractionConfig())


@functools.lru_cache(maxsize=4096)
def _parse_reference(reference: str, timeout: Optional[int]) -> tuple:
  from math_verify import parse
  return tuple(parse("\\boxed{" + reference + "}", extraction_config=_configs()[0],
                     parsing_timeout=timeout))


def _integer_mismatch(gold: tuple, pred: list) -> bool:
  """True when both sides parsed to plain integers that differ (exact equality for integers,
  checked here as well so no tolerance of math_verify can ever accept a near-miss integer)."""
  import sympy
  g = next((x for x in gold if isinstance(x, sympy.Basic)), None)
  p = next((x for x in pred if isinstance(x, sympy.Basic)), None)
  if isinstance(g, sympy.Integer) and isinstance(p, sympy.Number):
    return bool(p != g)               # Float(5.0) == Integer(5); Float(1000000.4) != 1000000
  return False


def verify_text(prediction: str, reference: str) -> bool:
  """Whether math_verify finds `prediction` (a response tail or `\\boxed{answer}`) equal to
  `reference`; False on any error, timeout or oversized input."""
  try:
    from math_verify import parse, verify
  except ImportError:                # declared in setup.py; a broken install grades strictly
    return False
  if not prediction or not reference or len(reference) > MAX_REFERENCE_CHARS:
    return False
  prediction = prediction[-MAX_PREDICTION_CHARS:]
  if too_costly(prediction) or too_costly(reference):
    return False
  timeout = _timeout()
  try:
    gold = _parse_reference(reference, timeout)
    if not gold:
      return False
    pred: list[Any] = parse(prediction, extraction_config=_configs()[1], parsing_timeout=timeout)
    if not pred or _integer_mismatch(gold, pred):
      return False
    return bool(verify(list(gold), pred, timeout_seconds=timeout))
  except BaseException as e:  # noqa: BLE001 (math_verify's TimeoutException is a BaseException)
    if isinstance(e, (KeyboardInterrupt, SystemExit)):
      raise
    return False
