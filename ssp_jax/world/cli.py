"""`ssp-jax world build|check`: make a world directory, or check proposed questions against one.

  ssp-jax world build --seed 0 --out worlds/w0 [--size 5000] [--force]
  ssp-jax world check --world worlds/w0 --in proposals.jsonl [--out checked.jsonl]

`build` prints a one-line JSON summary (entities by type and kind, questions by split, hop and
kind, answers by hop budget). It refuses, in one line with exit code 2, a non-empty --out that is
not a world of the same seed and size, unless --force.

`check` reads JSONL lines with `question` and `answer` (a string or a list of aliases; a line
with `golden_answers` instead, such as the world's own QA files, works too) and optional
`documents` (strings), writes each line back with the checker's measures, then one line
`{"summary": {"n", "bad", "grounded_rate", "hops_mean", "hops_hist", "leak_rate",
"copy8_rate"}}`. A line that is not such an object is counted in `bad` (the first one named on
stderr), never fatal.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from typing import Optional

from ssp_jax.world import build as build_lib


def add_arguments(parser: argparse.ArgumentParser) -> None:
  sub = parser.add_subparsers(dest="world_cmd", metavar="{build,check}", required=True)
  b = sub.add_parser("build", help="write a seeded world (corpus, QA, answers, graph) to a dir")
  b.add_argument("--seed", type=int, required=True, help="world seed (same seed, same bytes)")
  b.add_argument("--out", required=True, help="output directory")
  b.add_argument("--size", type=int, default=build_lib.DEFAULT_SIZE,
                 help=f"number of entities (default {build_lib.DEFAULT_SIZE})")
  b.add_argument("--force", action="store_true",
                 help="write into a non-empty --out that holds something else")
  c = sub.add_parser("check", help="measure proposed (question, answer) pairs against a world")
  c.add_argument("--world", required=True, help="a world directory (`world build` output)")
  c.add_argument("--in", dest="inp", required=True, help="JSONL with question and answer")
  c.add_argument("--out", default="", help="output JSONL (default: stdout)")


def run(args) -> int:
  return _build(args) if args.world_cmd == "build" else _check(args)


def _build(args) -> int:
  build_lib.check_size(args.size)
  out = os.path.expanduser(args.out)
  if os.path.isfile(out):
    raise NotADirectoryError(f"--out {out!r} is a file; give a directory")
  if os.path.isdir(out) and os.listdir(out) and not args.force:
    head = build_lib.read_header(out)
    if head is None or (head["seed"], head["size"]) != (args.seed, args.size):
      what = ("holds no world" if head is None else
              f"holds the world of seed {head['seed']}, size {head['size']}")
      raise ValueError(f"--out {out!r} is not empty and {what}; choose another directory or "
                       "add --force to write into it")
  print(json.dumps(build_lib.build_world(args.seed, args.size, out), sort_keys=True))
  return 0


def _parse(line: str) -> tuple[Optional[dict], Optional[str]]:
  """(record, None) for a usable line, else (None, the reason)."""
  try:
    rec = json.loads(line)
  except json.JSONDecodeError as e:
    return None, f"not JSON ({e.msg})"
  if not isinstance(rec, dict):
    return None, "not a JSON object"
  q = rec.get("question")
  a = rec.get("answer", rec.get("golden_answers"))
  if not isinstance(q, str) or not q.strip():
    return None, "missing or empty `question`"
  ok_answer = (isinstance(a, str) and a.strip()) or (
      isinstance(a, list) and a and all(isinstance(x, str) for x in a))
  if not ok_answer:
    return None, "missing `answer` (a string or a list of strings)"
  docs = rec.get("documents")
  if docs is not None and not (isinstance(docs, list) and all(isinstance(d, str) for d in docs)):
    return None, "`documents` is not a list of strings"
  return rec, None


def summarize(measures: list[dict], bad: int = 0) -> dict:
  n = len(measures)
  hops = [m["hops"] for m in measures if m["hops"] is not None]
  hist = collections.Counter("none" if m["hops"] is None else str(m["hops"]) for m in measures)
  rate = lambda key: sum(bool(m[key]) for m in measures) / n if n else 0.0
  return {"n": n, "bad": bad, "grounded_rate": rate("grounded"),
          "hops_mean": sum(hops) / len(hops) if hops else None,
          "hops_hist": dict(sorted(hist.items())), "leak_rate": rate("leak"),
          "copy8_rate": rate("copy8")}


def _check(args) -> int:
  world = os.path.expanduser(args.world)
  if not os.path.isfile(os.path.join(world, build_lib.WORLD)):
    raise FileNotFoundError(f"--world {world!r} holds no {build_lib.WORLD}; make one with "
                            "`ssp-jax world build --seed 0 --out DIR`")
  if not os.path.isfile(args.inp):
    raise FileNotFoundError(f"--in {args.inp!r} does not exist")
  from ssp_jax.world.check import WorldChecker
  checker = WorldChecker(world)
  out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout
  measures, bad, first_bad = [], 0, None
  try:
    with open(args.inp, "rb") as f:
      for lineno, raw in enumerate(f, 1):
        if not raw.strip():
          continue
        try:
          rec, why = _parse(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
          rec, why = None, f"not UTF-8 (byte {e.start})"
        if rec is None:
          bad += 1
          first_bad = first_bad or f"{args.inp}:{lineno}: {why}"
          continue
        m = checker.check(rec["question"], rec.get("answer", rec.get("golden_answers")),
                          rec.get("documents"))
        measures.append(m)
        out.write(json.dumps({**rec, **m}, ensure_ascii=False) + "\n")
    out.write(json.dumps({"summary": summarize(measures, bad)}) + "\n")
  finally:
    if out is not sys.stdout:
      out.close()
  if first_bad:
    print(f"ssp-jax world check: {bad} bad lines skipped (first: {first_bad})", file=sys.stderr)
  return 0
