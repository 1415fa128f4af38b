"""Per-dataset summaries, the Table-1 averages, and the files an evaluation writes.

results.json:
  {"<dataset>": {"n", "em", "f1", ["judge"], "searches_mean", "length_mean", ...}, ...,
   "averages": {"general_qa": {...}, "multi_hop": {...}, "overall": {...}},
   "meta": {...}}
Scores are fractions in [0, 1]; results.md shows them x100 like the paper's Table 1. Averages are
macro means over datasets (the paper's "Avg." column): general QA over nq/triviaqa/popqa,
multi-hop over hotpotqa/2wikimultihopqa/musique/bamboogle, overall over those seven when any is
present, else over every evaluated dataset. A group is left out when none of its datasets ran.
"""
from __future__ import annotations

import json
import os
from typing import Any, Optional, Sequence

GENERAL_QA = ("nq", "triviaqa", "popqa")
MULTI_HOP = ("hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
TABLE1 = GENERAL_QA + MULTI_HOP
DISPLAY = {"nq": "NQ", "triviaqa": "TriviaQA", "popqa": "PopQA", "hotpotqa": "HotpotQA",
           "2wikimultihopqa": "2Wiki", "musique": "MuSiQue", "bamboogle": "Bamboogle"}
RESERVED = ("averages", "meta")
SCORES = ("judge", "em", "f1")


def _mean(xs: Sequence[float]) -> float:
  return float(sum(xs) / len(xs)) if xs else 0.0


def summarize(preds: Sequence[dict]) -> dict[str, Any]:
  """One dataset's numbers from its prediction records (see `runner.score`)."""
  out = {"n": len(preds),
         "em": _mean([p["em"] for p in preds]),
         "f1": _mean([p["f1"] for p in preds])}
  if preds and all("judge" in p for p in preds):
    out["judge"] = _mean([p["judge"] for p in preds])
    out["judge_errors"] = int(sum(p.get("judge_error", False) for p in preds))
  out["searches_mean"] = _mean([p["num_searches"] for p in preds])
  out["length_mean"] = _mean([p["length"] for p in preds])
  out["no_answer_rate"] = _mean([float(p["prediction"] is None) for p in preds])
  return out


def _group_mean(per_ds: dict[str, dict], names: Sequence[str]) -> Optional[dict[str, Any]]:
  present = [n for n in names if n in per_ds]
  if not present:
    return None
  out: dict[str, Any] = {"datasets": present}
  for key in SCORES + ("searches_mean", "length_mean"):
    if all(key in per_ds[n] for n in present):
      out[key] = _mean([per_ds[n][key] for n in present])
  return out


def averages(per_ds: dict[str, dict]) -> dict[str, dict]:
  """The general-QA, multi-hop and overall macro averages (groups with no dataset are left out)."""
  overall_names = [n for n in TABLE1 if n in per_ds] or list(per_ds)
  groups = {"general_qa": _group_mean(per_ds, GENERAL_QA),
            "multi_hop": _group_mean(per_ds, MULTI_HOP),
            "overall": _group_mean(per_ds, overall_names)}
  return {k: v for k, v in groups.items() if v is not None}


def per_dataset(results: dict[str, Any]) -> dict[str, dict]:
  """The dataset entries of a results dict (without `averages` and `meta`)."""
  return {k: v for k, v in results.items() if k not in RESERVED}


def results_dict(per_ds: dict[str, dict], meta: Optional[dict] = None) -> dict[str, Any]:
  bad = [n for n in per_ds if n in RESERVED]
  if bad:
    raise ValueError(f"dataset name(s) {bad} are reserved in results.json; rename them in --data")
  out: dict[str, Any] = dict(per_ds)
  out["averages"] = averages(per_ds)
  out["meta"] = dict(meta or {})
  return out


def _cell(summary: Optional[dict], key: str) -> str:
  if summary is None or key not in summary:
    return "–"
  return f"{100 * summary[key]:.1f}"


def results_markdown(results: dict[str, Any], title: str = "Evaluation") -> str:
  """A table laid out like the paper's Table 1 (rows: metrics; columns: datasets, x100) with
  only the columns that have data (Table 1's datasets in its order, "Avg." when more than one
  dataset ran, then any other datasets), then search/length statistics and, when the datasets
  come from several `ssp-jax eval` runs, the run that wrote each."""
  per_ds = {k: v for k, v in results.items() if k not in RESERVED}
  avg = results.get("averages", {})
  table1 = [n for n in TABLE1 if n in per_ds]
  extra = [n for n in per_ds if n not in TABLE1]
  with_avg = len(per_ds) > 1 and "overall" in avg
  metrics = [m for m in SCORES if any(m in s for s in per_ds.values())]
  cols = [DISPLAY[n] for n in table1] + (["Avg."] if with_avg else []) + extra
  runs = [s.get("run") for s in per_ds.values()]
  lines = [f"# {title}", "",
           "Scores x100. General QA: NQ, TriviaQA, PopQA; multi-hop QA: HotpotQA, 2Wiki, "
           "MuSiQue, Bamboogle; Avg. is the macro average (see ssp_jax/eval/report.py).", "",
           "| Metric | " + " | ".join(cols) + " |",
           "|---" * (len(cols) + 1) + "|"]
  for m in metrics:
    cells = [_cell(per_ds.get(n), m) for n in table1]
    if with_avg:
      cells.append(_cell(avg.get("overall"), m))
    cells += [_cell(per_ds[n], m) for n in extra]
    lines.append(f"| {m.upper() if m != 'judge' else 'Judge'} | " + " | ".join(cells) + " |")
  show_run = any(runs)
  lines += ["", "| Dataset | n | searches (mean) | response tokens (mean) | no answer |"
            + (" run |" if show_run else ""),
            "|---|---|---|---|---|" + ("---|" if show_run else "")]
  for n, s in per_ds.items():
    lines.append(f"| {n} | {s['n']} | {s['searches_mean']:.2f} | {s['length_mean']:.1f} | "
                 f"{100 * s.get('no_answer_rate', 0.0):.1f}% |"
                 + (f" {s.get('run', '')} |" if show_run else ""))
  if len(set(runs)) > 1:
    lines.append(f"\nThese datasets come from {len(set(runs))} evaluation runs (column `run`; "
                 "their settings: results.json, meta.runs); averages mix them.")
  for g in ("general_qa", "multi_hop"):
    if g in avg:
      vals = ", ".join(f"{m} {100 * avg[g][m]:.1f}" for m in metrics if m in avg[g])
      lines.append(f"\n{g.replace('_', ' ')} average ({', '.join(avg[g]['datasets'])}): {vals}")
  return "\n".join(lines) + "\n"


def write_predictions(path: str, preds: Sequence[dict]) -> None:
  with open(path, "w", encoding="utf-8") as f:
    for p in preds:
      f.write(json.dumps(p, ensure_ascii=False) + "\n")


def write_results(out_dir: str, results: dict[str, Any], preds_by_ds: dict[str, list[dict]],
                  title: str = "Evaluation") -> dict[str, str]:
  """Writes results.json, results.md and predictions_<dataset>.jsonl; returns their paths."""
  os.makedirs(out_dir, exist_ok=True)
  paths = {"json": os.path.join(out_dir, "results.json"),
           "md": os.path.join(out_dir, "results.md")}
  with open(paths["json"], "w", encoding="utf-8") as f:
    json.dump(results, f, indent=2, ensure_ascii=False)
  with open(paths["md"], "w", encoding="utf-8") as f:
    f.write(results_markdown(results, title))
  for name, preds in preds_by_ds.items():
    paths[name] = os.path.join(out_dir, f"predictions_{name}.jsonl")
    write_predictions(paths[name], preds)
  return paths
