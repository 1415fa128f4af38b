"""Measures the SvS answer checker: answer forms, reference solutions, near misses, speed.

  python -m ssp_jax.svs.grader_bench                      # forms, near misses, speed (synthetic)
  python -m ssp_jax.svs.grader_bench --eval MATH-AIME-Evaluation.parquet   # + reference solutions

Prints one JSON line:
  forms_accepted / forms_total       FORMS (response, reference) pairs graded 1 (all should be)
  forms_accepted_narrow              the same with `fallbacks=False, use_math_verify=False`
  near_miss_rejected / near_miss_total   NEAR_MISSES graded 0 (all should be)
  references_accepted / references_total   rows of a verl-schema eval file whose reference
                                     solution (`extra_info.answer`) is graded 1 against its own
                                     `reward_model.ground_truth` (only with --eval)
  grade_per_s, batch_256x8_s          throughput on 2,048 responses (256 problems x 8: a mix of
                                     correct, near-miss and wrong answers), one process
  hard_wrong_per_s                   the slow path: distinct wrong answers that no cheap stage
                                     settles (expression vs tuple), each reaching math_verify
  pathological_rejected / _total     PATHOLOGICAL (power towers, 100,000 digits, 50,000 nested
                                     braces, long hedges) graded 0; pathological_max_s the
                                     slowest of them
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from ssp_jax.svs import math_grader

# (response, reference): answer forms the original cascade accepts (issue 13's list and more).
FORMS = [
    ("\\boxed{\\{3, 1, 2\\}}", "\\{1,2,3\\}"),                           # set in another order
    ("\\boxed{3, 1, 2}", "1, 2, 3"),                                     # list in another order
    ("\\boxed{(\\frac{1}{2}, 0.25)}", "(0.5, \\frac14)"),                 # tuple: fractions/decimals
    ("\\boxed{[2, 3)}", "x \\in [2,3)"),                                 # interval vs x \in
    ("\\boxed{(-\\infty, 1]}", "(-\\infty,1]"),
    ("\\boxed{\\pm 2}", "2, -2"),                                        # \pm
    ("\\boxed{2\\sqrt{3} \\text{ cm}}", "2\\sqrt3"),                      # unit after a radical
    ("\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}}",
     "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),                         # spaced vs unspaced
    ("\\boxed{\\sqrt[3]{2}}", "2^{1/3}"),                                # cube root
    ("The final answer is 5.", "5"),                                     # no box
    ("Answer: 42", "42"),                                                # DAPO line
    ("so the answer is $\\frac{3}{4}$.", "0.75"),
    ("<answer>17</answer>", "17"),
    ("\\boxed{\\textbf{(55)}}", "055"),                                  # AIME-style
    ("\\boxed{1,000,000}", "1000000"),
    ("\\boxed{x = 5}", "5"),
    ("\\boxed{\\dfrac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}"),
    ("\\boxed{0.333333}", "\\frac{1}{3}"),                               # decimal, 6 places
    ("\\boxed{90^\\circ}", "90"),
    ("\\boxed{50\\%}", "50"),
    ("\\boxed{\\text{(B)}}", "(B)"),
    ("\\boxed{x^2 - 1}", "(x-1)(x+1)"),
    ("\\boxed{864 \\mbox{ inches}^2}", "864^2"),                          # a MATH-500 reference
    ("<think>\\boxed{3}</think> So \\boxed{4}.", "4"),                   # after </think>
]

# (response, reference): must score 0 (near-miss integers and decimals, hedges, garbage).
NEAR_MISSES = [
    ("\\boxed{1000001}", "1000000"), ("\\boxed{999999}", "1000000"),
    ("\\boxed{1000000.4}", "1000000"), ("\\boxed{123456789}", "123456788"),
    ("\\boxed{1000000 + 10^{-9}}", "1000000"), ("\\boxed{3.14159}", "3.141592"),
    ("\\boxed{0.333}", "\\frac{1}{3}"), ("\\boxed{2.5}", "2.51"), ("\\boxed{-7}", "7"),
    ("The answer is 5 or 6.", "5"), ("\\boxed{5, 6}", "5"), ("\\boxed{[4, 6]}", "5"),
    ("\\boxed{5} Answer: 6", "6"), ("\\boxed{}", "4"), ("", "4"), ("\\boxed{" + "(" * 500, "1"),
    ("\\boxed{2^{2^{2^{100}}}}", "1"), ("\\boxed{2 + 2 = 5}", "5"), ("\\boxed{\\{5, 6\\}}", "5"),
]

# (response, reference): the grader fault drill's answers; each must score 0 without a hang
# (they hung sympy's parser for 60+ s, took 82 s, or, the two hedges, scored 1.0).
TOWERS = ["\\boxed{10^{{10}^{10}}}", "\\boxed{10^{10}^{10}}",
          "\\boxed{10^{99\\cdot 99\\cdot 99\\cdot 99}}"]
PATHOLOGICAL = [(t, "1") for t in TOWERS] + [
    ("\\boxed{%s}" % ("7" * 100_000), "5"),                           # 100,000 digits
    ("\\boxed{%s5%s}" % ("{" * 50_000, "}" * 50_000), "5"),           # 50,000 nested braces
    ("\\boxed{%s, 5}" % ", ".join(str(i) for i in range(1000, 1080)), "5"),   # a long hedge
    ("\\boxed{%s = 5}" % " + ".join(str(i) for i in range(1, 151)), "5"),     # a false chain
]


def synthetic_batch(n_problems: int = 256, n: int = 8) -> list[tuple[str, str]]:
  """n_problems x n (response, reference) pairs: per problem 3 correct, 3 near misses, 2 wrong
  expressions, over integer, fraction and expression references."""
  refs = ["%d" % (1000 + 7 * i) if i % 3 == 0 else
          ("\\frac{%d}{%d}" % (i + 1, i + 2) if i % 3 == 1 else "%d\\sqrt{%d}" % (i % 9 + 2, 3))
          for i in range(n_problems)]
  out = []
  for i, ref in enumerate(refs):
    cells = ["Step by step ... so the answer is \\boxed{%s}." % ref,
             "Thus the final answer is %s." % ref,
             "<think>hmm</think> The result: \\boxed{%s}" % ref,
             "\\boxed{%d}" % (1001 + 7 * i), "\\boxed{%s + 1}" % ref, "Answer: %d" % i,
             "\\boxed{x^%d + %d}" % (i % 4 + 2, i), "I could not finish the computation."]
    out += [(cells[k % len(cells)], ref) for k in range(n)]
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--eval", default="", help="verl-schema parquet/JSONL with extra_info.answer")
  ap.add_argument("--show-failures", action="store_true")
  args = ap.parse_args(argv)
  out = {"forms_total": len(FORMS),
         "forms_accepted": sum(math_grader.grade(r, a) for r, a in FORMS),
         "forms_accepted_narrow": sum(math_grader.grade(r, a, fallbacks=False,
                                                        use_math_verify=False) for r, a in FORMS),
         "near_miss_total": len(NEAR_MISSES),
         "near_miss_rejected": sum(1 - math_grader.grade(r, a) for r, a in NEAR_MISSES)}
  batch = synthetic_batch()
  t0 = time.perf_counter()
  for r, a in batch:
    math_grader.grade(r, a)
  dt = time.perf_counter() - t0
  out.update(batch_256x8_s=round(dt, 3), grade_per_s=round(len(batch) / dt, 1))
  slowest, rejected = 0.0, 0.0
  for r, a in PATHOLOGICAL:
    t0 = time.perf_counter()
    rejected += 1.0 - math_grader.grade(r, a)
    slowest = max(slowest, time.perf_counter() - t0)
  out.update(pathological_total=len(PATHOLOGICAL), pathological_rejected=rejected,
             pathological_max_s=round(slowest, 3))
  hard = [("\\boxed{x^{%d} + %d y}" % (i % 5 + 2, i), "(%d, \\frac{%d}{3})" % (i, i + 1))
          for i in range(256)]                   # distinct wrong answers that reach math_verify
  t0 = time.perf_counter()
  for r, a in hard:
    math_grader.grade(r, a)
  out.update(hard_wrong_per_s=round(len(hard) / (time.perf_counter() - t0), 1))
  if args.eval:
    from ssp_jax.svs.data import read_records
    rows = [rec for _, rec in read_records(args.eval)
            if isinstance(rec.get("extra_info"), dict) and rec["extra_info"].get("answer")]
    failures = [rec for rec in rows if math_grader.grade(
        rec["extra_info"]["answer"], str(rec["reward_model"]["ground_truth"])) != 1.0]
    out.update(references_total=len(rows), references_accepted=len(rows) - len(failures))
    if args.show_failures:
      for rec in failures:
        print("not accepted:", rec["reward_model"]["ground_truth"], file=sys.stderr)
  print(json.dumps(out))
  return 0


if __name__ == "__main__":
  sys.exit(main())
