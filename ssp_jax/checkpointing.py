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

Multi-host: every process calls `save`, `restore` and `close` with the same arguments (orbax
synchronises them); each writes the shards of its own devices, process 0 the metadata and the
JSON `extra` item, and every process reads `extra` back on restore, so the directory must be on
storage all processes see.

  ckpt = Checkpointer(workdir + "/ckpt", save_every=5, keep=3, model_config=cfg)
  ckpt.register("replay", buffer.state_dict, buffer.load_state_dict)
  if ckpt.latest_step() is not None:
    learner.state = ckpt.restore(learner.abstract_state, learner.state_shardings)
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

log = logging.getLogger(__name__)
TRAIN_KEYS = ("opt_state", "rng", "step", "nonfinite", "nonfinite_total")
META = "__meta__"


class CheckpointCorrupt(ValueError):
  """No checkpoint of a directory restores; the message names each step and what failed."""


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

  def restore_newest_intact(self, abstract_state: dict, shardings: dict) -> tuple[int, dict]:
    """(step, state) of the newest checkpoint that restores, newest first. An unreadable one
    (a truncated or missing data file, bad metadata) is named in a warning and moved aside to
    `<step>.corrupt-<time>` (so this run can write that step again); raises CheckpointCorrupt
    when none restores."""
    errors = []
    for step in sorted(self.all_steps(), reverse=True):
      try:
        return step, self.restore(abstract_state, shardings, step)
      except Exception as e:  # orbax/tensorstore raise many types for a damaged file
        reason = f"{type(e).__name__}: {_one_line(e)}"
        errors.append(f"{step} ({reason})")
        aside = self._move_aside(step)
        log.warning("checkpoint %d in %s is unreadable (%s); %s; trying the previous one",
                    step, self.directory, reason,
                    f"moved to {aside}" if aside else "left in place")
    raise CheckpointCorrupt(f"no checkpoint in {self.directory} restores: "
                            + "; ".join(errors) + ". Move the directory away to start afresh")

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


def run_tokenizer_source(ckpt_dir: str) -> str:
  """The model path the run that wrote `ckpt_dir` started from (its workdir's config.json,
  `model.path`; "" = the embedded default), for the tokenizer of an export."""
  import json
  cfg_path = os.path.join(os.path.dirname(os.path.abspath(ckpt_dir)), "config.json")
  if not os.path.exists(cfg_path):
    raise FileNotFoundError(f"cannot tell which tokenizer {ckpt_dir!r} was trained with: no "
                            f"{cfg_path}; pass --tokenizer HF_DIR_OR_GGUF")
  with open(cfg_path, encoding="utf-8") as f:
    return (json.load(f).get("model") or {}).get("path") or ""


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
  to `out_dir`, optionally cast (e.g. "bfloat16"), with the tokenizer of `tokenizer` (default:
  the model the run started from), every file mode 0644. Returns the exported step."""
  if not os.path.isdir(ckpt_dir):
    raise FileNotFoundError(f"checkpoint directory {ckpt_dir!r} does not exist; pass the "
                            "checkpoint root a training run wrote")
  tok_source = tokenizer
  if tok_source is None:
    try:
      tok_source = run_tokenizer_source(ckpt_dir)
    except FileNotFoundError as e:
      log.warning("exporting without a tokenizer (`ssp-jax generate` will refuse the "
                  "directory): %s", e)
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
