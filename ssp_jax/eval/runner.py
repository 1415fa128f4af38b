"""Runs the solver with search over QA datasets and scores it: the library behind `ssp-jax eval`
and the in-training validation.

  sets = load_eval_sets(config.eval)                       # {name: [example]}, subsampled
  metrics = evaluate(engine, params, sets, max_new_tokens=512, judge=None, out_dir=None)
  # {"val/wiki_sample/em": 0.31, "val/wiki_sample/f1": ..., "val/overall/em": ..., ...}

Each question gets the solver prompt (`ssp_jax.eval.prompts.solver_messages`), one greedy
rollout with search through the rollout engine (stops: `</search>` triggers a search, `</answer>`
ends), and is scored on the last `<answer>...</answer>` of the response: EM and token F1 against
all golden answers and, when a judge is given, the judge verdict (EM short-circuits: an exact
match is correct without a judge call; a judge failure counts as wrong and is counted).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Sequence

import jax

from ssp_jax import metrics
from ssp_jax.eval import data, report
from ssp_jax.eval import prompts
from ssp_jax.eval.prompts import SOLVER_STOPS   # the same stops as the games' solver rollouts
from ssp_jax.types import Trajectory

log = logging.getLogger(__name__)


def load_eval_sets(eval_cfg, datasets: Optional[dict[str, str]] = None) -> dict[str, list[dict]]:
  """Loads and subsamples every dataset of `eval_cfg.datasets` (or of `datasets`, name -> spec)."""
  specs = dict(datasets if datasets is not None else eval_cfg.datasets)
  if not specs:
    raise ValueError("no eval datasets: set config.eval.datasets or pass --data NAME=FILE")
  data_dir = eval_cfg.get("tfds_data_dir", "") or None
  return {name: data.subsample(data.load_dataset(spec, name, data_dir), eval_cfg.limit,
                               eval_cfg.seed)
          for name, spec in specs.items()}


def score(example: dict, traj: Trajectory) -> dict[str, Any]:
  """The prediction record of one question (EM/F1 only; `judge_missing` adds the judge)."""
  prediction = metrics.extract_answer(traj.text)
  golden = example["golden_answers"]
  return {
      "id": example["id"], "question": example["question"], "golden_answers": golden,
      "prediction": prediction,
      "em": metrics.exact_match(prediction, golden),
      "f1": metrics.f1(prediction, golden),
      "num_searches": int(traj.num_searches),
      "num_failed_searches": int(traj.num_failed_searches),
      "length": int(sum(traj.loss_mask)),        # tokens the policy generated
      "response_tokens": len(traj.response_ids),  # incl. spliced observations
      "stop_reason": traj.stop_reason,
      "queries": list(traj.queries),
      "response": traj.text,
  }


def add_judge(judge, preds: list[dict]) -> None:
  """Sets `judge` on every record: 1.0 for an exact match, else the judge's verdict on records
  that have a prediction (one batched call), 0.0 without a prediction or on a judge error."""
  for p in preds:
    p["judge"] = 1.0 if p["em"] == 1.0 else 0.0
  idx = [i for i, p in enumerate(preds) if p["em"] < 1.0 and p["prediction"]]
  if not idx:
    return
  try:
    verdicts = judge.judge([preds[i]["question"] for i in idx],
                           [preds[i]["prediction"] for i in idx],
                           [preds[i]["golden_answers"] for i in idx])
  except Exception as e:  # noqa: BLE001 (a judge outage must not lose the eval run)
    log.warning("judge failed on %d predictions (scored wrong): %r", len(idx), e)
    for i in idx:
      preds[i]["judge_error"] = True
    return
  for i, ok in zip(idx, verdicts):
    preds[i]["judge"] = float(bool(ok))


def rollouts(engine, params, examples: Sequence[dict], rng: jax.Array, *, batch_size: int,
             max_new_tokens: Optional[int],
             on_done: Optional[Callable[[int], None]] = None,
             closed_book: bool = False) -> list[Trajectory]:
  """Greedy solver rollouts with search, `batch_size` questions per engine call (<= 0: all in
  one call), in order; `on_done(n)` after each call (a progress bar's update). `closed_book`:
  the question without the search tool (`prompts.closed_book_messages`), what the policy
  recalls."""
  trajs: list[Trajectory] = []
  step = batch_size if batch_size > 0 else max(1, len(examples))
  for start in range(0, len(examples), step):
    chunk = examples[start:start + step]
    make = prompts.closed_book_messages if closed_book else prompts.solver_messages
    msgs = [make(e["question"]) for e in chunk]
    out, _ = engine.generate(params, msgs, jax.random.fold_in(rng, start),
                             stop=("</answer>",) if closed_book else SOLVER_STOPS,
                             use_search=not closed_book, temperature=0.0,
                             max_new_tokens=max_new_tokens)
    if len(out) != len(chunk):
      raise RuntimeError(f"rollout engine returned {len(out)} trajectories for {len(chunk)} "
                         "prompts")
    trajs += out
    if on_done is not None:
      on_done(len(out))
  return trajs


def run_dataset(engine, params, examples: Sequence[dict], rng: jax.Array, *, batch_size: int,
                max_new_tokens: Optional[int], judge=None,
                on_done: Optional[Callable[[int], None]] = None,
                closed_book: bool = False) -> list[dict]:
  """Rollouts + scores for one dataset: one prediction record per example, in order."""
  trajs = rollouts(engine, params, examples, rng, batch_size=batch_size,
                   max_new_tokens=max_new_tokens, on_done=on_done, closed_book=closed_book)
  preds = [score(e, t) for e, t in zip(examples, trajs)]
  if judge is not None:
    add_judge(judge, preds)
  return preds


def run_eval(engine, params, datasets: dict[str, Sequence[dict]], *, batch_size: int = 0,
             max_new_tokens: Optional[int] = None, judge=None, seed: int = 0,
             meta: Optional[dict] = None, progress: bool = False, closed_book: bool = False
             ) -> tuple[dict[str, Any], dict[str, list[dict]]]:
  """Runs every dataset; returns (results dict as in results.json, predictions per dataset).
  With `progress`, one tqdm bar per dataset on stderr (questions done), advanced after each
  engine call of `batch_size` questions."""
  rng = jax.random.PRNGKey(seed)
  preds_by_ds, per_ds = {}, {}
  for k, (name, examples) in enumerate(datasets.items()):
    t0 = time.perf_counter()
    with ProgressBar(len(examples), f"eval {name}", "question", progress) as bar:
      preds = run_dataset(engine, params, list(examples), jax.random.fold_in(rng, k),
                          batch_size=batch_size, max_new_tokens=max_new_tokens, judge=judge,
                          on_done=bar.update, closed_book=closed_book)
    preds_by_ds[name], per_ds[name] = preds, report.summarize(preds)
    per_ds[name]["seconds"] = round(time.perf_counter() - t0, 3)
    log.info("eval %s: n=%d em=%.3f f1=%.3f (%.1fs)", name, len(preds), per_ds[name]["em"],
             per_ds[name]["f1"], per_ds[name]["seconds"])
  return report.results_dict(per_ds, meta), preds_by_ds


def progress_batch_size(batch_size: int, slots: int, progress: bool) -> int:
  """Questions per engine call for the `ssp-jax eval` command: `batch_size` when set; else,
  with a progress bar, 4 x the engine's decode slots (the bar moves every few minutes at most
  on a CPU, and the engine still refills slots within a call); else 0 (one call a dataset)."""
  if batch_size > 0 or not progress:
    return batch_size
  return 4 * max(1, int(slots))


class ProgressBar:
  """A tqdm bar on stderr whose log lines print above it (ssp_jax/quiet.py), or a no-op."""

  def __init__(self, total: int, desc: str, unit: str, enabled: bool):
    self.enabled = enabled
    if enabled:
      from tqdm import tqdm

      from ssp_jax.quiet import logs_above_bars
      self.bar = tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True)
      self.restore = logs_above_bars(True)

  def update(self, n: int) -> None:
    if self.enabled:
      self.bar.update(n)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    if self.enabled:
      self.bar.close()
      self.restore()


def flat_metrics(results: dict[str, Any], prefix: str = "val") -> dict[str, float]:
  """`{prefix}/{dataset}/{metric}` and `{prefix}/{group}/{metric}` scalars for the logger."""
  out = {}
  for name, summary in results.items():
    if name in report.RESERVED:
      continue
    for key in report.SCORES + ("searches_mean", "length_mean", "no_answer_rate"):
      if key in summary:
        out[f"{prefix}/{name}/{key}"] = float(summary[key])
  for group, summary in results.get("averages", {}).items():
    for key in report.SCORES:
      if key in summary:
        out[f"{prefix}/{group}/{key}"] = float(summary[key])
  return out


def evaluate(engine, params, datasets: dict[str, Sequence[dict]], *, batch_size: int = 0,
             max_new_tokens: Optional[int] = None, judge=None, seed: int = 0,
             out_dir: Optional[str] = None, meta: Optional[dict] = None,
             prefix: str = "val") -> dict[str, float]:
  """The in-training validation: runs `run_eval` and returns flat `val/...` metrics.

  Args:
    engine: a `ssp_jax.rollout.RolloutEngine` (anything with its `generate`).
    params: the policy params to evaluate.
    datasets: name -> examples, e.g. from `load_eval_sets(config.eval)` (loaded once).
    max_new_tokens: response budget per rollout (None: the rollout config's).
    judge: optional `ssp_jax.ssp.rewards.Judge` (adds the `judge` metric).
    out_dir: when given, also writes results.json, results.md and predictions_*.jsonl there.
  """
  results, preds = run_eval(engine, params, datasets, batch_size=batch_size,
                            max_new_tokens=max_new_tokens, judge=judge, seed=seed, meta=meta)
  if out_dir:
    report.write_results(out_dir, results, preds)
  return flat_metrics(results, prefix)
