"""The components of a run that every game builds the same way: the mesh (`make_sharder`), a
checkpoint with its tokenizer (`load_model`), the retriever (`make_retriever`), the restore of the
newest checkpoint (`resume`), and the `Components` record the training loop runs on."""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Optional

import jax

import models
from ssp_jax.rl import train_state as ts
from ssp_jax.run.game import Game

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Components:
  config: Any
  learner: Any
  engine: Any
  game: Game
  checkpointer: Any
  start_step: int
  pad_id: int = 0
  frozen_params: Any = None
  evaluator: Optional[Callable[[Any, int], dict]] = None
  closers: list = dataclasses.field(default_factory=list)

  def learner_scalars(self) -> dict[str, float]:
    s = ts.host_scalars(self.learner.state)
    return {"learner/updates_total": float(s["step"]),
            "learner/nonfinite_total": float(s["nonfinite_total"])}

  def nonfinite_message(self) -> str:
    return ts.nonfinite_message(self.learner.state, self.config.rl.max_nonfinite_steps)

  def close(self) -> None:
    self.checkpointer.close()
    for fn in self.closers:
      fn()


def make_sharder(config) -> models.Sharder:
  n = int(config.mesh.num_devices)
  if jax.process_count() > 1 and n and n != jax.device_count():
    raise ValueError(f"mesh.num_devices={n}: a run of {jax.process_count()} processes uses all "
                     f"{jax.device_count()} devices (set it to 0)")
  devices = jax.devices()[:n or None]
  mesh = models.make_mesh(tuple(tuple(a) for a in config.mesh.axes), devices)
  rules = tuple(tuple(r) for r in config.mesh.rules) or models.DEFAULT_RULES
  return models.Sharder(mesh, rules)


def load_model(path: str, sharder, dtype_name: str, chat_format: str):
  """(model_cfg, params, tokenizer) of a checkpoint path ("" = the embedded default model)."""
  from ssp_jax.tokenizer import load_tokenizer
  cfg, params, tok_dir = models.load_checkpoint(path or None, dtype=ts.dtype_of(dtype_name),
                                                sharder=sharder)
  return cfg, params, load_tokenizer(tok_dir, chat_format)


def make_retriever(rcfg):
  """An HTTP client when `retrieval.url` is set, else a local index (default: built on first
  use over the shipped corpus). None on processes other than 0 of a multi-host run: the rollout
  engine searches on process 0 and broadcasts the results (`ssp_jax.rollout.multihost`)."""
  import retrieval
  if jax.process_index() != 0:
    return None
  if rcfg.url:
    return retrieval.HttpRetriever(rcfg.url, timeout=rcfg.timeout_s, retries=rcfg.retries)
  return retrieval.load_retriever(rcfg.index_dir or retrieval.default_index_dir())


def resume(ckpt, learner, workdir: str) -> int:
  """Restores the newest checkpoint that restores into `learner` (a damaged one is moved aside
  with a warning; one saved for another model or param dtype is CheckpointMismatch, the
  checkpointer closed); returns the step it starts from (0 when there is none)."""
  start, state = ckpt.resume(learner.abstract_state, learner.state_shardings)
  if state is not None:
    learner.state = state
    log.info("resumed from %s/checkpoints/%d", workdir, start)
  return start
