"""What `ssp-jax eval --out DIR` owns in DIR, and how a run replaces it without losing anything.

A run owns `predictions_<dataset>.jsonl` of the datasets it evaluates; `results.json` and
`results.md` are shared by every run that wrote into DIR. A second run into the same DIR:

  - keeps the earlier runs' datasets (their scores in results.json, their predictions files);
  - replaces the scores and the predictions of the datasets it evaluated again, and says so on
    stderr (never silently);
  - marks every dataset entry with the run that wrote it (`"run": "<id>"`) and keeps each
    run's settings under `meta.runs[<id>]`.

Every file is written to a temporary name and renamed over the old one, so a crash leaves the
old file or the new one, never half of either, and predictions are never left beside scores of
another run. `prepare` proves DIR writable (and an earlier results.json readable and of the same
kind) before the evaluation starts, so an unusable `--out` costs seconds, not the whole run.
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import time
from typing import Any, Iterable, Optional

RESULTS_JSON, RESULTS_MD = "results.json", "results.md"
RESERVED = ("averages", "meta")
KINDS = {"qa": "em", "math": "acc"}   # kind -> a key every dataset entry of that kind has


class OutputError(ValueError):
  """`--out` cannot be used; the message names the path and the fix."""


def _kind_of(results: dict) -> Optional[str]:
  kind = (results.get("meta") or {}).get("kind")
  if kind in KINDS:
    return kind
  for key, entry in results.items():   # files written before `meta.kind` existed
    if key not in RESERVED and isinstance(entry, dict):
      for k, field in KINDS.items():
        if field in entry:
          return k
  return None


def prepare(out_dir: str, kind: str) -> dict[str, Any]:
  """Creates `out_dir`, proves it writable, returns the earlier results.json ({} if none).

  Raises OutputError when the directory cannot be created or written, or when an earlier
  results.json there is unreadable or holds results of the other kind (QA vs math)."""
  try:
    os.makedirs(out_dir, exist_ok=True)
    probe = os.path.join(out_dir, f".write-probe-{os.getpid()}")
    with open(probe, "w", encoding="utf-8") as f:
      f.write("ok")
    os.remove(probe)
  except OSError as e:
    raise OutputError(f"--out {out_dir!r} is not a writable directory ({e.strerror or e}); "
                      "pass a directory you can write to") from None
  path = os.path.join(out_dir, RESULTS_JSON)
  if not os.path.exists(path):
    return {}
  try:
    with open(path, encoding="utf-8") as f:
      previous = json.load(f)
    if not isinstance(previous, dict):
      raise ValueError("not a JSON object")
  except (OSError, ValueError) as e:
    raise OutputError(f"{path} is not a results file of `ssp-jax eval` ({e}); move it away or "
                      "pass another --out") from None
  found = _kind_of(previous)
  if found not in (None, kind):
    raise OutputError(f"{path} holds {found} results and this is a {kind} evaluation; pass "
                      "another --out")
  return previous


_RUNS_IN_PROCESS = itertools.count(1)


def new_run_id() -> str:
  """A readable id for this run: its start time (UTC, to the second), process id and its number
  among this process's runs (two evaluations in one process within one second stay apart)."""
  return (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
          + f"-{os.getpid()}-{next(_RUNS_IN_PROCESS)}")


def _dataset_of(key: str, entry: Any) -> str:
  return entry.get("dataset", key) if isinstance(entry, dict) else key


def merge(previous: dict[str, Any], entries: dict[str, dict], datasets: Iterable[str],
          run: str, meta: dict) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
  """(entries, meta, replaced): the earlier entries of datasets this run did not evaluate, then
  this run's entries marked `run`; `meta` with `runs` holding the settings of every run still
  referenced (this run's settings also at its top level); the datasets whose earlier results
  this run replaces.

  An entry's dataset is its `dataset` field, else its key (a QA entry is keyed by dataset; a math
  entry by data source, with `dataset` naming the file it came from)."""
  datasets = set(datasets)
  kept, replaced = {}, set()
  for key, entry in previous.items():
    if key in RESERVED:
      continue
    if _dataset_of(key, entry) in datasets:
      replaced.add(_dataset_of(key, entry))
    else:
      kept[key] = entry if "run" in entry else {**entry, "run": "earlier"}
  merged = dict(kept)
  for key, entry in entries.items():
    merged[key] = {**entry, "run": run}
  old_meta = previous.get("meta") or {}
  runs = dict(old_meta.get("runs") or ({"earlier": old_meta} if old_meta else {}))
  runs[run] = dict(meta)
  used = {e["run"] for e in merged.values()}
  out_meta = {**meta, "latest_run": run,   # this run's settings at the top, as before merging
              "runs": {r: m for r, m in runs.items() if r in used}}
  return merged, out_meta, sorted(replaced)


def _atomic_text(path: str, text: str) -> None:
  tmp = f"{path}.tmp-{os.getpid()}"
  with open(tmp, "w", encoding="utf-8") as f:
    f.write(text)
  os.replace(tmp, path)


def write(out_dir: str, results: dict[str, Any], markdown: str,
          preds_by_ds: dict[str, list[dict]]) -> dict[str, str]:
  """Writes this run's predictions files, then results.json and results.md, each atomically;
  returns their paths ({"json", "md", <dataset>: predictions path})."""
  paths = {"json": os.path.join(out_dir, RESULTS_JSON), "md": os.path.join(out_dir, RESULTS_MD)}
  for name, preds in preds_by_ds.items():
    paths[name] = os.path.join(out_dir, f"predictions_{name}.jsonl")
    _atomic_text(paths[name], "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in preds))
  _atomic_text(paths["json"], json.dumps(results, indent=2, ensure_ascii=False))
  _atomic_text(paths["md"], markdown)
  return paths


def say_replaced(replaced: list[str], previous: dict[str, Any], out_dir: str) -> None:
  """One stderr line naming the earlier results this run replaces (never a silent loss)."""
  if not replaced:
    return
  runs = sorted({e.get("run", "earlier") for k, e in previous.items()
                 if k not in RESERVED and _dataset_of(k, e) in replaced})
  print(f"ssp-jax eval: replacing the earlier results of {', '.join(replaced)} in {out_dir} "
        f"(run {', '.join(runs)}); the other datasets' results there are kept", file=sys.stderr)
