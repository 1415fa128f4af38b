"""Orbax checkpoints of the train state plus JSON state registered by other components.

Layout of one checkpoint (`<dir>/<step>/`), three orbax items:
  params   the policy params (restorable alone, e.g. for `export_hf`)
  train    opt_state, rng, step and the non-finite counters
  extra    JSON: every registered component's state (replay buffer, data iterator position,
           metrics step...) and `__meta__` (the model config as an HF config dict)

Saves are asynchronous (device arrays are copied to host before `save` returns, so the state
may be donated right after) and atomic: orbax writes into `<step>.orbax-checkpoint-tmp-*` and
renames it when complete, and listing ignores those temporary directories, so a crash mid-save
leaves the previous checkpoint as the latest. Restores take target shardings, so a checkpoint
saved on one mesh restores onto any other.

A checkpoint is moved aside as damaged (`<step>.corrupt-<time>`) only when its files are: its
metadata unreadable, or the restore failing although the saved tree (keys, shapes, dtypes)
matches the state asked for. A saved tree that does not match (another model or param dtype
than the run that wrote it) is `CheckpointMismatch`, and the checkpoint is left as it is.

Multi-host: every process calls `save`, `restore` and `close` with the same arguments (orbax
synchronises them); each writes the shards of its own devices, process 0 the metadata and the
JSON `extra` item, and every process reads `extra` back on restore, so the directory must be on
storage all processes see.

  ckpt = Checkpointer(workdir + "/ckpt", save_every=5, keep=3, model_config=cfg)
  ckpt.register("replay", buffer.state_dict, buffer.load_state_dict)
  start, state = ckpt.resume(learner.abstract_state, learner.state_shardings)  # (0, None): none
  if state is not None:
    learner.state = state
  ...
  ckpt.save(step, learner.state)        # a no-op unless step % save_every == 0 (or force=True)
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Optional

import jax
import orbax.checkpoint as ocp

import models
from ssp_jax.checkpoint_fit import (  # noqa: F401  (re-exported)
    MODEL_SHAPE_FIELDS, environment_error, model_shape_changes, tree_differences, tree_leaves)

log = logging.getLogger(__name__)
TRAIN_KEYS = ("opt_state", "rng", "step", "nonfinite", "nonfinite_total")
META = "__meta__"


class CheckpointCorrupt(ValueError):
  """No checkpoint of a directory restores; the message names each step and what failed."""


class CheckpointMismatch(ValueError):
  """A checkpoint's saved tree (keys, shapes, dtypes) is not the state this run restores into:
  it was written with another model or param dtype. The files are intact, the config is not
  the one that wrote them, so nothing is moved aside."""


def _one_line(e: BaseException, limit: int = 300) -> str:
  text = " ".join(str(e).split())
  return text if len(text) <= limit else text[:limit] + "..."


def _sds(abstract: Any, shardings: Any) -> Any:
  return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                      abstract, shardings)


class Checkpointer:
  """A CheckpointManager wrapper: save every N steps, keep the last K, restore with shardings.

  Args:
    directory: checkpoint root (created if missing).
    save_every: `save(step, ...)` writes only when step % save_every == 0 (unless force).
    keep: how many most recent checkpoints to keep.
    async_save: write in a background thread (call `wait()` / `close()` before exiting).
    model_config: stored in each checkpoint so `export_hf` needs nothing else.
  """

  def __init__(self, directory: str, *, save_every: int = 1, keep: int = 3,
               async_save: bool = True, model_config: Optional[models.ModelConfig] = None):
    if save_every < 1 or keep < 1:
      raise ValueError(f"save_every ({save_every}) and keep ({keep}) must be >= 1")
    self.directory = os.path.abspath(directory)
    self.save_every = save_every
    self.model_config = model_config
    self._components: dict[str, tuple[Callable[[], Any], Callable[[Any], None]]] = {}
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                           enable_async_checkpointing=async_save)
    handlers = {"params": ocp.StandardCheckpointHandler(),
                "train": ocp.StandardCheckpointHandler(), "extra": ocp.JsonCheckpointHandler()}
    self.manager = ocp.CheckpointManager(self.directory, options=options, item_handlers=handlers)

  # -- components ----------------------------------------------------------------------------
  def register(self, name: str, get_state: Callable[[], Any],
               set_state: Callable[[Any], None]) -> None:
    """Adds a component whose JSON-able `get_state()` is saved and `set_state(value)` is called
    on restore (when the checkpoint has it)."""
    if name == META or name in self._components:
      raise ValueError(f"checkpoint component {name!r} is already registered (or reserved)")
    self._components[name] = (get_state, set_state)

  # -- save ----------------------------------------------------------------------------------
  def should_save(self, step: int) -> bool:
    return step % self.save_every == 0

  def save(self, step: int, state: dict, *, force: bool = False) -> bool:
    """Starts saving `state` as checkpoint `step`; returns whether a save was started."""
    if not (force or self.should_save(step)):
      return False
    if step in self.manager.all_steps():
      return False
    extra = {name: get() for name, (get, _) in self._components.items()}
    if self.model_config is not None:
      extra[META] = {"model_config": self.model_config.to_hf_dict()}
    args = ocp.args.Composite(
        params=ocp.args.StandardSave(state["params"]),
        train=ocp.args.StandardSave({k: state[k] for k in TRAIN_KEYS}),
        extra=ocp.args.JsonSave(extra))
    self.manager.save(step, args=args, force=True)
    log.info("checkpoint %d -> %s", step, self.directory)
    return True

  def wait(self) -> None:
    """Blocks until any asynchronous save has been committed."""
    self.manager.wait_until_finished()

  def close(self) -> None:
    self.manager.wait_until_finished()
    self.manager.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  # -- restore -------------------------------------------------------------------------------
  def latest_step(self) -> Optional[int]:
    """Newest committed step (half-written temporary directories are not listed)."""
    self.manager.reload()
    return self.manager.latest_step()

  def all_steps(self) -> list[int]:
    self.manager.reload()
    return list(self.manager.all_steps())

  def resolve_step(self, step: Optional[int] = None) -> int:
    """`step` if it is committed here, else the latest when None; FileNotFoundError otherwise."""
    steps = self.all_steps()
    if not steps:
      raise FileNotFoundError(f"{self.directory} holds no committed checkpoint yet (a training "
                              "run saves one every checkpoint.every steps); pass a run that has "
                              "saved one")
    step = self.latest_step() if step is None else step
    if step not in steps:
      raise FileNotFoundError(f"no committed checkpoint {step} in {self.directory}; steps there: "
                              f"{', '.join(map(str, steps))}")
    return step

  _step = resolve_step  # kept for callers that used the private name

  def restore(self, abstract_state: dict, shardings: dict, step: Optional[int] = None) -> dict:
    """The train state of `step` (default: latest) laid out as `shardings` (any mesh), and
    each registered component's `set_state` called with its saved value."""
    step = self.resolve_step(step)
    target = _sds(abstract_state, shardings)
    out = self.manager.restore(step, args=ocp.args.Composite(
        params=ocp.args.StandardRestore(target["params"]),
        train=ocp.args.StandardRestore({k: target[k] for k in TRAIN_KEYS}),
        extra=ocp.args.JsonRestore()))
    extra = out["extra"] or {}
    for name, (_, set_state) in self._components.items():
      if name in extra:
        set_state(extra[name])
      else:
        log.warning("checkpoint %d has no state for component %r", step, name)
    return {"params": out["params"], **out["train"]}

  def saved_leaves(self, step: int) -> dict[str, Optional[tuple]]:
    """tree_leaves of the params and train items as saved at `step`, read from the metadata
    alone (raises when it is missing or unreadable)."""
    meta = self.manager.item_metadata(step)
    out = {}
    for item, prefix in (("params", "params"), ("train", "")):
      tree = meta[item] if item in meta else None
      if tree is None:
        raise ValueError(f"checkpoint {step} has no readable metadata for item {item!r}")
      out.update(tree_leaves(tree, prefix))
    return out

  def restore_newest_intact(self, abstract_state: dict, shardings: dict) -> tuple[int, dict]:
    """(step, state) of the newest checkpoint that restores, newest first. A damaged one
    (unreadable metadata, or a truncated or missing data file under a saved tree that fits)
    is named in a warning and moved aside to `<step>.corrupt-<time>` (so this run can write
    that step again); raises CheckpointCorrupt when none restores. A saved tree that does not
    fit `abstract_state` raises CheckpointMismatch before any restore, nothing moved."""
    errors = []
    wanted = tree_leaves({k: abstract_state[k] for k in ("params",) + TRAIN_KEYS})
    for step in sorted(self.all_steps(), reverse=True):
      try:
        saved = self.saved_leaves(step)
      except Exception as e:  # a missing or unparsable metadata file
        errors.append(self._damaged(step, e))
        continue
      diffs = tree_differences(saved, wanted)
      if diffs:
        raise CheckpointMismatch(self._mismatch_message(step, diffs))
      try:
        return step, self.restore(abstract_state, shardings, step)
      except Exception as e:  # orbax/tensorstore raise many types for a damaged file
        errors.append(self._damaged(step, e))
    raise CheckpointCorrupt(f"no checkpoint in {self.directory} restores: "
                            + "; ".join(errors) + ". Move the directory away to start afresh")

  def resume(self, abstract_state: dict, shardings: dict) -> tuple[int, Optional[dict]]:
    """`restore_newest_intact`, or (0, None) when there is no checkpoint. On any error the
    manager is closed before it propagates, so that the process exits without orbax's
    background threads printing tracebacks."""
    try:
      if self.latest_step() is None:
        return 0, None
      return self.restore_newest_intact(abstract_state, shardings)
    except BaseException:
      self.close()
      raise

  def _damaged(self, step: int, e: BaseException) -> str:
    """Warns about a damaged checkpoint and moves it aside; returns 'step (reason)'. A failure
    that is the machine's (memory, permissions) raises instead, nothing moved."""
    env = environment_error(e)
    if env is not None:
      raise ValueError(f"checkpoint {step} in {self.directory} could not be read ({env}); it "
                       "was left as it is: fix that and run the same command again") from e
    reason = f"{type(e).__name__}: {_one_line(e)}"
    aside = self._move_aside(step)
    log.warning("checkpoint %d in %s is unreadable (%s); %s; trying the previous one",
                step, self.directory, reason, f"moved to {aside}" if aside else "left in place")
    return f"{step} ({reason})"

  def _mismatch_message(self, step: int, diffs: list[str]) -> str:
    model = ""
    if self.model_config is not None:
      try:
        changes = model_shape_changes(self.saved_model_config(step), self.model_config)
        model = f" (model {', '.join(changes)})" if changes else ""
      except Exception:  # no model config saved: the leaves below say enough
        pass
    more = f" and {len(diffs) - 3} more" if len(diffs) > 3 else ""
    return (f"checkpoint {step} in {self.directory} was saved for another model or param "
            f"dtype than this run's{model}: {'; '.join(diffs[:3])}{more}. It is intact and "
            "was left as it is: run with the model.path and rl.param_dtype that wrote it "
            "(recorded in the workdir's config.json and configs/) or set --config.workdir "
            "to a new directory")

  def _move_aside(self, step: int) -> Optional[str]:
    if jax.process_index() != 0:
      return None
    src = os.path.join(self.directory, str(step))
    dst = f"{src}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
      os.rename(src, dst)
    except OSError:
      return None
    self.manager.reload()
    return dst

  def restore_params(self, abstract_params: Any, shardings: Any = None,
                     step: Optional[int] = None) -> Any:
    """Only the policy params (shardings default to each leaf's `sharding`, or device 0)."""
    step = self.resolve_step(step)
    target = abstract_params if shardings is None else _sds(abstract_params, shardings)
    out = self.manager.restore(step, args=ocp.args.Composite(
        params=ocp.args.StandardRestore(target)))
    return out["params"]

  def saved_model_config(self, step: Optional[int] = None) -> models.ModelConfig:
    step = self.resolve_step(step)
    extra = self.manager.restore(step, args=ocp.args.Composite(extra=ocp.args.JsonRestore()))
    meta = (extra["extra"] or {}).get(META)
    if not meta:
      raise ValueError(f"checkpoint {step} in {self.directory} has no model config; pass "
                       "model_config= to the Checkpointer that writes it")
    return models.ModelConfig.from_hf_dict(meta["model_config"])


def export_hf(path: str, config: models.ModelConfig, params: Any) -> None:
  """Writes the policy as a Hugging Face directory (config.json + safetensors)."""
  models.save_hf_checkpoint(path, config, params)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json",
                   "chat_template.jinja", "generation_config.json")


def tokenizer_dir(source: str) -> str:
  """The directory holding the tokenizer files of `source` (an HF directory, a .gguf file -
  exported once - or "" for the embedded default model)."""
  from models.checkpoint import default_model_path, gguf_tokenizer_dir
  source = os.path.expanduser(source) if source else default_model_path()
  return gguf_tokenizer_dir(source) if source.endswith(".gguf") else source


def copy_tokenizer(source: str, out_dir: str) -> list[str]:
  """Copies the tokenizer files of `source` (as `tokenizer_dir`) into `out_dir`; returns the
  names copied."""
  import shutil
  tok_dir = tokenizer_dir(source)
  names = [n for n in TOKENIZER_FILES if os.path.isfile(os.path.join(tok_dir, n))]
  if not any(n in names for n in ("tokenizer.json", "tokenizer.model", "vocab.json")):
    raise FileNotFoundError(f"{tok_dir!r} holds no tokenizer (tokenizer.json, vocab.json or "
                            "tokenizer.model); pass --tokenizer HF_DIR_OR_GGUF")
  for n in names:
    shutil.copyfile(os.path.join(tok_dir, n), os.path.join(out_dir, n))
  return names


def restore_policy(ckpt_dir: str, step: Optional[int] = None
                   ) -> tuple[int, models.ModelConfig, Any]:
  """(step, model config, params) of checkpoint `step` (default latest) of a checkpoints
  directory, restored on one device in the saved dtype, without the run's config file."""
  ck = Checkpointer(ckpt_dir, async_save=False)
  try:
    step = ck.resolve_step(step)
    cfg = ck.saved_model_config(step)
    dev = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    meta = ck.manager.item_metadata(step)["params"]
    abstract = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=dev), meta)
    return step, cfg, ck.restore_params(abstract, step=step)
  finally:
    ck.close()


def export_checkpoint_to_hf(ckpt_dir: str, out_dir: str, *, step: Optional[int] = None,
                            dtype: Optional[str] = None, tokenizer: Optional[str] = None) -> int:
  """Restores the params of checkpoint `step` (default latest) on one device and exports them
  to `out_dir`, optionally cast (e.g. "bfloat16"), with the tokenizer of `tokenizer` (None: none),
  every file mode 0644. Returns the exported step."""
  if not os.path.isdir(ckpt_dir):
    raise FileNotFoundError(f"checkpoint directory {ckpt_dir!r} does not exist; pass the "
                            "checkpoint root a training run wrote")
  tok_source = tokenizer
  if tok_source is None:
    log.warning("exporting %s without a tokenizer (`ssp-jax generate` will refuse the "
                "directory); pass the model the run started from (ssp_jax.workdir."
                "run_tokenizer_source finds it)", ckpt_dir)
  step, cfg, params = restore_policy(ckpt_dir, step)
  if dtype is not None:
    params = jax.tree.map(lambda p: p.astype(dtype), params)
  export_hf(out_dir, cfg, params)
  if tok_source is not None:
    copy_tokenizer(tok_source, out_dir)
  for name in os.listdir(out_dir):          # readable by everyone, like save_pretrained's
    full = os.path.join(out_dir, name)
    if os.path.isfile(full):
      os.chmod(full, 0o644)
  return step
