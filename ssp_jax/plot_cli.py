"""`ssp-jax plot`: PNG curves from a run's metrics.jsonl, one file per metric key (x = step).

  ssp-jax plot runs/ssp_tiny --out runs/ssp_tiny/plots            # the game's default keys
  ssp-jax plot runs/svs_gsm --out plots --keys oqa/accuracy,loss   # chosen keys

WORKDIR is a training workdir (its metrics.jsonl is read) or a metrics.jsonl file. Without --keys
the default keys of the run's game (ssp_jax/run/games.py: the `game` of the workdir's config.json;
SSP for a metrics file without one) are drawn, those absent from the file left out, plus every
`val/...` key present. A requested key that no step has is an error (one line, exit 2). A key
that only some steps have (SvS's vps/spa keys on steps that were not skipped, `val/...` at
evaluation steps) is drawn at those steps, with markers.
The file of key `a/b` is `OUT/a_b.png`.
"""
from __future__ import annotations

import argparse
import json
import math
import os
from typing import Sequence

from ssp_jax.paths import check_out_dir


def add_arguments(p: argparse.ArgumentParser) -> None:
  p.add_argument("workdir", help="training workdir (holding metrics.jsonl) or a metrics.jsonl")
  p.add_argument("--out", required=True, help="directory for the PNG files (created)")
  p.add_argument("--keys", default="",
                 help="comma-separated metric keys (default: the game's main keys present)")


def read_metrics(path: str) -> list[dict]:
  """The step records of a metrics.jsonl (a workdir or the file itself), in file order."""
  if os.path.isdir(path):
    path = os.path.join(path, "metrics.jsonl")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"no metrics file at {path} (give a training workdir or its "
                            "metrics.jsonl)")
  rows = []
  with open(path) as f:
    for i, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        row = json.loads(line)
      except json.JSONDecodeError:
        raise ValueError(f"{path}:{i}: not a JSON object") from None
      if not isinstance(row, dict) or "step" not in row:
        raise ValueError(f"{path}:{i}: a metrics record needs a 'step' field")
      rows.append(row)
  if not rows:
    raise ValueError(f"{path} holds no step records")
  return rows


def _is_number(v) -> bool:
  return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def game_of_run(path: str):
  """The game of a run (ssp_jax/run/games.py): the `game` of the config.json beside its
  metrics.jsonl, else the default game (a metrics file on its own, or a run without a `game`)."""
  from ssp_jax.run import games
  workdir = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
  try:
    with open(os.path.join(workdir, "config.json")) as f:
      name = json.load(f).get("game", games.DEFAULT)
  except (OSError, ValueError, AttributeError):
    name = games.DEFAULT
  return games.lookup(name)


def default_keys(rows: Sequence[dict], game) -> list[str]:
  """The default keys of `game` (a games.GameEntry) that the rows have, then the per-hop solver
  rewards and `val/...` keys present."""
  present = set().union(*(r.keys() for r in rows))
  keys = [k for k in game.plot_keys if k in present]
  keys += sorted(k for k in present if k.startswith(("solver/reward_hop", "val/"))
                 and k not in keys)
  return keys


def series(rows: Sequence[dict], key: str) -> tuple[list[float], list[float]]:
  """(steps, values) of the records that carry a finite number under `key`."""
  pts = [(float(r["step"]), float(r[key])) for r in rows if _is_number(r.get(key))]
  return [s for s, _ in pts], [v for _, v in pts]


def plot(rows: Sequence[dict], keys: Sequence[str], out_dir: str, title: str = "") -> list[str]:
  """One PNG per key; returns the paths written. A key no record carries raises ValueError."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  missing = [k for k in keys if not series(rows, k)[0]]
  if missing:
    present = sorted(set().union(*(r.keys() for r in rows)) - {"step"})
    raise ValueError(f"no numeric values for key(s) {', '.join(missing)} in metrics.jsonl; "
                     f"keys present: {', '.join(present[:40])}"
                     + (" ..." if len(present) > 40 else ""))
  os.makedirs(out_dir, exist_ok=True)
  paths = []
  for key in keys:
    steps, values = series(rows, key)
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    sparse = len(steps) < len(rows) or len(steps) <= 20
    ax.plot(steps, values, marker="o" if sparse else None, markersize=3, linewidth=1.2)
    ax.set_xlabel("step")
    ax.set_ylabel(key)
    ax.set_title(f"{title}: {key}" if title else key, fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = os.path.join(out_dir, key.replace("/", "_") + ".png")
    fig.savefig(path)
    plt.close(fig)
    paths.append(path)
  return paths


def run(args) -> int:
  check_out_dir(args.out, "the PNG files")
  rows = read_metrics(args.workdir)
  keys = ([k.strip() for k in args.keys.split(",") if k.strip()]
          or default_keys(rows, game_of_run(args.workdir)))
  if not keys:
    raise ValueError(f"none of the default keys is in {args.workdir}; name them with --keys")
  title = os.path.basename(os.path.normpath(args.workdir))
  paths = plot(rows, keys, args.out, title=title)
  print(json.dumps({"out": args.out, "steps": len(rows), "files": paths}))
  return 0
