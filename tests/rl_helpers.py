"""Shared fixtures of the rl tests: a tiny untied model, an rl config and small batches."""
import numpy as np

import models
from ssp_jax.rl import batch as batch_lib
from ssp_jax.rl import config as rl_config
from ssp_jax.types import Trajectory

CFG = models.ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                         num_heads=4, num_kv_heads=2, head_dim=8, tie_embeddings=False)


def rl_cfg(**kw):
  c = rl_config.get_rl_config(roles={"proposer": "reinforce", "solver": "grpo"})
  c.compute_dtype = "float32"
  c.ref_dtype = "float32"
  c.micro_batch_size = 2
  c.mini_batch_size = 8
  c.lr = 1e-2
  c.warmup_steps = 1
  c.kl_coef = 0.1
  c.logprob_chunk = 8
  c.remat = "full"
  c.update(kw)
  return c


def trajectories(n=6, seed=0):
  """Proposer row 0, solver rows 1..n-1; an observation chunk (mask 0) in every response."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    p = list(rng.integers(1, 64, 3 + i % 3))
    r = list(rng.integers(1, 64, 10 + i))
    mask = [1] * 4 + [0] * 3 + [1] * (len(r) - 7)
    out.append(Trajectory(prompt_ids=p, response_ids=r, loss_mask=mask,
                          logprobs=list(-rng.random(len(r)))))
  return out


def make_batch(n=6, seed=0, bucket=16):
  rng = np.random.default_rng(seed + 100)
  roles = [0] + [1] * (n - 1)
  prompt = [0] + [1 + (i - 1) // 2 for i in range(1, n)]
  return batch_lib.make_batch(trajectories(n, seed), rng.normal(size=n), roles,
                              prompt_index=prompt, bucket=bucket)


def step_rows(rl, game, out, bucket=64, max_len=2048):
  """(training batch, advantages [N]) of a game's StepOutput `out`, as the training loop makes
  them (`game`: the game's module or object, with ROLES)."""
  from ssp_jax.rl.roles import RoleTable
  from ssp_jax.rl.schedule import step_batch
  table = RoleTable.from_config(rl, game.ROLES)
  return step_batch(table, out.trajectories, out.rewards, out.roles, out.prompt_index,
                    bucket=bucket, max_len=max_len)
