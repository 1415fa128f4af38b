"""The `search_r1` section of a run config and the run-config skeleton of the Search-R1 baseline
(`config.game = "search_r1"` makes `ssp-jax train` run it): RL of the solver alone, with the
search tool, on labeled questions, rewarded by exact match (docs/search_r1.md).

  from ssp_jax.search_r1.config import base_run_config
  config = base_run_config()         # then --config.search_r1.n=5 etc.

Equal compute with SSP (the comparison the paper makes): an SSP step rolls the solver out
`ssp.batch_size * ssp.proposer_n * ssp.solver_n` times (every valid, replayed or dummy problem of
the batch gets `solver_n` attempts); a Search-R1 step rolls it out `search_r1.batch_size *
search_r1.n` times. `from_ssp_config` turns an SSP run config into the Search-R1 run with the
same model, rollout and RL settings and the same solver rollouts per step (configs/
search_r1_world.py uses it; tests/test_search_r1.py checks the rule on the two world configs).
"""
from __future__ import annotations

import ml_collections


def get_search_r1_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.train_path = ""             # FlashRAG JSONL: question, golden_answers (+ id, hops); "" = the
                                # world's qa_train.jsonl (config.world.size > 0)
  c.batch_size = 256            # questions per step (GRPO groups)
  c.n = 5                       # solver rollouts per question (original Search-R1: 5)
  c.temperature = 1.0           # rollout temperature (as SSP's solver)
  c.max_new_tokens = 0          # response budget per rollout (0 = rollout.max_response_tokens)
  c.reward = "em"               # em | f1 | judge | em_then_judge (ssp_jax.ssp.rewards; the
                                # original Search-R1: em; judge modes use config.ssp.judge)
  c.spam_max_tags = 10          # more answer tags than this divides the reward by 4 (as SSP's
                                # solver; the original Search-R1 has no such rule: 0 turns it off)
  c.seed = 0                    # question order: a seeded permutation per epoch
  c.samples_per_step = 16       # questions written to samples_<step>.jsonl
  return c


def equal_rollout_batch(ssp) -> tuple[int, int]:
  """(search_r1.batch_size, search_r1.n) with the solver rollouts per step of the SSP section
  `ssp`: batch_size * n == ssp.batch_size * ssp.proposer_n * ssp.solver_n, groups as large."""
  return int(ssp.batch_size) * int(ssp.proposer_n), int(ssp.solver_n)


def from_ssp_config(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The Search-R1 run of an SSP run config `c` (changed in place and returned): same model,
  world, retrieval, rollout, RL, warm start and eval; the solver's temperature, budget, reward
  and equal rollouts per step. The `ssp` section stays for what the runs share: the judge of
  judge rewards and `eval.judge` (`ssp.judge`), and the warm start, whose demonstrations (and
  cache key) come from it, so both runs start from the same warm-started weights."""
  s = c.ssp
  c.game = "search_r1"          # `ssp-jax train` dispatches on it (ssp_jax/run/games.py)
  c.search_r1 = get_search_r1_config()
  r = c.search_r1
  r.batch_size, r.n = equal_rollout_batch(s)
  r.temperature = s.temperature
  r.max_new_tokens = s.solver_max_new_tokens
  r.reward = s.reward.solver
  r.spam_max_tags = s.reward.spam_max_tags
  r.seed = s.seed
  r.samples_per_step = s.samples_per_step
  c.rl.roles = ml_collections.ConfigDict({"solver": c.rl.roles.solver})   # the one role
  return c


def base_run_config() -> ml_collections.ConfigDict:
  """The SSP run skeleton with the Search-R1 game (EM reward, 256 questions x 5 rollouts)."""
  from ssp_jax.ssp.config import base_run_config as ssp_base
  c = ssp_base()
  c.workdir = "runs/search_r1"
  c.ssp.reward.solver = "em"
  return from_ssp_config(c)      # 256 questions x 5 = the SSP base's 256 x 1 x 5 rollouts
