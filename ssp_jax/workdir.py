"""What a training workdir remembers of its starts, and the check that a new start fits the
checkpoints already there (before any model is loaded).

Layout (written by process 0; nothing is ever rewritten):
  config.json                          the config of the start that created the workdir
  configs/start-<NNNN>-<UTC time>.json the resolved config of every start, 0001 first
  starts.jsonl                         one line per start: number, UTC time, its config file,
                                       the latest checkpoint then, the model file's stamp
                                       (size, mtime), the fields changed (old, new)

A new start is compared with the latest recorded one (a workdir from before this layout: its
config.json), and its CHECKPOINT_FIELDS with the start that wrote the newest checkpoint (a start
refused after it was recorded wrote nothing and is not what the next start is held to). Where checkpoints exist, a change of a CHECKPOINT_FIELDS field (the model, the
master-param dtype, the game) would make them unrestorable or another run's, so the start is
refused (`WorkdirMismatch`, one line naming old -> new and the fix) and nothing is written or
moved; `total_steps` (raised to train on) is logged at INFO; any other change (rl.lr, seed, ...)
resumes with one warning listing the fields, and the start is recorded. Whatever the record
says, the newest checkpoint's own model config and param dtype (read from metadata) must fit
the model at model.path and rl.param_dtype (read unless the model file's stamp is the last
start's), or the start is refused the same way: this catches
a model whose files changed under the same path, and a workdir written before this layout
(config.json alone, which every start used to rewrite, so that a change against it is only
warned about). `Checkpointer.restore_newest_intact` checks the saved tree once more
(`CheckpointMismatch`) for what metadata could not tell.

  check = check_start(config)          # raises WorkdirMismatch; reads only
  record_start(config, check)          # process 0
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
from typing import Any, Optional

from ssp_jax.run import games

log = logging.getLogger(__name__)

CONFIG = "config.json"
CONFIGS = "configs"
STARTS = "starts.jsonl"
_START_RE = re.compile(r"^start-(\d+)-.*\.json$")
# Fields whose change makes the checkpoints another tree or another run's: model.path (the
# architecture, i.e. the shapes of params and AdamW moments, and the tokenizer), rl.param_dtype
# (dtype of the master params and moments) and game (the saved components: SSP's replay buffer,
# SvS's data position). The optimizer is always clip + AdamW (no choice changes its state tree)
# and the mesh is not one: a restore reshards.
CHECKPOINT_FIELDS = ("model.path", "rl.param_dtype", "game")
CONTINUE_FIELDS = ("total_steps",)   # raised to train on: logged at INFO, not warned about
IGNORED_FIELDS = ("workdir",)        # the same directory, however it was spelled
DEFAULTS = {"game": games.DEFAULT}   # SSP configs have no `game` field


class WorkdirMismatch(ValueError):
  """The new config changes a field the workdir's checkpoints depend on."""


@dataclasses.dataclass
class StartCheck:
  """What `check_start` found: the latest checkpoint, the recorded config it compared with
  (None on a fresh workdir), the changed fields as {dotted name: (old, new)}, and the stamp of
  the model at model.path (`model_stamp`)."""
  workdir: str
  latest_checkpoint: Optional[int]
  recorded_path: Optional[str]
  changes: dict[str, tuple[Any, Any]]
  model_stamp: Optional[list] = None


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
  """{"rl.lr": 1e-6, ...}: the leaves of a JSON config as dotted names (lists are leaves)."""
  if not isinstance(tree, dict):
    return {prefix: tree}
  out: dict[str, Any] = {}
  for k, v in tree.items():
    out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
  return out


def config_json(config) -> dict:
  """The config as the JSON written to the workdir (tuples become lists)."""
  return json.loads(config.to_json_best_effort())


def _start_files(workdir: str) -> list[tuple[int, str]]:
  """(number, path) of every recorded start, oldest first."""
  root = os.path.join(workdir, CONFIGS)
  if not os.path.isdir(root):
    return []
  found = [(int(m.group(1)), os.path.join(root, n)) for n in os.listdir(root)
           if (m := _START_RE.match(n))]
  return sorted(found)


def latest_config(workdir: str) -> Optional[tuple[str, dict]]:
  """(path, config dict) of the newest readable start record, else config.json, else None."""
  candidates = [p for _, p in reversed(_start_files(workdir))]
  candidates.append(os.path.join(workdir, CONFIG))
  for path in candidates:
    try:
      with open(path, encoding="utf-8") as f:
        return path, json.load(f)
    except FileNotFoundError:
      continue
    except (OSError, ValueError) as e:   # a record cut short: compare with the one before
      log.warning("cannot read %s (%s); comparing with the start before it", path, e)
  return None


def run_tokenizer_source(ckpt_dir: str) -> str:
  """The model path the run that wrote `ckpt_dir` started from (`model.path` of its workdir's
  latest start record, else its config.json; "" = the embedded default), for the tokenizer of
  an export."""
  workdir = os.path.dirname(os.path.abspath(ckpt_dir))
  recorded = latest_config(workdir)
  if recorded is None:
    raise FileNotFoundError(f"cannot tell which tokenizer {ckpt_dir!r} was trained with: no "
                            f"{os.path.join(workdir, 'config.json')}; pass --tokenizer "
                            "HF_DIR_OR_GGUF")
  return (recorded[1].get("model") or {}).get("path") or ""


def latest_checkpoint(workdir: str) -> Optional[int]:
  """The newest committed checkpoint step under workdir/checkpoints, or None (no orbax)."""
  from ssp_jax.run.trainer import latest_checkpoint as newest
  return newest(workdir)


def _same(name: str, old: Any, new: Any) -> bool:
  if old == new:
    return True
  if name == "model.path" and old and new and isinstance(old, str) and isinstance(new, str):
    real = lambda p: os.path.realpath(os.path.expanduser(p))
    return real(old) == real(new)   # "./m" and "/abs/m" from the same directory
  return False


def diff_configs(old: dict, new: dict) -> dict[str, tuple[Any, Any]]:
  """{dotted name: (old, new)} of the fields that differ (absent: None), ignored ones aside."""
  a, b = {**DEFAULTS, **flatten(old)}, {**DEFAULTS, **flatten(new)}
  return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b))
          if k not in IGNORED_FIELDS and not _same(k, a.get(k), b.get(k))}


def _show(v: Any, limit: int = 80) -> str:
  text = repr(v)
  return text if len(text) <= limit else text[:limit] + "..."


def _changes_text(changes: dict[str, tuple[Any, Any]]) -> str:
  return ", ".join(f"{k} {_show(o)} -> {_show(n)}" for k, (o, n) in changes.items())


def _model_config(path: str):
  """The ModelConfig of an HF directory or a .gguf file ("" = the embedded default), read from
  its metadata only (no weights)."""
  from models import checkpoint, gguf_io, hf_io
  path = os.path.expanduser(path) if path else checkpoint.default_model_path()
  if os.path.isdir(path):
    return hf_io.read_hf_config(path)
  return gguf_io.config_from_gguf(gguf_io._reader(path))


def checkpoint_fit(workdir: str, step: int, config) -> list[str]:
  """'field saved -> this run' for each way checkpoint `step` does not fit `config`: the shape
  fields of its model (its saved model config against the one at model.path, both read from
  metadata, no weights) and rl.param_dtype (its params' dtype). [] when it fits or cannot be
  told (an unreadable checkpoint or model: the restore then checks the saved tree itself)."""
  import jax.numpy as jnp
  from ssp_jax.checkpoint_fit import model_shape_changes
  from ssp_jax.checkpointing import Checkpointer
  try:
    ck = Checkpointer(os.path.join(workdir, "checkpoints"), async_save=False)
    try:
      saved_cfg, leaves = ck.saved_model_config(step), ck.saved_leaves(step)
    finally:
      ck.close()
    out = model_shape_changes(saved_cfg, _model_config(config.model.path or ""))
    dtypes = {v[1] for k, v in leaves.items() if k.startswith("params/") and v}
    want = jnp.dtype(config.rl.param_dtype).name
    if len(dtypes) == 1 and want not in dtypes:
      out.append(f"rl.param_dtype {dtypes.pop()} -> {want}")
  except Exception as e:  # best effort, see above
    log.debug("cannot tell whether checkpoint %d fits: %s", step, e)
    return []
  return out


def model_stamp(path: str) -> Optional[list]:
  """[size, mtime_ns] of the file that says which model `path` holds (a .gguf itself, an HF
  directory's config.json; "" = the embedded default); None when there is nothing to stat."""
  from models import checkpoint
  try:
    path = os.path.expanduser(path) if path else checkpoint.default_model_path()
    if os.path.isdir(path):
      path = os.path.join(path, "config.json")
    st = os.stat(path)
  except OSError:
    return None
  return [st.st_size, st.st_mtime_ns]


def _start_lines(workdir: str) -> list[dict]:
  """The readable lines of starts.jsonl, oldest first."""
  try:
    with open(os.path.join(workdir, STARTS), encoding="utf-8") as f:
      lines = f.read().splitlines()
  except OSError:
    return []
  out = []
  for line in lines:
    try:
      out.append(json.loads(line))
    except ValueError:
      continue
  return out


def producer_start(workdir: str, step: int) -> Optional[tuple[str, dict, dict]]:
  """(config path, config dict, starts.jsonl line) of the start that wrote checkpoint `step`:
  the newest start that found an older checkpoint (or none). A start that found `step` itself
  and was refused later (by the restore's own check) wrote nothing, so it is skipped: a wrong
  command never becomes what the right one is compared with. None without such a record."""
  for rec in reversed(_start_lines(workdir)):
    found = rec.get("latest_checkpoint")
    if found is not None and found >= step:
      continue
    path = os.path.join(workdir, str(rec.get("config", "")))
    try:
      with open(path, encoding="utf-8") as f:
        return path, json.load(f), rec
    except (OSError, ValueError):
      return None
  return None


def check_start(config) -> StartCheck:
  """Compares `config` with the workdir's latest recorded start and, where checkpoints exist,
  with the newest one's model and param dtype; raises WorkdirMismatch when they cannot be
  resumed with it. Reads only."""
  workdir = config.workdir
  step = latest_checkpoint(workdir)
  recorded = latest_config(workdir)
  path, old = recorded if recorded is not None else (None, None)
  changes = diff_configs(old, config_json(config)) if old is not None else {}
  stamp = model_stamp(config.model.path or "")
  if step is None:
    return StartCheck(workdir, step, path, changes, stamp)
  fix = ("nothing was loaded or moved: run with the old value{s} (recorded in {path}) or set "
         "--config.workdir to a new directory")
  # the checkpoint fields against the start that wrote the checkpoint (not a refused one)
  producer = producer_start(workdir, step)
  if producer is not None:
    path, wrote, last = producer
  else:   # written before this layout: config.json, which every start used to rewrite
    path, last = os.path.join(workdir, CONFIG), {}
    try:
      with open(path, encoding="utf-8") as f:
        wrote = json.load(f)
    except (OSError, ValueError):
      path, wrote = recorded if recorded is not None else (None, None)
  bad = {k: v for k, v in (diff_configs(wrote, config_json(config)) if wrote else {}).items()
         if k in CHECKPOINT_FIELDS}
  recorded_starts = producer is not None   # else config.json alone: any later start's
  # the same model file as that start's, unchanged: nothing to read (a GGUF's metadata
  # takes seconds to parse); else the checkpoint's metadata against the model's
  same_model = recorded_starts and not bad and stamp is not None and \
      last.get("model_stamp") == stamp
  fit = [] if same_model else checkpoint_fit(workdir, step, config)
  if bad and recorded_starts:
    shapes = [f for f in fit if f.split()[0] not in bad]
    detail = (f" ({', '.join(shapes)})" if shapes else " (same shapes, another model)") \
        if "model.path" in bad else ""
    raise WorkdirMismatch(
        f"workdir {workdir!r} holds checkpoints (latest: step {step}) of another "
        f"configuration: {_changes_text(bad)}{detail}; resuming needs the params and optimizer "
        "state of the old one, so " + fix.format(s="s" if len(bad) > 1 else "", path=path))
  if fit:
    raise WorkdirMismatch(
        f"workdir {workdir!r}: checkpoint {step} was saved for another model than this run's "
        f"(saved -> model.path {config.model.path!r}, rl.param_dtype "
        f"{config.rl.param_dtype!r}: {', '.join(fit)}); nothing was loaded or moved: run with "
        f"the model and param dtype that wrote it{f' (see {path})' if path else ''} or set "
        "--config.workdir to a new directory")
  return StartCheck(workdir, step, path, changes, stamp)


def _write_json(path: str, text: str) -> None:
  tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
  with open(tmp, "w", encoding="utf-8") as f:
    f.write(text)
  os.replace(tmp, path)


def record_start(config, check: StartCheck) -> str:
  """Writes this start's config (configs/start-N-time.json, and config.json when the workdir
  has none) and its starts.jsonl line, then logs the changes; returns the record's path."""
  workdir = config.workdir
  text = config.to_json_best_effort(indent=2)
  number = max((n for n, _ in _start_files(workdir)), default=0) + 1
  stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
  os.makedirs(os.path.join(workdir, CONFIGS), exist_ok=True)
  path = os.path.join(workdir, CONFIGS, f"start-{number:04d}-{stamp}.json")
  _write_json(path, text)
  if not os.path.exists(os.path.join(workdir, CONFIG)):
    _write_json(os.path.join(workdir, CONFIG), text)
  line = {"start": number, "time": stamp, "config": os.path.relpath(path, workdir),
          "latest_checkpoint": check.latest_checkpoint, "model_stamp": check.model_stamp,
          "changed": {k: list(v) for k, v in check.changes.items()}}
  with open(os.path.join(workdir, STARTS), "a", encoding="utf-8") as f:
    f.write(json.dumps(line) + "\n")
  _log_changes(check, path)
  return path


def _log_changes(check: StartCheck, path: str) -> None:
  cont = {k: v for k, v in check.changes.items() if k in CONTINUE_FIELDS}
  other = {k: v for k, v in check.changes.items() if k not in CONTINUE_FIELDS}
  where = (f"resuming from checkpoint {check.latest_checkpoint}"
           if check.latest_checkpoint is not None else "no checkpoint yet")
  if cont:
    log.info("workdir %s: %s (%s)", check.workdir, _changes_text(cont), where)
  if other:
    log.warning("workdir %s: this start changes %s against %s (%s; this start is recorded "
                "in %s)", check.workdir, _changes_text(other),
                os.path.relpath(check.recorded_path, check.workdir), where,
                os.path.relpath(path, check.workdir))
