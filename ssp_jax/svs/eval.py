"""Math evaluation for SvS: n sampled solutions per problem, mean accuracy and unbiased pass@k per
data source (the paper reports Pass@32).

  ssp-jax eval --config configs/svs_tiny.py --out runs/eval_svs        # builtin:math_sample
  ssp-jax eval --config configs/svs_tiny.py --checkpoint runs/svs_tiny \\
      --data math500=data/math500.jsonl --out runs/eval_svs

(`ssp-jax eval` hands configs with `game = "svs"` to `run_cli` here.) Writes
OUT/predictions_<dataset>.jsonl and merges into OUT/results.json ({source: {"problems",
"samples_per_problem", "acc", "pass@k"..., "dataset", "run"}, "meta": {...}}) and OUT/results.md
as the QA evaluation does (ssp_jax/eval/outputs.py: earlier datasets kept, each marked with its
run). A record's `data_source` field splits a file into sources (the
original's MATH-500 / AIME-2024 / AIME-2025 file); without it the source is the dataset name.

pass@k = 1 - C(n - c, k) / C(n, k) for c correct of n samples (Chen et al. 2021), computed as
1 - prod_{i = n-c+1}^{n} (1 - k / i), which never forms the large binomials.
"""
from __future__ import annotations

import collections
import json
import logging
import os
import time
from typing import Any, Optional, Sequence

import jax
import numpy as np

from ssp_jax.svs import math_grader, prompts
from ssp_jax.svs.data import MathProblem, load_problems

log = logging.getLogger(__name__)


def pass_at_k(n: int, c: int, k: int) -> float:
  """Unbiased pass@k of one problem with c correct among n samples (1 <= k <= n)."""
  if not 0 <= c <= n or not 1 <= k <= n:
    raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
  if n - c < k:
    return 1.0
  return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def load_eval_sets(eval_cfg, datasets: Optional[dict[str, str]] = None
                   ) -> dict[str, list[MathProblem]]:
  """name -> problems of every dataset spec (a JSONL path or builtin:math_sample), subsampled
  to `eval_cfg.limit` with `eval_cfg.seed` (the same hash ranking as the QA evaluation)."""
  from ssp_jax.eval.data import subsample
  specs = dict(datasets if datasets is not None else eval_cfg.datasets)
  if not specs:
    raise ValueError("no eval datasets: set config.eval.datasets or pass --data NAME=FILE")
  out = {}
  for name, spec in specs.items():
    rows = [{"id": p.id, "problem": p} for p in load_problems(spec, name)]
    out[name] = [r["problem"] for r in subsample(rows, eval_cfg.limit, eval_cfg.seed)]
  return out


def score(problems: Sequence[MathProblem], texts: Sequence[str], n: int) -> list[dict]:
  """One record per problem from its n sampled responses (in blocks of n)."""
  out = []
  for j, p in enumerate(problems):
    mine = texts[j * n:(j + 1) * n]
    correct = [math_grader.grade(t, p.answer) for t in mine]
    out.append({"id": p.id, "source": p.source, "problem": p.problem, "answer": p.answer,
                "predictions": [math_grader.extract_answer(t) for t in mine],
                "correct": correct, "num_correct": int(sum(correct)), "responses": list(mine)})
  return out


def summarize(records: Sequence[dict], n: int, ks: Sequence[int]) -> dict[str, Any]:
  """{"problems", "samples_per_problem", "acc", "pass@k" for k in ks}: acc is the mean fraction
  of correct samples (avg@n), pass@k the mean unbiased estimate over problems."""
  out: dict[str, Any] = {"problems": len(records), "samples_per_problem": n,
                         "acc": float(np.mean([r["num_correct"] / n for r in records]))
                         if records else 0.0}
  for k in ks:
    out[f"pass@{k}"] = (float(np.mean([pass_at_k(n, r["num_correct"], k) for r in records]))
                        if records else 0.0)
  return out


def sample(engine, params, problems: Sequence[MathProblem], rng, *, n: int, temperature: float,
           top_p: float, max_new_tokens: Optional[int], batch_size: int = 0,
           on_done=None) -> list[str]:
  """n sampled responses per problem (in blocks of n), `batch_size` problems per engine call;
  `on_done(problems)` after each call (a progress bar's update)."""
  texts: list[str] = []
  step = batch_size if batch_size > 0 else max(1, len(problems))
  for start in range(0, len(problems), step):
    msgs = [prompts.solve_messages(p.problem) for p in problems[start:start + step]
            for _ in range(n)]
    trajs, _ = engine.generate(params, msgs, jax.random.fold_in(rng, start), stop=(),
                               use_search=False, temperature=temperature, top_p=top_p,
                               max_new_tokens=max_new_tokens)
    texts += [t.text for t in trajs]
    if on_done is not None:
      on_done(len(trajs) // n)
  return texts


def run_eval(engine, params, sets: dict[str, Sequence[MathProblem]], eval_cfg, *,
             progress: bool = False, batch_size: Optional[int] = None
             ) -> tuple[dict[str, Any], dict[str, list[dict]]]:
  """(results by source, prediction records by dataset) for every dataset of `sets`; each
  source's summary names its `dataset`. With `progress`, a tqdm bar per dataset (problems);
  `batch_size` (problems per engine call) defaults to `eval_cfg.batch_size`."""
  from ssp_jax.eval.runner import ProgressBar
  rng = jax.random.PRNGKey(eval_cfg.seed)
  n, ks = int(eval_cfg.n), tuple(int(k) for k in eval_cfg.ks)
  by_source: dict[str, list[dict]] = collections.defaultdict(list)
  dataset_of: dict[str, str] = {}
  preds = {}
  for i, (name, problems) in enumerate(sets.items()):
    t0 = time.perf_counter()
    with ProgressBar(len(problems), f"eval {name}", "problem", progress) as bar:
      texts = sample(engine, params, list(problems), jax.random.fold_in(rng, i), n=n,
                     temperature=eval_cfg.temperature, top_p=eval_cfg.top_p,
                     max_new_tokens=eval_cfg.max_new_tokens or None,
                     batch_size=eval_cfg.batch_size if batch_size is None else batch_size,
                     on_done=bar.update)
    preds[name] = score(list(problems), texts, n)
    for r in preds[name]:
      by_source[r["source"] or name].append(r)
      dataset_of.setdefault(r["source"] or name, name)
    log.info("eval %s: %d problems x %d samples (%.1fs)", name, len(problems), n,
             time.perf_counter() - t0)
  return {src: {**summarize(recs, n, ks), "dataset": dataset_of[src]}
          for src, recs in by_source.items()}, preds


def flat_metrics(results: dict[str, Any], prefix: str = "val") -> dict[str, float]:
  """`{prefix}/{source}/{acc|pass@k}` scalars for the metrics writer."""
  return {f"{prefix}/{src}/{k}": float(v) for src, summary in results.items()
          if src != "meta" for k, v in summary.items() if k == "acc" or k.startswith("pass@")}


def write_results(out_dir: str, results: dict, preds: dict[str, list[dict]]) -> str:
  """Writes results.json, results.md and predictions_<dataset>.jsonl into a fresh directory
  (the in-training evaluation's `eval/step_<k>/`); returns the results.json path."""
  os.makedirs(out_dir, exist_ok=True)
  for name, recs in preds.items():
    with open(os.path.join(out_dir, f"predictions_{name}.jsonl"), "w", encoding="utf-8") as f:
      for r in recs:
        f.write(json.dumps(r, ensure_ascii=False) + "\n")
  path = os.path.join(out_dir, "results.json")
  with open(path, "w", encoding="utf-8") as f:
    json.dump(results, f, indent=2, ensure_ascii=False)
  with open(os.path.join(out_dir, "results.md"), "w", encoding="utf-8") as f:
    f.write(results_markdown(results, title="SvS evaluation"))
  return path


def results_markdown(results: dict, title: Optional[str] = None) -> str:
  """A small table, scores x100 as the papers print them; with `title`, the whole results.md
  (a heading, the table, the run that wrote each row when there are several)."""
  srcs = [s for s in results if s != "meta"]
  keys = ["acc"] + sorted({k for s in srcs for k in results[s] if k.startswith("pass@")},
                          key=lambda k: int(k[5:]))
  runs = [results[s].get("run") for s in srcs]
  show_run = len(set(runs)) > 1
  run_col = (" run |", " --- |") if show_run else ("", "")
  lines = ["| source | problems | " + " | ".join(keys) + " |" + run_col[0],
           "| --- | --- | " + " | ".join("---" for _ in keys) + " |" + run_col[1]]
  for s in srcs:
    lines.append(f"| {s} | {results[s]['problems']} | "
                 + " | ".join(f"{100 * results[s][k]:.1f}" for k in keys) + " |"
                 + (f" {results[s].get('run', '')} |" if show_run else ""))
  if title is None:
    return "\n".join(lines)
  samples = sorted({results[s]["samples_per_problem"] for s in srcs})
  head = [f"# {title}", "", "Scores x100: acc is the mean fraction of correct samples ("
          + "/".join(map(str, samples)) + " per problem), pass@k the unbiased estimate "
          "(ssp_jax/svs/eval.py).", ""]
  tail = ([f"\nThese rows come from {len(set(runs))} evaluation runs (column `run`; their "
           "settings: results.json, meta.runs)."] if show_run else [])
  return "\n".join(head + lines + tail) + "\n"


def evaluate(engine, params, sets, eval_cfg, *, out_dir: Optional[str] = None,
             prefix: str = "val") -> dict[str, float]:
  """The in-training validation: `run_eval`, optional files, flat `val/...` metrics."""
  results, preds = run_eval(engine, params, sets, eval_cfg)
  if out_dir:
    write_results(out_dir, results, preds)
  return flat_metrics(results, prefix)


def run_cli(config, specs: dict[str, str], checkpoint: Optional[str], out_dir: str, *,
            closed_book: bool = False, config_path: str = "") -> int:
  """`ssp-jax eval` for an SvS config: loads the policy (`--checkpoint` as for SSP), samples,
  scores, writes OUT/results.json and prints the table. The problems have no search tool, so
  `closed_book` changes nothing; `config_path` is unused."""
  from ssp_jax.eval import outputs
  from ssp_jax.eval.build import load_policy
  from ssp_jax.eval.runner import progress_batch_size
  from ssp_jax.rollout import RolloutEngine
  from ssp_jax.run.components import make_sharder
  previous = outputs.prepare(out_dir, "math")         # an unusable --out before any work
  sets = load_eval_sets(config.eval, specs)           # data errors surface before the model
  sharder = make_sharder(config)
  model_cfg, params, tok, desc = load_policy(config, checkpoint, sharder)
  engine = RolloutEngine(model_cfg, tok, config.rollout, None, sharder)
  progress = bool(config.get("progress", True))
  slots = max(1, int(config.rollout.batch_size) // max(1, int(config.eval.n)))
  results, preds = run_eval(engine, params, sets, config.eval, progress=progress,
                            batch_size=progress_batch_size(config.eval.batch_size, slots,
                                                           progress))
  meta = {"kind": "math", "policy": desc, "data": specs, "n": config.eval.n,
          "ks": list(config.eval.ks), "limit": config.eval.limit,
          "temperature": config.eval.temperature, "top_p": config.eval.top_p}
  run_id = outputs.new_run_id()
  entries, meta, replaced = outputs.merge(previous, results, sets, run_id, meta)
  merged = {**entries, "meta": meta}
  outputs.say_replaced(replaced, previous, out_dir)
  md = results_markdown(merged, title=f"ssp-jax eval: {desc}")
  paths = outputs.write(out_dir, merged, md, preds)
  print(md)
  print(json.dumps({"results": paths["json"], "table": paths["md"], "run": run_id}))
  return 0
