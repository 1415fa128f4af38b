"""The phase times of a training run's steps, from its metrics.jsonl; prints JSON lines.

  python bench/step_phases.py RUN_DIR/metrics.jsonl [--skip 1]

One line a step (`time/*` seconds, `compile/count`, the trajectory counts and mean lengths),
then a `summary` line: the median of each phase over the steps after the first `--skip` (the
first step compiles most programs), and the step time without the compile seconds
(`step_excl_compile_s`; compiles ahead on host threads can overlap a phase, so this is a bound).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

SHAPE_KEYS = ("loss_tokens", "proposer/num", "solver/num", "proposer/response_len",
              "solver/response_len", "proposer/valid_rate", "solver/searches_mean")


def step_line(rec: dict) -> dict:
  out = {"step": rec["step"]}
  out.update({k: round(float(v), 3) for k, v in sorted(rec.items())
              if k.startswith("time/") or k.startswith("compile/")})
  out.update({k: rec[k] for k in SHAPE_KEYS if k in rec})
  return out


def summary(lines: list[dict], skip: int) -> dict:
  steady = [l for l in lines if l["step"] > skip]
  out = {"summary": True, "steps": len(lines), "steady_steps": len(steady), "skip": skip}
  if not steady:
    return out
  keys = sorted({k for l in steady for k in l if k.startswith("time/") or k == "compile/count"})
  for k in keys:
    out["median_" + k] = round(statistics.median(l.get(k, 0.0) for l in steady), 3)
  out["median_step_excl_compile_s"] = round(statistics.median(
      l.get("time/step", 0.0) - l.get("time/compile", 0.0) for l in steady), 3)
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("metrics", help="a run's metrics.jsonl")
  ap.add_argument("--skip", type=int, default=1, help="steps left out of the summary (compiles)")
  a = ap.parse_args(argv)
  try:
    with open(a.metrics, encoding="utf-8") as f:
      recs = [json.loads(l) for l in f if l.strip()]
  except (OSError, json.JSONDecodeError) as e:
    print(f"step_phases: cannot read {a.metrics}: {e}", file=sys.stderr)
    return 2
  lines = [step_line(r) for r in recs if r.get("step", 0) > 0 and "time/step" in r]
  for l in lines:
    print(json.dumps(l))
  print(json.dumps(summary(lines, a.skip)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
