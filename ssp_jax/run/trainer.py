"""The training loop behind `ssp-jax train`, the same for every game: a game's entry
(ssp_jax/<game>/entry.py or trainer.py) calls `train` with its config checks, its `build`
(-> `ssp_jax.run.components.Components`, whose `game` plays the steps) and its progress-bar fields.

Writes into `config.workdir`:
  metrics.jsonl        one JSON object per step (see docs/training.md for the keys)
  tb/                  TensorBoard events (tensorboardX)
  samples/samples_<step>.jsonl   inspection records of the step (the game's `samples`)
  checkpoints/<step>/  orbax checkpoints (params, optimizer state, the game's extra state)

Restarting the same command resumes from the latest checkpoint: the metrics and sample files are
cut back to that step (what a crashed step wrote is redone, never duplicated), and every random
draw of a step is derived from (seed, step), so the resumed run continues as the original would.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from typing import Any, Callable

import jax
import numpy as np

from ssp_jax.quiet import logs_above_bars
from ssp_jax.rl.config import BY_ROLE
from ssp_jax.rl.roles import RoleTable
from ssp_jax.rl.schedule import role_update_counts, run_updates, step_batch
from ssp_jax.rollout import compiles
from ssp_jax.run.components import Components

log = logging.getLogger(__name__)


def _mean_update_metrics(updates: list[dict]) -> dict[str, float]:
  """Averages the learner's per-mini-batch metrics; `kl` is the KL loss (0 without KL)."""
  if not updates:
    return {"loss": 0.0, "kl": 0.0, "entropy": 0.0, "grad_norm": 0.0, "updates": 0.0}
  keys = {k for u in updates for k in u if not k.startswith("role_")}
  out = {k: float(np.mean([u[k] for u in updates if k in u])) for k in keys}
  out["kl"] = out.pop("kl_loss", 0.0)
  out["updates"] = float(len(updates))
  return out


def truncate_jsonl(path: str, last_step: int) -> int:
  """Drops lines whose `step` is > last_step (written after the checkpoint we resume from)."""
  if not os.path.exists(path):
    return 0
  with open(path, encoding="utf-8") as f:
    lines = f.readlines()
  keep = []
  for line in lines:
    try:
      if json.loads(line).get("step", 0) <= last_step:
        keep.append(line)
    except json.JSONDecodeError:
      pass  # a half-written last line of a killed run
  with open(path + ".tmp", "w", encoding="utf-8") as f:
    f.writelines(keep)
  os.replace(path + ".tmp", path)
  return len(lines) - len(keep)


def _remove_later_samples(sample_dir: str, last_step: int) -> None:
  if not os.path.isdir(sample_dir):
    return
  for name in os.listdir(sample_dir):
    if name.startswith("samples_") and name.endswith(".jsonl"):
      try:
        if int(name[len("samples_"):-len(".jsonl")]) > last_step:
          os.remove(os.path.join(sample_dir, name))
      except ValueError:
        continue


class Outputs:
  """metrics.jsonl, TensorBoard and the sample files of one run."""

  def __init__(self, workdir: str, start_step: int, tensorboard: bool = True,
               enabled: bool = True):
    self.workdir, self.enabled = workdir, enabled   # only process 0 writes on multi-host runs
    self.tb = None
    if not enabled:
      return
    self.metrics_path = os.path.join(workdir, "metrics.jsonl")
    self.sample_dir = os.path.join(workdir, "samples")
    os.makedirs(self.sample_dir, exist_ok=True)
    dropped = truncate_jsonl(self.metrics_path, start_step)
    if dropped:
      log.info("dropped %d metric lines after step %d (they are redone)", dropped, start_step)
    _remove_later_samples(self.sample_dir, start_step)
    if tensorboard:
      from tensorboardX import SummaryWriter
      self.tb = SummaryWriter(os.path.join(workdir, "tb"), purge_step=start_step + 1)

  def write(self, step: int, metrics: dict, samples: list[dict]) -> None:
    if not self.enabled:
      return
    rec = {"step": step, **{k: v for k, v in sorted(metrics.items())}}
    with open(self.metrics_path, "a", encoding="utf-8") as f:
      f.write(json.dumps(rec) + "\n")
    if step > 0:   # step 0 is the starting policy's evaluation (eval.at_start): no samples
      with open(os.path.join(self.sample_dir, f"samples_{step}.jsonl"), "w",
                encoding="utf-8") as f:
        for s in samples:
          f.write(json.dumps(s, ensure_ascii=False, default=str) + "\n")
    if self.tb is not None:
      for k, v in metrics.items():
        if isinstance(v, (int, float)) and np.isfinite(v):
          self.tb.add_scalar(k, v, step)
      self.tb.flush()

  def close(self) -> None:
    if self.tb is not None:
      self.tb.close()


def train_one_step(c: Components, step: int, key) -> tuple[dict, list[dict]]:
  """Plays step `step` (0-based) and applies the update; returns (metrics, samples)."""
  params = c.learner.state["params"]
  out = c.game.play(params, step, key, frozen_params=c.frozen_params)
  t0 = time.perf_counter()
  updates, adv = [], np.zeros(0, np.float32)
  rl = c.config.rl
  if out.trajectories:   # advantages from each role's rl.roles entry, the game's update order
    table = RoleTable.from_config(rl, c.game.ROLES)
    batch, adv = step_batch(table, out.trajectories, out.rewards, out.roles, out.prompt_index,
                            bucket=rl.bucket, max_len=rl.max_len, pad_id=c.pad_id)
    updates = run_updates(c.learner, batch, rl.update_schedule, table, c.game.UPDATE_ORDER)
  metrics = dict(out.metrics)
  metrics.update(_mean_update_metrics(updates))
  if rl.update_schedule in BY_ROLE:
    metrics.update(role_update_counts(updates, c.game.UPDATE_ORDER))
  metrics["time/update"] = time.perf_counter() - t0
  metrics["advantage/mean"] = float(np.mean(adv)) if adv.size else 0.0
  return metrics, out.samples


def latest_checkpoint(workdir: str):
  """The newest committed checkpoint step under workdir/checkpoints, or None (cheap: no model)."""
  root = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(root):
    return None
  steps = [int(d) for d in os.listdir(root)
           if d.isdigit() and os.path.isdir(os.path.join(root, d))]
  return max(steps, default=None)


class StopOnSignal:
  """While active, the first SIGTERM or SIGINT only sets `signum` (the loop stops at the next
  step boundary, writes a checkpoint and says where to resume); a second one stops at once.
  Installed only from the main thread (signal handlers can be set nowhere else)."""

  SIGNALS = (signal.SIGTERM, signal.SIGINT)

  def __init__(self):
    self.signum = None
    self.deferring = False        # set once the loop runs; before (index build, warm start,
    self._old = {}                # restore) there is no step to finish: stop at once

  def _handle(self, signum, frame):
    if not self.deferring:
      self.signum = signum
      raise KeyboardInterrupt(f"{signal.Signals(signum).name} before the first step")
    if self.signum is not None:   # second signal: give up on the clean stop
      raise KeyboardInterrupt(f"second {signal.Signals(signum).name}")
    self.signum = signum
    log.warning("received %s: stopping after the current step (send it again to stop now)",
                signal.Signals(signum).name)

  @property
  def exit_code(self) -> int:
    return 128 + int(self.signum)

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      self._old = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
    return self

  def __exit__(self, *exc):
    for s, old in self._old.items():
      signal.signal(s, old)
    return False


def train(config, *, validate: Callable, build_fn: Callable[[Any], Components], desc: str,
          progress: dict[str, str]) -> int:
  """Runs (or resumes) training to `config.total_steps`; returns the exit code.

  validate(config) raises a ConfigError before anything is built; build_fn(config) returns the
  run's Components; `desc` names the progress bar and `progress` maps the metric keys it shows
  to their short names (`ssp_jax/ssp/entry.py`)."""
  validate(config)
  done = latest_checkpoint(config.workdir)
  if done is not None and done >= int(config.total_steps):
    log.info("%s already has checkpoint %d >= total_steps=%d; nothing to do", config.workdir,
             done, config.total_steps)
    return 0
  postfix = lambda m: {short: f"{m.get(k, 0.0):.3g}" for k, short in progress.items()}
  with StopOnSignal() as stop:
    return _train_loop(config, build_fn, desc, postfix, stop)


def _train_loop(config, build_fn, desc, postfix, stop: StopOnSignal) -> int:
  compiles.install()   # each step's metrics count the XLA compiles it caused
  c = build_fn(config)
  stop.deferring = True
  start = c.start_step
  total = int(config.total_steps)
  outputs = Outputs(config.workdir, start, tensorboard=config.tensorboard,
                    enabled=jax.process_index() == 0)
  key = jax.random.PRNGKey(config.seed)
  from tqdm import tqdm
  bar = tqdm(total=total, initial=start, desc=desc, unit="step", dynamic_ncols=True,
             disable=not config.progress or jax.process_index() != 0)
  restore_logs = logs_above_bars(not bar.disable)   # log lines print above the bar
  code = 0
  try:
    if start == 0 and c.evaluator is not None and config.eval.get("at_start", False):
      outputs.write(0, c.evaluator(c.learner.state["params"], 0), [])   # the curve's start
    for step in range(start, total):
      if stop.signum is not None:
        return _stopped(c, stop, step)
      t0, compiled0 = time.perf_counter(), compiles.snapshot()
      metrics, samples = train_one_step(c, step, key)
      metrics["time/step"] = time.perf_counter() - t0
      n_compiled, compile_s, compiled_names = compiles.since(compiled0)
      metrics["compile/count"] = float(n_compiled)   # XLA programs this step compiled, and
      metrics["time/compile"] = compile_s             # their seconds (ahead threads included)
      if n_compiled and step > start:   # a later step that compiles is a cost worth naming
        log.info("step %d compiled %d programs (%.1f s): %s", step + 1, n_compiled, compile_s,
                 ", ".join(f"{k} x{v}" for k, v in sorted(compiled_names.items())))
      done = step + 1
      for rec in samples:
        rec["step"] = done
      if c.evaluator is not None and config.eval.every_steps and \
          done % config.eval.every_steps == 0:
        metrics.update(c.evaluator(c.learner.state["params"], done))
      metrics.update(c.learner_scalars())
      outputs.write(done, metrics, samples)
      c.checkpointer.save(done, c.learner.state, force=done == total)
      bar.update(1)
      bar.set_postfix(postfix(metrics))
      if c.learner.should_stop():
        c.checkpointer.save(done, c.learner.state, force=True)
        log.error("%s", c.nonfinite_message())
        code = 3
        break
      if stop.signum is not None and done < total:
        return _stopped(c, stop, done)
  finally:
    bar.close()
    restore_logs()
    outputs.close()
    c.close()
  return code


def _stopped(c, stop: StopOnSignal, done: int) -> int:
  """After a signal: checkpoint the completed steps, say where to resume, exit 128+signum."""
  if done > c.start_step:
    c.checkpointer.save(done, c.learner.state, force=True)
    c.checkpointer.wait()
  name = signal.Signals(stop.signum).name
  where = (f"checkpoint {done} in {c.checkpointer.directory}" if done in
           c.checkpointer.all_steps() else f"no new checkpoint (resumes from step {done})")
  log.error("stopped by %s after step %d: %s; run the same command again to resume",
            name, done, where)
  return stop.exit_code
