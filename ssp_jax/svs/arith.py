"""Seeded arithmetic of graded difficulty, for SvS runs of very small models (configs/svs_tiny.py).

  python -m ssp_jax.svs.arith --out ssp_jax/data/arith_graded.jsonl   # the committed set
  problems = arith.generate(n=64, levels=(1, 2, 3), seed=0)         # [{"id", "problem", "answer", ...}]

Levels (answers are exact non-negative integers):
  1  single-digit addition                       "What is 3 + 4?"
  2  two-digit plus one-digit addition           "What is 23 + 5?"
  3  single-digit subtraction or multiplication  "What is 9 - 4?" / "What is 6 * 7?"
  4  two-digit addition                          "What is 34 + 58?"
  5  two-digit times one-digit                   "What is 23 * 4?"
  6  one-step word problem                       "Tom has 3 apples and buys 4 more. ..."
  7  two-step word problem                       "... buys 4 bags of 6 apples and eats 5. ..."

Every record carries `expr`, the Python expression of its answer over numbers that appear in the
problem text (tests re-evaluate it), and `level` (the record's `data_source` is `arith-L<level>`,
so `ssp-jax eval` reports accuracy per level). A 135M model solves a few of level 1 and fewer of
the rest, and only with a worked example of the answer format before the problem
(`format_hint`; measured figures: docs/svs.md); SvS needs problems solved sometimes.
"""
from __future__ import annotations

import argparse
import json
import os
import random
from typing import Callable, Iterable, Sequence

NAMES = ("Tom", "Anna", "Ben", "Lily", "Sam", "Mia", "Leo", "Emma", "Max", "Zoe")
ITEMS = ("apples", "pencils", "stickers", "marbles", "cookies", "books", "cards", "shells")


def _l1(r: random.Random):
  a, b = r.randint(1, 9), r.randint(1, 9)
  return f"What is {a} + {b}?", f"{a} + {b}"


def _l2(r: random.Random):
  a, b = r.randint(10, 89), r.randint(1, 9)
  return f"What is {a} + {b}?", f"{a} + {b}"


def _l3(r: random.Random):
  if r.random() < 0.5:
    a = r.randint(2, 9)
    b = r.randint(1, a)
    return f"What is {a} - {b}?", f"{a} - {b}"
  a, b = r.randint(2, 9), r.randint(2, 9)
  return f"What is {a} * {b}?", f"{a} * {b}"


def _l4(r: random.Random):
  a, b = r.randint(10, 99), r.randint(10, 99)
  return f"What is {a} + {b}?", f"{a} + {b}"


def _l5(r: random.Random):
  a, b = r.randint(11, 99), r.randint(2, 9)
  return f"What is {a} * {b}?", f"{a} * {b}"


def _l6(r: random.Random):
  name, item = r.choice(NAMES), r.choice(ITEMS)
  a, b = r.randint(2, 9), r.randint(2, 9)
  if r.random() < 0.5:
    return (f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?",
            f"{a} + {b}")
  a = a + b
  return (f"{name} has {a} {item} and gives away {b}. How many {item} does {name} have left?",
          f"{a} - {b}")


def _l7(r: random.Random):
  name, item = r.choice(NAMES), r.choice(ITEMS)
  bags, per = r.randint(2, 5), r.randint(2, 6)
  used = r.randint(1, bags * per - 1)
  return (f"{name} buys {bags} bags with {per} {item} in each bag, then gives {used} {item} to a "
          f"friend. How many {item} does {name} have left?", f"{bags} * {per} - {used}")


LEVELS: dict[int, Callable[[random.Random], tuple[str, str]]] = {
    1: _l1, 2: _l2, 3: _l3, 4: _l4, 5: _l5, 6: _l6, 7: _l7}


def evaluate(expr: str) -> int:
  """The exact integer value of a generated expression (digits, + - * and spaces only)."""
  if not set(expr) <= set("0123456789+-* "):
    raise ValueError(f"not a generated expression: {expr!r}")
  value = eval(expr, {"__builtins__": {}}, {})  # noqa: S307 - checked to be digits and + - *
  if not isinstance(value, int) or value < 0:
    raise ValueError(f"{expr!r} = {value!r} is not a non-negative integer")
  return value


# A worked one-line example put before each problem of the tiny set (`format_hint=True`): a
# choice for very small models, not in the paper. SmolLM2-135M almost never ends with \boxed{}
# under the SvS solving prompt alone (docs/svs.md has the measurement); with this line it
# copies the format.
FORMAT_HINT = "Example: What is 1 + 1? 1 + 1 = 2. The answer is \\boxed{2}.\nNow solve: "


def generate(n: int, levels: Sequence[int] = tuple(LEVELS), seed: int = 0,
             weights: Sequence[float] = (), format_hint: bool = False,
             exclude: Iterable[str] = ()) -> list[dict]:
  """n distinct problems, levels drawn with `weights` (default uniform), seeded; with
  `format_hint` each problem text starts with FORMAT_HINT. Problems whose text (without the
  hint) is in `exclude` are skipped: a held-out set shares no problem with a training set."""
  bad = [lv for lv in levels if lv not in LEVELS]
  if bad:
    raise ValueError(f"unknown arithmetic level(s) {bad}; known: {sorted(LEVELS)}")
  r = random.Random(seed)
  out = []
  seen = {p[len(FORMAT_HINT):] if p.startswith(FORMAT_HINT) else p for p in exclude}
  for _ in range(n * 200):
    if len(out) == n:
      break
    level = r.choices(list(levels), weights=list(weights) or None)[0]
    problem, expr = LEVELS[level](r)
    if problem in seen:
      continue
    seen.add(problem)
    out.append({"id": f"arith-{seed}-{len(out)}",
                "problem": (FORMAT_HINT + problem) if format_hint else problem,
                "answer": str(evaluate(expr)), "expr": expr, "level": level,
                "data_source": f"arith-L{level}"})
  if len(out) < n:
    raise ValueError(f"only {len(out)} distinct problems at levels {tuple(levels)}; ask fewer")
  return out


def write_jsonl(records: Iterable[dict], path: str) -> int:
  count = 0
  with open(path, "w") as f:
    for rec in records:
      f.write(json.dumps(rec) + "\n")
      count += 1
  return count


# The set configs/svs_tiny.py trains on (ssp_jax/data/arith_graded.jsonl): chosen from the
# per-level solve rates of SmolLM2-135M-Instruct measured in docs/svs.md.
DEFAULT_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                            "arith_graded.jsonl")
DEFAULT_N, DEFAULT_SEED = 128, 0
DEFAULT_LEVELS, DEFAULT_WEIGHTS = (1, 2), (3, 1)   # all 81 level-1 problems, the rest level 2
# The held-out set configs/svs_tiny.py evaluates on (ssp_jax/data/arith_heldout.jsonl): no
# problem of the training set. Level 1 has only 81 distinct problems and the training set holds
# them all, so the held-out set is level 2 (the training set's other level) and level 3 (single-
# digit subtraction and multiplication, operations the training set does not have):
#   python -m ssp_jax.svs.arith --out ssp_jax/data/arith_heldout.jsonl --n 64 --seed 1 \
#       --levels 2,3 --weights 1,1 --exclude ssp_jax/data/arith_graded.jsonl
HELDOUT_PATH = os.path.join(os.path.dirname(DEFAULT_PATH), "arith_heldout.jsonl")


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--out", required=True)
  p.add_argument("--n", type=int, default=DEFAULT_N)
  p.add_argument("--seed", type=int, default=DEFAULT_SEED)
  p.add_argument("--levels", default=",".join(map(str, DEFAULT_LEVELS)))
  p.add_argument("--weights", default=",".join(map(str, DEFAULT_WEIGHTS)))
  p.add_argument("--no-format-hint", dest="format_hint", action="store_false",
                 help="plain problems (default: FORMAT_HINT before each, for tiny models)")
  p.add_argument("--exclude", action="append", default=[], metavar="JSONL",
                 help="skip every problem of this set (repeatable): a held-out set")
  a = p.parse_args(argv)
  levels = [int(x) for x in a.levels.split(",") if x]
  weights = [float(x) for x in a.weights.split(",") if x]
  exclude = [json.loads(line)["problem"] for path in a.exclude for line in open(path)
             if line.strip()]
  print(write_jsonl(generate(a.n, levels, a.seed, weights, a.format_hint, exclude), a.out),
        "problems ->", a.out)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
