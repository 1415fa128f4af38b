"""`ssp-jax eval` for SSP and Search-R1 configs: the solver with search on QA benchmarks (the
paper's Table 1; ssp_jax/eval does the work, this supplies the game's judge). See docs/eval.md."""
from __future__ import annotations

import json
import sys
from typing import Optional


def probe_eval_judge(config) -> None:
  """With `eval.judge="ssp"` and a URL as `ssp.judge.source`, one tiny request before the model
  loads; raises a RuntimeError (RemoteError) naming the field and the fix when it fails."""
  from ssp_jax.ssp import build, remote
  url = config.ssp.judge.source if config.eval.get("judge") == "ssp" else ""
  if url and remote.is_url(url):
    build.probe_endpoints(config, [("ssp.judge.source", url)])


def run_cli(config, specs: dict[str, str], checkpoint: Optional[str], out_dir: str, *,
            closed_book: bool = False, config_path: str = "") -> int:
  """Loads the policy (`--checkpoint`, else `config.model.path`), answers every question of
  `specs` (name -> data spec), merges the scores into OUT/results.json and prints the table."""
  from ssp_jax.eval import build, outputs, report, runner
  from ssp_jax.ssp.build import eval_judge
  try:
    previous = outputs.prepare(out_dir, "qa")          # an unusable --out before any work
    sets = runner.load_eval_sets(config.eval, specs)   # data errors surface before the model
    probe_eval_judge(config)                           # and an endpoint that does not answer
  except (OSError, ValueError, ImportError, RuntimeError) as e:
    print(f"ssp-jax eval: {e}", file=sys.stderr)
    return 2
  comp = build.build(config, checkpoint, make_judge=eval_judge)
  meta = {"kind": "qa", "policy": comp.policy, "config": config_path, "data": specs,
          "limit": config.eval.limit, "seed": config.eval.seed,
          "max_new_tokens": config.eval.max_new_tokens or config.rollout.max_response_tokens,
          "judge": config.eval.judge or None, "closed_book": bool(closed_book)}
  progress = bool(config.get("progress", True))
  results, preds = runner.run_eval(
      comp.engine, comp.params, sets,
      batch_size=runner.progress_batch_size(config.eval.batch_size, config.rollout.batch_size,
                                            progress),
      max_new_tokens=config.eval.max_new_tokens or None, judge=comp.judge,
      seed=config.eval.seed, progress=progress, closed_book=bool(closed_book))
  run_id = outputs.new_run_id()
  per_ds, meta, replaced = outputs.merge(previous, report.per_dataset(results), sets, run_id,
                                         meta)
  merged = report.results_dict(per_ds, meta)
  title = f"ssp-jax eval: {comp.policy}"
  outputs.say_replaced(replaced, previous, out_dir)
  paths = outputs.write(out_dir, merged, report.results_markdown(merged, title), preds)
  print(report.results_markdown(merged, title))
  print(json.dumps({"results": paths["json"], "table": paths["md"], "run": run_id}))
  return 0
