"""Builds a Search-R1 run from its config with the SSP builders: world (if any) -> questions ->
mesh -> model + tokenizer -> retriever -> optional warm start -> learner -> rollout engine ->
optional judge -> game -> checkpointer (restoring the latest checkpoint) -> optional eval.

The questions are read before the model is loaded, so a file with no usable line ends the run
(one line, exit 2) before any expensive work.
"""
from __future__ import annotations

import logging
import os

from ssp_jax import world_config
from ssp_jax.search_r1 import data
from ssp_jax.search_r1.game import SearchR1Game
from ssp_jax.ssp import rewards
from ssp_jax.run.components import Components, load_model, make_retriever, make_sharder
from ssp_jax.ssp.build import qa_evaluator, text_generator

log = logging.getLogger(__name__)


def build(config) -> Components:
  from ssp_jax.checkpointing import Checkpointer
  from ssp_jax.rl.learner import Learner
  from ssp_jax.rollout import RolloutEngine
  world = world_config.resolve_world(config)
  if world:
    log.info("world: %s", world)
  s = config.search_r1
  questions, stats = data.load_questions(s.train_path)
  log.info("training questions: %s from %s", data.report(stats), s.train_path)
  sharder = make_sharder(config)
  model_cfg, params, tokenizer = load_model(config.model.path, sharder, config.rl.param_dtype,
                                            config.model.chat_format)
  retriever = make_retriever(config.retrieval)
  if config.warmstart.enabled:     # the same warm start (and KL reference) as the SSP run
    from ssp_jax.ssp.warmstart.run import warm_params
    params = warm_params(config, model_cfg, params, tokenizer, retriever, sharder=sharder)
  learner = Learner(model_cfg, config.rl, sharder, params=params)
  del params
  engine = RolloutEngine(model_cfg, tokenizer, config.rollout, retriever, sharder)
  judge = None
  if s.reward in ("judge", "em_then_judge") or config.eval.judge:
    policy = lambda: learner.state["params"]
    judge = rewards.Judge(text_generator(config.ssp.judge.source, engine, policy, config,
                                         sharder, config.seed + 2),
                          max_new_tokens=config.ssp.judge.max_new_tokens,
                          temperature=config.ssp.judge.temperature)
  game = SearchR1Game(s, config.rl, engine, questions, judge=judge)
  ckpt = Checkpointer(os.path.join(config.workdir, "checkpoints"),
                      save_every=config.checkpoint.every, keep=config.checkpoint.keep,
                      async_save=config.checkpoint.async_save, model_config=model_cfg)
  start = 0
  if ckpt.latest_step() is not None:   # the newest checkpoint that restores (warns on others)
    start, learner.state = ckpt.restore_newest_intact(learner.abstract_state,
                                                      learner.state_shardings)
    log.info("resumed from %s/checkpoints/%d", config.workdir, start)
  pad = tokenizer.pad_id if getattr(tokenizer, "pad_id", None) is not None else 0
  return Components(config, learner, engine, game, ckpt, start, pad, None,
                    qa_evaluator(config, engine, judge))
