"""Cross-play question sets: the valid questions an SSP run's proposer wrote early, in the middle
and late in training, frozen as FlashRAG JSONL files that `ssp-jax eval --data NAME=FILE` reads.

Evaluating the solver's checkpoints of the same run (step 0, middle, end) on each set gives the
cross-play matrix: if the proposer makes questions harder as the solver improves, later sets are
harder for every solver, and later solvers do better on every set.

  python -m ssp_jax.world.crossplay --samples RUN/samples --steps 8 --out OUT/crossplay

The run must log every proposal (`--config.ssp.samples_per_step` at least the proposals a step,
e.g. 1000). Each record: `id`, `question`, `golden_answers` (the proposer's given answer),
`step`, and `hops` from the world checker when the run had `ssp.world_dir`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional, Sequence


def windows(steps: int) -> dict[str, range]:
  """Early, middle and late windows of about a third of the steps each (1-based steps)."""
  third = max(1, steps // 3)
  mid = max(1, (steps - third) // 2 + 1)
  return {"early": range(1, third + 1), "middle": range(mid, mid + third),
          "late": range(max(1, steps - third + 1), steps + 1)}


def collect(samples_dir: str, window: range, name: str) -> list[dict]:
  """The distinct valid proposals of the window's steps, in step order."""
  rows, seen = [], set()
  for step in window:
    path = os.path.join(samples_dir, f"samples_{step}.jsonl")
    if not os.path.exists(path):
      continue
    with open(path, encoding="utf-8") as f:
      for line in f:
        rec = json.loads(line)
        q = rec.get("question")
        if rec.get("kind") != "proposal" or not rec.get("valid") or not q or q in seen:
          continue
        seen.add(q)
        gt = rec["answer"] if isinstance(rec["answer"], list) else [rec["answer"]]
        rows.append({"id": f"{name}-{step}-{len(rows)}", "question": q,
                     "golden_answers": [str(g) for g in gt], "step": step,
                     "hops": (rec.get("world") or {}).get("hops")})
  return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--samples", required=True, help="the run's samples/ directory")
  ap.add_argument("--steps", type=int, required=True, help="the run's total steps")
  ap.add_argument("--out", required=True, help="directory for questions_<window>.jsonl")
  args = ap.parse_args(argv)
  if not os.path.isdir(args.samples):
    print(f"crossplay: --samples {args.samples!r} is not a directory (a training run's "
          "samples/)", file=sys.stderr)
    return 2
  if args.steps < 1:
    print(f"crossplay: --steps {args.steps} must be >= 1", file=sys.stderr)
    return 2
  os.makedirs(args.out, exist_ok=True)
  for name, window in windows(args.steps).items():
    rows = collect(args.samples, window, name)
    with open(os.path.join(args.out, f"questions_{name}.jsonl"), "w", encoding="utf-8") as f:
      f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    print(f"cross-play set {name}: {len(rows)} questions from steps {list(window)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
