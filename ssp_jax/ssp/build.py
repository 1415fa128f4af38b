"""Builds an SSP run from its config, in dependency order, with the shared loaders of
ssp_jax/run/components.py: answers -> mesh -> model + tokenizer -> retriever -> optional warm
start -> learner (train state) -> rollout engine -> verifier and judge (the policy, a frozen
checkpoint on the same mesh, or an OpenAI-compatible endpoint) -> game -> checkpointer (restoring
the latest checkpoint) -> optional in-training eval. The judge and the QA evaluator are public:
Search-R1 builds its run with them too."""
from __future__ import annotations

import logging
import os
from typing import Any, Callable, Optional

import jax

from ssp_jax.run.components import (Components, load_model, make_retriever, make_sharder,
                                    resume)
from ssp_jax.ssp import game as game_lib
from ssp_jax.ssp import remote, rewards
from ssp_jax.ssp.answers import default_answers_path, load_answers

log = logging.getLogger(__name__)


def text_generator(source: str, policy_engine, params_fn, config, sharder, seed: int,
                   frozen_cache: Optional[dict] = None):
  """The policy (source "policy"), an OpenAI-compatible endpoint (an http(s) URL, served model
  `ssp.judge.model`) or a frozen checkpoint at `source`, as a TextGenerator. A checkpoint used
  by both the verifier and the judge is loaded once (`frozen_cache`)."""
  if source == "policy":
    return game_lib.PolicyText(policy_engine, params_fn, seed)
  if remote.is_url(source):
    return chat_client(source, config.ssp.judge)
  frozen_cache = {} if frozen_cache is None else frozen_cache
  if source not in frozen_cache:
    from ssp_jax.rollout import RolloutEngine
    cfg, params, tok = load_model(source, sharder, config.rollout.dtype,
                                  config.model.chat_format)
    frozen_cache[source] = (RolloutEngine(cfg, tok, config.rollout, None, sharder), params)
  engine, params = frozen_cache[source]
  return game_lib.PolicyText(engine, lambda: params, seed)


def chat_client(url: str, jcfg, **overrides) -> remote.OpenAIChat:
  """The endpoint client of `url` with the `ssp.judge` settings (`overrides` replace some, e.g.
  for the start-up probe). The API key is read here from the environment variable that
  `ssp.judge.api_key_env` names, so it is never part of the config."""
  key = remote.api_key(jcfg.get("api_key_env", ""))
  kw = dict(timeout_s=jcfg.timeout_s, retries=jcfg.retries, max_concurrency=jcfg.max_concurrency,
            call_deadline_s=jcfg.get("call_deadline_s", 120.0),
            step_deadline_s=jcfg.get("step_deadline_s", 0.0),
            max_reply_bytes=jcfg.get("max_reply_bytes", 1 << 20),
            max_retry_after_s=jcfg.get("max_retry_after_s", 60.0))
  kw.update(overrides)
  return remote.OpenAIChat(url, jcfg.model, api_key=key, **kw)


def uses_judge(config) -> bool:
  """Whether the run asks the judge (`ssp.judge.source`) anything."""
  s = config.ssp
  return s.reward.solver in ("judge", "em_then_judge") or s.rag.use_judge or bool(config.eval.judge)


def endpoint_fields(config) -> list[tuple[str, str]]:
  """(config field, URL) of each endpoint the run will call: `ssp.rag.verifier` (when the RAG
  check is on) and `ssp.judge.source` (when the judge is used), each URL once."""
  s, out = config.ssp, []
  if s.rag.enabled and remote.is_url(s.rag.verifier):
    out.append(("ssp.rag.verifier", s.rag.verifier))
  if uses_judge(config) and remote.is_url(s.judge.source) and \
      s.judge.source not in [u for _, u in out]:
    out.append(("ssp.judge.source", s.judge.source))
  return out


PROBE_DEADLINE_S = 30.0


def probe_endpoints(config, fields: Optional[list] = None) -> None:
  """One tiny chat request to each endpoint of `endpoint_fields` (or of `fields`, a list of
  (config field, url)), one retry, at most PROBE_DEADLINE_S each, before any model is loaded;
  raises `remote.RemoteError` with one line naming the field and the fix."""
  j = config.ssp.judge
  for field, url in (endpoint_fields(config) if fields is None else fields):
    chat = chat_client(url, j, retries=min(1, int(j.retries)), backoff_s=0.2,
                       call_deadline_s=min(float(j.get("call_deadline_s", 120.0)),
                                           PROBE_DEADLINE_S))
    try:
      remote.probe(chat)
    except remote.RemoteError as e:
      if e.status in (401, 403):
        fix = ("set --config.ssp.judge.api_key_env to the name of the environment variable "
               "that holds a key this server accepts")
      elif e.status == 404:
        fix = (f"set --config.ssp.judge.model to a model the server serves (GET "
               f"{url.rstrip('/')}/models lists them) or fix the URL")
      else:
        fix = f"start the server, fix the URL, or set --config.{field}=policy"
      raise remote.RemoteError(f"config.{field}={url!r} failed the start-up probe: {e}; {fix}",
                               status=e.status) from None


def build(config) -> Components:
  from ssp_jax.checkpointing import Checkpointer
  from ssp_jax.rl.learner import Learner
  from ssp_jax.rollout import RolloutEngine
  answers, stats = load_answers(config.ssp.answers_path or default_answers_path(),
                                config.ssp.default_hops)
  log.info("answer set: %s", stats.report())
  sharder = make_sharder(config)
  model_cfg, params, tokenizer = load_model(config.model.path, sharder, config.rl.param_dtype,
                                            config.model.chat_format)
  retriever = make_retriever(config.retrieval)
  if config.warmstart.enabled:     # the run starts from (and its KL reference is) these params
    from ssp_jax.ssp.warmstart.run import warm_params
    params = warm_params(config, model_cfg, params, tokenizer, retriever, sharder=sharder)
  learner = Learner(model_cfg, config.rl, sharder, params=params)
  frozen = None
  if config.ssp.mode != "selfplay":   # the fixed opponent keeps the initial weights
    frozen = learner.ref_params if learner.ref_params is not None else params
  del params
  engine = RolloutEngine(model_cfg, tokenizer, config.rollout, retriever, sharder)
  policy = lambda: learner.state["params"]
  frozen_cache: dict = {}
  verifier = text_generator(config.ssp.rag.verifier, engine, policy, config, sharder,
                            config.seed + 1, frozen_cache)
  judge = None
  if uses_judge(config):
    judge = rewards.Judge(text_generator(config.ssp.judge.source, engine, policy, config,
                                         sharder, config.seed + 2, frozen_cache),
                          max_new_tokens=config.ssp.judge.max_new_tokens,
                          temperature=config.ssp.judge.temperature)
  world_checker = None
  if config.ssp.get("world_dir", ""):     # ground-truth metrics on a synthetic world
    from ssp_jax.world.check import WorldChecker
    world_checker = WorldChecker(config.ssp.world_dir)
  game = game_lib.SSPGame(config.ssp, config.rl, engine, answers, verifier=verifier, judge=judge,
                          world_checker=world_checker)
  ckpt = Checkpointer(os.path.join(config.workdir, "checkpoints"),
                      save_every=config.checkpoint.every, keep=config.checkpoint.keep,
                      async_save=config.checkpoint.async_save, model_config=model_cfg)
  ckpt.register("replay", game.buffer.state_dict, game.buffer.load_state_dict)
  start = resume(ckpt, learner, config.workdir)
  pad = tokenizer.pad_id if getattr(tokenizer, "pad_id", None) is not None else 0
  return Components(config, learner, engine, game, ckpt, start, pad, frozen,
                    qa_evaluator(config, engine, judge))


def qa_evaluator(config, engine, judge) -> Optional[Callable[[Any, int], dict]]:
  """The in-training QA evaluation (`eval.every_steps`, `eval.at_start`): (params, step) ->
  `val/...` metrics, results written under workdir/eval/step_<step>; None when off."""
  if not (config.eval.every_steps or config.eval.get("at_start", False)):
    return None
  from ssp_jax.eval.runner import evaluate, load_eval_sets
  sets = load_eval_sets(config.eval)

  def run(params, step: int) -> dict:
    out_dir = os.path.join(config.workdir, "eval", f"step_{step}")
    return evaluate(engine, params, sets, batch_size=config.eval.batch_size,
                    max_new_tokens=config.eval.max_new_tokens or None,
                    judge=judge if config.eval.judge else None, seed=config.seed,
                    out_dir=out_dir if jax.process_index() == 0 else None)   # written once
  return run


def eval_judge(config, engine, params, sharder) -> rewards.Judge:
  """The judge of `ssp-jax eval` (`config.eval.judge="ssp"`: the judge of `config.ssp.judge`)
  over the evaluated `params`."""
  if config.eval.judge != "ssp":
    raise ValueError(f"config.eval.judge={config.eval.judge!r}: use \"\" (off) or \"ssp\" (the "
                     "judge of config.ssp.judge)")
  gen = text_generator(config.ssp.judge.source, engine, lambda: params, config, sharder,
                        config.seed + 2)
  return rewards.Judge(gen, max_new_tokens=config.ssp.judge.max_new_tokens,
                       temperature=config.ssp.judge.temperature)
