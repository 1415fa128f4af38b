"""Builds what `ssp-jax eval` needs from a run config: policy params, rollout engine, judge.

The policy is, in order: `--checkpoint` (an HF directory, a .gguf file, or a training run's orbax
checkpoints: a workdir, its `checkpoints/` directory, or one `checkpoints/<step>` directory), else
`config.model.path` (the config's initial policy; "" = the embedded SmolLM2). An orbax checkpoint
holds only params, so the tokenizer and architecture come from `config.model.path`, the model the
run started from.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Callable, Optional

import jax

from ssp_jax.run.components import load_model, make_retriever, make_sharder

log = logging.getLogger(__name__)


@dataclasses.dataclass
class EvalComponents:
  engine: Any
  params: Any
  judge: Any          # None, or what scores a prediction (the game's judge)
  policy: str          # what was loaded, for results.json meta


def resolve_checkpoint(path: str) -> Optional[tuple[str, Optional[int]]]:
  """(checkpoints dir, step or None = latest) when `path` is a training checkpoint location: a
  run's workdir (holding `checkpoints/`), its `checkpoints/` directory, or one
  `checkpoints/<step>` directory; None for anything else (an HF directory, a file, a missing
  path). `ssp-jax eval`, `export` and `generate` all resolve `--checkpoint` with it."""
  if not os.path.isdir(path):
    return None
  if os.path.isdir(os.path.join(path, "checkpoints")):
    return os.path.join(path, "checkpoints"), None
  base = os.path.basename(os.path.normpath(path))
  if base.isdigit() and os.path.isdir(os.path.join(path, "params")):
    return os.path.dirname(os.path.normpath(path)), int(base)
  if any(d.isdigit() for d in os.listdir(path)) and not os.path.exists(
      os.path.join(path, "config.json")):
    return path, None
  return None


def restore_trained_params(ckpt_dir: str, step: Optional[int], like: Any) -> tuple[Any, int]:
  """The policy params of a training checkpoint, laid out like `like` (the base model's)."""
  from ssp_jax.checkpointing import Checkpointer
  abstract = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), like)
  shardings = jax.tree.map(lambda p: p.sharding, like)
  ck = Checkpointer(ckpt_dir, async_save=False)
  try:
    step = ck._step(step)
    return ck.restore_params(abstract, shardings, step=step), step
  finally:
    ck.close()


def load_policy(config, checkpoint: Optional[str], sharder):
  """(model_cfg, params, tokenizer, description) of the policy to evaluate."""
  dtype, fmt = config.rl.param_dtype, config.model.chat_format
  orbax = resolve_checkpoint(checkpoint) if checkpoint else None
  if checkpoint and not orbax:
    if not os.path.exists(checkpoint) and not checkpoint.startswith("registry:"):
      raise FileNotFoundError(f"--checkpoint {checkpoint!r} does not exist (give an HF directory, "
                              "a .gguf file, or a training workdir/checkpoints directory)")
    cfg, params, tok = load_model(checkpoint, sharder, dtype, fmt)
    return cfg, params, tok, checkpoint
  cfg, params, tok = load_model(config.model.path, sharder, dtype, fmt)
  base = config.model.path or "embedded SmolLM2-135M-Instruct"
  if not orbax:
    return cfg, params, tok, base
  params, step = restore_trained_params(orbax[0], orbax[1], params)
  return cfg, params, tok, f"{orbax[0]} step {step} (base {base})"


def build(config, checkpoint: Optional[str] = None,
          make_judge: Optional[Callable[..., Any]] = None) -> EvalComponents:
  """Mesh -> policy -> retriever -> rollout engine -> optional judge: the game's
  `make_judge(config, engine, params, sharder)` when `config.eval.judge` is set."""
  from ssp_jax.rollout import RolloutEngine
  sharder = make_sharder(config)
  model_cfg, params, tok, desc = load_policy(config, checkpoint, sharder)
  engine = RolloutEngine(model_cfg, tok, config.rollout, make_retriever(config.retrieval),
                         sharder)
  judge = None
  if config.eval.judge and make_judge is not None:
    judge = make_judge(config, engine, params, sharder)
  return EvalComponents(engine, params, judge, desc)
