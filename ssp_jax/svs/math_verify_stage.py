"""The `math-verify` stage of the SvS answer cascade (the original's third verifier).

  verify_answer("[2, 3)", "x \\in [2,3)")            # True: math_verify parses both sides
  verify_tail("... so 3 + 4 = 7", "7")                # a response with no box and no marker

The reference is parsed as `\\boxed{reference}` with math_verify's LaTeX extraction, the
prediction with its expression and LaTeX extraction (the original's configuration), and
`math_verify.verify` compares them (sets in any order, intervals, `\\pm`, matrices, tuples of
fractions and decimals, units, `\\sqrt[3]{}`; numbers to 6 decimal places unless both are
integers, which must be equal). A final answer is handed over whole, as `\\boxed{answer}`
(never cut: the last 300 characters of a long list end in its last value); only a response
without any candidate is cut to its last MAX_TAIL_CHARS characters, as the original does.
Reference parses are cached.

math_verify's own timeouts use SIGALRM, which only the main thread may set: there (the grading
workers of grade_pool.py run this stage in their main thread) they are `TIMEOUT_S` seconds per
parse and per comparison. They are a first line only: a big-integer power runs inside C code
that no signal interrupts, so forms refused by answer_guard.py never reach math_verify, and the
worker's hard deadline (grade_pool.py) bounds everything else. Any error or timeout (a
`BaseException` in math_verify) counts as "not equal"; the stage never raises.
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Optional

from ssp_jax.svs.answer_guard import refusal

TIMEOUT_S = 2                       # seconds per parse and per comparison (main thread only)
MAX_TAIL_CHARS = 300                # the original hands math_verify the last 300 characters


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


def _verify(prediction: str, reference: str) -> bool:
  try:
    from math_verify import parse, verify
  except ImportError:                # declared in setup.py; a broken install grades strictly
    return False
  if not prediction or not reference or refusal(reference):
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


def verify_answer(answer: str, reference: str) -> bool:
  """Whether math_verify finds the final answer `answer` (handed over whole as
  `\\boxed{answer}`) equal to `reference`; False on any error, timeout or refused input."""
  if refusal(answer):
    return False
  return _verify("\\boxed{" + answer.strip() + "}", reference.strip())


def verify_tail(response: str, reference: str) -> bool:
  """The original's stage 3 for a response with no candidate: math_verify on its last
  MAX_TAIL_CHARS characters."""
  tail = response[-MAX_TAIL_CHARS:]
  return not refusal(tail) and _verify(tail, reference.strip())
