"""Builds an SvS run from its config, reusing the SSP builders: mesh -> model + tokenizer ->
learner -> rollout engine (no retriever) -> problem iterator -> game -> checkpointer (restoring
the latest checkpoint, data position included) -> optional in-training eval."""
from __future__ import annotations

import logging
import os
from typing import Any, Callable, Optional

import jax

from ssp_jax.run.components import Components, load_model, make_sharder
from ssp_jax.svs import game as game_lib
from ssp_jax.svs import prompts
from ssp_jax.svs.data import ProblemIterator, default_train_path, fit_prompt_budget, load_problems

log = logging.getLogger(__name__)


def build(config) -> Components:
  from ssp_jax.checkpointing import Checkpointer
  from ssp_jax.rl.learner import Learner
  from ssp_jax.rollout import RolloutEngine
  s = config.svs
  problems = load_problems(s.train_path or default_train_path(),
                           strip_instructions=s.get("strip_instructions", True))
  log.info("problem set: %d problems from %s", len(problems), s.train_path or "builtin")
  sharder = make_sharder(config)
  model_cfg, params, tokenizer = load_model(config.model.path, sharder, config.rl.param_dtype,
                                            config.model.chat_format)
  problems, over = fit_prompt_budget(   # the engine would cut longer prompts (data/over_budget)
      problems, lambda p: len(tokenizer.prompt_ids(prompts.solve_messages(p))),
      int(config.rollout.max_prompt_tokens), s.train_path or "builtin")
  data = ProblemIterator(problems, seed=s.seed, shuffle=s.shuffle, over_budget=over)
  learner = Learner(model_cfg, config.rl, sharder, params=params)
  del params
  engine = RolloutEngine(model_cfg, tokenizer, config.rollout, None, sharder)
  game = game_lib.SvSGame(s, config.rl, engine, data, max_prompt_tokens=(
      s.max_synthesis_prompt_tokens or config.rollout.max_prompt_tokens),
      max_problem_prompt_tokens=(s.max_problem_prompt_tokens or config.rollout.max_prompt_tokens))
  ckpt = Checkpointer(os.path.join(config.workdir, "checkpoints"),
                      save_every=config.checkpoint.every, keep=config.checkpoint.keep,
                      async_save=config.checkpoint.async_save, model_config=model_cfg)
  ckpt.register("data", data.state_dict, data.load_state_dict)
  ckpt.register("svs", game.state_dict, game.load_state_dict)
  # the newest checkpoint that restores (ssp_jax.ssp.build: damaged ones moved aside)
  start, state = ckpt.resume(learner.abstract_state, learner.state_shardings)
  if state is not None:
    learner.state = state
    log.info("resumed from %s/checkpoints/%d (data epoch %d, position %d)", config.workdir,
             start, data.epoch, data.position)
  pad = tokenizer.pad_id if getattr(tokenizer, "pad_id", None) is not None else 0
  return Components(config, learner, engine, game, ckpt, start, pad, None,
                    _evaluator(config, engine))


def _evaluator(config, engine) -> Optional[Callable[[Any, int], dict]]:
  if not (config.eval.every_steps or config.eval.get("at_start", False)):
    return None
  from ssp_jax.svs import eval as svs_eval
  sets = svs_eval.load_eval_sets(config.eval)

  def run(params, step: int) -> dict:
    out_dir = os.path.join(config.workdir, "eval", f"step_{step}")
    return svs_eval.evaluate(engine, params, sets, config.eval,
                             out_dir=out_dir if jax.process_index() == 0 else None)  # written once
  return run
