"""A game that no package knows: three roles, a calculator tool, both defined here, trained one
step by the shared loop (`ssp_jax.run.trainer.train`) through the public interfaces only: the
role table is `rl.roles`, the update order the game's `UPDATE_ORDER`, the tool a `Tool` handed to
the engine. Nothing in `ssp_jax/rl/` or `ssp_jax/rollout/` names these roles or this tool.

A random model never writes `<calc>`, so the tool's tags are cut from its own greedy output
(the `tags` fixture of test_rollout_loop.py); the loop mechanics are the same as with real tags.
"""
import json
import os

import jax
import ml_collections
import numpy as np

from ssp_jax.checkpointing import Checkpointer
from ssp_jax.rl.learner import Learner
from ssp_jax.rl.roles import roles_config
from ssp_jax.rollout import RolloutEngine
from ssp_jax.run import trainer
from ssp_jax.run.components import Components
from ssp_jax.run.config import base_run_config
from ssp_jax.run.game import StepOutput
from ssp_jax.run.validate import check_sections

from test_rollout_loop import PROMPTS, model, tags  # noqa: F401
from test_rollout_tools import Calc

ROLES = ("asker", "answerer", "critic")


class ToyGame:
  """asker: one greedy rollout of a prompt that calls the calculator (REINFORCE); answerer and
  critic: two sampled rollouts per prompt (GRPO, RLOO groups). Reward: distinct tokens / 40."""
  ROLES, UPDATE_ORDER = ROLES, ("critic", "asker", "answerer")

  def __init__(self, engine, stop):
    self.engine, self.stop = engine, stop

  def play(self, params, step, key, frozen_params=None):
    del frozen_params
    key = jax.random.fold_in(key, step)
    plans = [("asker", PROMPTS[:1], 1, 0.0), ("answerer", PROMPTS[1:3], 2, 1.0),
             ("critic", PROMPTS[3:5], 2, 1.0)]
    trajs, roles, groups, group = [], [], [], 0
    for k, (role, prompts, n, temperature) in enumerate(plans):
      out, _ = self.engine.generate(params, [p for p in prompts for _ in range(n)],
                                    jax.random.fold_in(key, k), temperature=temperature,
                                    max_new_tokens=40, stop=[self.stop])
      trajs += out
      roles += [role] * len(out)
      groups += [group + i // n for i in range(len(out))]
      group += len(prompts)
    rewards = np.asarray([len(set(t.response_ids)) / 40 for t in trajs], np.float32)
    metrics = {"toy/reward_mean": float(rewards.mean()),
               "toy/tool_calls": float(sum(t.num_searches for t in trajs))}
    return StepOutput(trajs, rewards, np.asarray(roles), np.asarray(groups, np.int32), metrics,
                      [{"role": r, "text": t.text} for r, t in zip(roles, trajs)])


def toy_config(workdir: str) -> ml_collections.ConfigDict:
  c = base_run_config()
  c.workdir, c.total_steps, c.tensorboard, c.progress = workdir, 1, False, False
  c.eval = ml_collections.ConfigDict({"every_steps": 0, "at_start": False})
  c.checkpoint.async_save = False
  c.rollout.update(dict(dtype="float32", cache_dtype="float32", batch_size=4, cache_min_len=32,
                        prefill_chunk=16, steps_per_call=12, max_obs_tokens=16))
  rl = c.rl
  rl.roles = roles_config(asker="reinforce", answerer="grpo", critic="rloo")
  rl.update_schedule = "by_role"
  rl.lr, rl.warmup_steps, rl.kl_coef = 1e-2, 1, 0.0
  rl.mini_batch_size, rl.micro_batch_size = 8, 2
  rl.max_len, rl.bucket, rl.logprob_chunk = 256, 32, 64
  rl.remat, rl.compute_dtype, rl.ref_dtype = "none", "float32", "float32"
  return c


def test_a_three_role_game_with_its_own_tool_trains_one_step(model, tags, tmp_path):
  cfg, params, tok = model
  open_, close = tags
  calc = Calc(tok, open_, close)
  config = toy_config(str(tmp_path / "run"))
  learners = []

  def build(config):
    learner = Learner(cfg, config.rl, None, params=params)
    learners.append(learner)
    engine = RolloutEngine(cfg, tok, config.rollout, tools=[calc])
    ckpt = Checkpointer(os.path.join(config.workdir, "checkpoints"), save_every=1, keep=1,
                        async_save=False, model_config=cfg)
    return Components(config, learner, engine, ToyGame(engine, close), ckpt, 0)

  code = trainer.train(config, validate=lambda c: check_sections(c, ROLES), build_fn=build,
                       desc="toy", progress={"toy/reward_mean": "reward", "loss": "loss"})
  assert code == 0
  (rec,) = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
  # one optimizer step per role, in the game's order, from its own estimator's advantages
  assert [rec[f"updates/{r}"] for r in ROLES] == [1.0, 1.0, 1.0]
  assert np.isfinite(rec["loss"]) and rec["grad_norm"] > 0
  assert rec["toy/tool_calls"] >= 1 and calc.seen      # the tool ran inside the engine
  moved = jax.tree.map(lambda a, b: float(np.abs(np.asarray(a) - np.asarray(b)).max()),
                       learners[0].state["params"], params)
  assert max(jax.tree.leaves(moved)) > 0
  assert (tmp_path / "run" / "checkpoints" / "1").is_dir()


def test_a_role_the_game_does_not_declare_is_refused_before_the_build(tmp_path):
  config = toy_config(str(tmp_path / "run"))
  config.rl.roles = roles_config(asker="reinforce", answerer="grpo", judge="grpo")
  built = []
  try:
    trainer.train(config, validate=lambda c: check_sections(c, ROLES),
                  build_fn=lambda c: built.append(c), desc="toy", progress={})
  except Exception as e:   # noqa: BLE001 - the ConfigError of run.validate
    assert "rl.roles.judge" in str(e) and "asker" in str(e)
  else:
    raise AssertionError("an undeclared role was accepted")
  assert not built
