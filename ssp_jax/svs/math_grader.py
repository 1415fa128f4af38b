"""Answer checking for math RLVR (SvS): one final answer, a cascade of checks.

  grade(response, "\\frac{1}{2}")  # 1.0 iff the response's final answer equals 1/2

1. **Extraction** (`answer_extract.py`): the last `\\boxed{}` after the last `</think>`; without a
   box, the last `<answer>` tag or "the answer is ..."/"Answer: ..." line (the original's
   non-boxed fallbacks). One candidate per response: a response cannot hedge with a boxed
   answer and a different "Answer:" line.
2. **Guards** (`answer_guard.py`, `hedge.py`): an answer longer than 1,000 characters or nested
   deeper than 16 brackets scores 0; so does a hedge (several values against a one-value
   reference: `5, 6`, "5 or 6", `\\{5, 6\\}`, `\\pm 2`) and a false equation chain (`2 + 2 = 5`;
   an `x =` label is fine). Answers whose value cannot be computed in time (towers of powers,
   `10^{100000}`, `100000!`, `1e999999999`) score 0 unless they equal the reference as text.
3. **String equality** after `normalize` (`answer_normalize.py`: MATH-style clean-up).
4. **Numbers** (integers, decimals, `a/b`, `\\frac{a}{b}`, mixed numbers) are compared as exact
   fractions, and this check is final when both sides are numbers: `1000001` is never
   `1000000`. The one tolerance: a decimal against a non-terminating value (`0.333333` for
   `\\frac13`) is equal when both round to the same 6 decimal places (math_verify's rule).
5. **sympy** on a safe LaTeX subset (numbers, + - * / ^, `\\frac`, `\\sqrt`, `\\pi`, `\\cdot`,
   one-letter variables): equal when the difference simplifies to 0, or (a decimal against an
   irrational) by the 6-decimal rule. Anything outside the subset is not handed to sympy's
   parser, which evaluates Python.
6. **math_verify** (the `math-verify` package, the original's third verifier;
   `math_verify_stage.py`) on the whole `\\boxed{answer}`: sets and lists in any order,
   intervals and `x \\in [a,b)`, `\\pm`, matrices, tuples mixing fractions and decimals, units
   after a radical, `\\sqrt[3]{}`; integers are compared exactly here too. A response with no
   candidate at all (no box, no marker) is handed to math_verify whole (its last 300
   characters), as the original does.

Stages 1-4 are cheap and run in the caller's process (`slow=False` stops before stage 5); the
symbolic stages 5-6 run in a grading worker process under a hard per-answer deadline
(`grade_pool.py`: over the budget the worker is killed and the answer scores 0). Results are
binary and `grade` never raises (any error or timeout scores 0).
"""
from __future__ import annotations

import collections
import re
from typing import Optional

from ssp_jax.svs import hedge, math_verify_stage
from ssp_jax.svs.answer_extract import (THINK_CLOSE, braced, extract_answer, final_segment,
                                        last_boxed)
from ssp_jax.svs.answer_guard import MAX_ANSWER_CHARS, depth_exceeds, refusal
from ssp_jax.svs.answer_normalize import (DECIMALS, is_decimal, normalize, numbers_equal,
                                          round_equal, to_fraction, to_number)

__all__ = ["THINK_CLOSE", "extract_answer", "final_segment", "last_boxed", "normalize",
           "is_equiv", "grade", "to_fraction", "to_number", "braced", "DECIMALS", "run_job",
           "equiv_verdict"]
_SYMPY_MAX_CHARS = 120
Notes = Optional[collections.Counter]   # reasons counted by the caller ("refused", "hedge")


def _note(notes: Notes, reason: str) -> None:
  if notes is not None:
    notes[reason] += 1


# ------------------------------------------------------------------------------------------
# sympy on a safe subset (stage 5)
# ------------------------------------------------------------------------------------------
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


# ------------------------------------------------------------------------------------------
# The cascade
# ------------------------------------------------------------------------------------------
def _pair(prediction: str, reference: str, use_math_verify: bool, slow: bool,
          notes: Notes) -> Optional[bool]:
  """Stages 3-6 for one candidate against one reference; None when `slow` is False and only a
  symbolic stage could decide."""
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
  if refusal(p) or refusal(r):
    _note(notes, "refused")                    # 1e999999999, 2^{2^{100}}: never evaluated
    return False
  if not slow:
    return None
  same = symbolic_equal(p, r)
  if same is not None:
    return same                                # final when both sides parse (safe subset)
  return use_math_verify and math_verify_stage.verify_answer(prediction, reference)


def equiv_verdict(prediction, reference, *, use_math_verify: bool = True, slow: bool = True,
                  notes: Notes = None) -> Optional[bool]:
  """Whether a predicted answer equals the reference (stages 2-6 of the module docstring);
  None only when `slow` is False and a symbolic stage is needed."""
  if not isinstance(prediction, str) or not isinstance(reference, str):
    return False
  prediction, reference = prediction.strip(), reference.strip()
  if not prediction or not reference:
    return False
  if len(reference) > MAX_ANSWER_CHARS or depth_exceeds(reference):
    return prediction == reference             # an odd reference: text equality only
  if len(prediction) > MAX_ANSWER_CHARS or depth_exceeds(prediction):
    _note(notes, "refused")
    return False
  if hedge.several_values(prediction) and not hedge.several_values(reference):
    _note(notes, "hedge")                      # "5, 6", "5 or 6", \{5, 6\} against 5
    return False
  parts = hedge.equation_parts(prediction)
  if len(parts) > 1 and len(hedge.equation_parts(reference)) == 1:
    for claim in parts[:-1]:                   # P1 = P2 = ... = Pn answers Pn
      if not hedge.is_numeric_claim(claim):
        continue                               # a label: x = 5, f(2) = 5
      same = False if hedge.is_elided(claim) else _pair(claim, parts[-1], use_math_verify,
                                                       slow, notes)
      if same is None:
        return None
      if not same:
        _note(notes, "hedge")                  # a false chain: 1 + 2 + ... + 150 = 5
        return False
    prediction = parts[-1]
  return _pair(prediction, reference, use_math_verify, slow, notes)


def grade_verdict(response, reference, fallbacks: bool = True, use_math_verify: bool = True, *,
                  slow: bool = True, notes: Notes = None) -> Optional[float]:
  """The score of one response (stages 1-6), or None when `slow` is False and only a symbolic
  stage could decide."""
  if not isinstance(response, str) or not isinstance(reference, str):
    return 0.0
  answer = extract_answer(response, fallbacks=fallbacks)
  if answer is not None:
    same = equiv_verdict(answer, reference, use_math_verify=use_math_verify, slow=slow,
                         notes=notes)
    return None if same is None else float(same)
  if not (fallbacks and use_math_verify):
    return 0.0
  tail = final_segment(response)[-math_verify_stage.MAX_TAIL_CHARS:]
  if refusal(tail):
    _note(notes, "refused")
    return 0.0
  return float(math_verify_stage.verify_tail(tail, reference.strip())) if slow else None


def run_job(job: tuple, *, slow: bool, notes: Notes = None) -> Optional[float]:
  """One grading job: ("grade", response, reference, fallbacks, use_math_verify) or ("equiv",
  prediction, reference, use_math_verify). `slow=False` is the cheap part, run by grade_pool.py
  in the caller's process; `slow=True` everything, run in a worker. Never raises."""
  try:
    kind, *args = job
    if kind == "grade":
      return grade_verdict(*args, slow=slow, notes=notes)
    if kind == "equiv":
      same = equiv_verdict(args[0], args[1], use_math_verify=bool(args[2]), slow=slow,
                           notes=notes)
      return None if same is None else float(same)
  except Exception:  # noqa: BLE001 (a grader error scores 0, as the original's)
    pass
  return 0.0


def is_equiv(prediction: Optional[str], reference: str, *, use_math_verify: bool = True) -> bool:
  """Whether a predicted answer equals the reference, under the default pool's budget."""
  from ssp_jax.svs.grade_pool import default_pool
  return default_pool().run([("equiv", prediction, reference, bool(use_math_verify))])[0] == 1.0


def grade(response: str, reference: str, *, fallbacks: bool = True,
          use_math_verify: bool = True) -> float:
  """1.0 if the response's final answer equals `reference`, else 0.0; never raises. Symbolic
  stages run in the default pool's worker (grade_pool.default_pool) under its budget.

  `fallbacks=False, use_math_verify=False` is ssp-jax's earlier, narrower checker (last box
  only, no math_verify stage)."""
  from ssp_jax.svs.grade_pool import default_pool
  return default_pool().run([("grade", response, reference, bool(fallbacks),
                              bool(use_math_verify))])[0]
