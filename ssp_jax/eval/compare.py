"""Held-out comparison of evaluated runs: EM by hop count with 95% intervals, and paired tests.

`ssp-jax eval` writes `predictions_<dataset>.jsonl` (one record per question with `id` and `em`).
This module reads several runs' predictions of the same questions, joins them by `id` with the
question file's fields (`hops`, `kind`: the world's qa_heldout.jsonl has both) and reports, per
run and per group (all, hops=1, 2, 3, kind=...):

  em          exact-match accuracy
  ci95        Wilson score interval at 95%
  n           questions

and for every pair of runs (B against A) on the questions both answered:

  diff        EM(B) - EM(A), paired
  ci95        normal interval of the paired difference (discordant pairs)
  b_only, a_only   questions only B (only A) got right
  p_mcnemar   exact two-sided McNemar p-value (binomial on the discordant pairs)

  python -m ssp_jax.eval.compare --questions WORLD/qa_heldout.jsonl \\
      --run base=OUT/base/predictions_world.jsonl --run ssp=OUT/ssp/predictions_world.jsonl \\
      [--out report.json] [--markdown report.md]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Iterable, Optional, Sequence

Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
  """The Wilson score interval of k successes in n trials (0, 0 for n = 0)."""
  if n <= 0:
    return 0.0, 0.0
  p = k / n
  den = 1 + z * z / n
  mid = (p + z * z / (2 * n)) / den
  half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
  return max(0.0, mid - half), min(1.0, mid + half)


def mcnemar_exact(b: int, c: int) -> float:
  """Two-sided exact McNemar p-value for b and c discordant pairs."""
  n = b + c
  if n == 0:
    return 1.0
  k = min(b, c)
  tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n
  return min(1.0, 2.0 * tail)


def paired(a: Sequence[float], b: Sequence[float]) -> dict:
  """Paired comparison of two 0/1 vectors over the same questions (B - A)."""
  n = len(a)
  b_only = sum(1 for x, y in zip(a, b) if y > 0.5 >= x)
  a_only = sum(1 for x, y in zip(a, b) if x > 0.5 >= y)
  diff = (b_only - a_only) / n if n else 0.0
  # variance of the mean paired difference d_i in {-1, 0, 1}
  var = ((b_only + a_only) / n - diff * diff) / n if n else 0.0
  half = Z95 * math.sqrt(max(var, 0.0))
  return {"n": n, "diff": diff, "ci95": [diff - half, diff + half], "b_only": b_only,
          "a_only": a_only, "p_mcnemar": mcnemar_exact(b_only, a_only)}


def read_jsonl(path: str) -> Iterable[dict]:
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      if line:
        yield json.loads(line)


def group_keys(q: dict) -> list[str]:
  keys = ["all"]
  if q.get("hops") is not None:
    keys.append(f"hops={q['hops']}")
  if q.get("kind"):
    keys.append(f"kind={q['kind']}")
  return keys


def compare(questions: dict[str, dict], runs: dict[str, dict[str, float]]) -> dict:
  """`questions`: id -> record; `runs`: name -> {id: em}. Returns the report dict."""
  report = {"runs": {}, "pairs": {}}
  for name, em in runs.items():
    groups: dict[str, list[float]] = {}
    for qid, v in em.items():
      for g in group_keys(questions.get(qid, {})):
        groups.setdefault(g, []).append(float(v))
    report["runs"][name] = {
        g: {"n": len(v), "em": sum(v) / len(v), "ci95": list(wilson(int(round(sum(v))), len(v)))}
        for g, v in sorted(groups.items())}
  names = list(runs)
  for i, a in enumerate(names):
    for b in names[i + 1:]:
      common = sorted(set(runs[a]) & set(runs[b]))
      by_group: dict[str, tuple[list, list]] = {}
      for qid in common:
        for g in group_keys(questions.get(qid, {})):
          xa, xb = by_group.setdefault(g, ([], []))
          xa.append(runs[a][qid])
          xb.append(runs[b][qid])
      report["pairs"][f"{b} - {a}"] = {g: paired(xa, xb)
                                        for g, (xa, xb) in sorted(by_group.items())}
  return report


def markdown(report: dict) -> str:
  groups = sorted({g for r in report["runs"].values() for g in r},
                  key=lambda g: (g != "all", g))
  lines = ["| run | " + " | ".join(groups) + " |", "|---" * (len(groups) + 1) + "|"]
  for name, r in report["runs"].items():
    cells = []
    for g in groups:
      x = r.get(g)
      cells.append(f"{100 * x['em']:.1f} [{100 * x['ci95'][0]:.1f}, {100 * x['ci95'][1]:.1f}] "
                   f"(n={x['n']})" if x else "")
    lines.append(f"| {name} | " + " | ".join(cells) + " |")
  if report["pairs"]:
    lines += ["", "| pair (paired, same questions) | group | diff (points) | 95% CI | "
              "B only / A only | McNemar p |", "|---|---|---|---|---|---|"]
    for pair, by_group in report["pairs"].items():
      for g in groups:
        x = by_group.get(g)
        if x:
          lines.append(f"| {pair} | {g} | {100 * x['diff']:+.1f} | [{100 * x['ci95'][0]:+.1f}, "
                       f"{100 * x['ci95'][1]:+.1f}] | {x['b_only']} / {x['a_only']} | "
                       f"{x['p_mcnemar']:.3g} |")
  return "\n".join(lines) + "\n"


def _fail(msg: str) -> int:
  print(f"ssp-jax eval compare: {msg}", file=sys.stderr)
  return 2


def main(argv: Optional[Sequence[str]] = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--questions", default="",
                  help="the question file (JSONL with id, and hops/kind to group by)")
  ap.add_argument("--run", action="append", default=[], metavar="NAME=PREDICTIONS.jsonl",
                  help="a run's predictions file (repeat; pairs are compared in this order)")
  ap.add_argument("--out", default="", help="write the report as JSON here")
  ap.add_argument("--markdown", default="", help="write the tables as Markdown here")
  args = ap.parse_args(argv)
  if not args.run:
    return _fail("give at least one --run NAME=PREDICTIONS.jsonl")
  questions: dict[str, dict] = {}
  try:
    if args.questions:
      questions = {str(q["id"]): q for q in read_jsonl(args.questions) if "id" in q}
    runs = {}
    for spec in args.run:
      name, sep, path = spec.partition("=")
      if not sep or not name or not path:
        return _fail(f"--run {spec!r}: use NAME=PREDICTIONS.jsonl")
      runs[name] = {str(p["id"]): float(p["em"]) for p in read_jsonl(path)}
  except (OSError, json.JSONDecodeError, KeyError) as e:
    return _fail(f"cannot read the inputs ({type(e).__name__}: {e})")
  report = compare(questions, runs)
  text = json.dumps(report, indent=1)
  if args.out:
    with open(args.out, "w", encoding="utf-8") as f:
      f.write(text + "\n")
  if args.markdown:
    with open(args.markdown, "w", encoding="utf-8") as f:
      f.write(markdown(report))
  print(markdown(report))
  return 0


if __name__ == "__main__":
  sys.exit(main())
