"""The Search-R1 baseline on a generated world: the solver alone, GRPO with the search tool and
an exact-match reward, trained on the world's labeled questions (qa_train.jsonl), at equal steps
and equal solver rollouts per step with configs/ssp_world.py (docs/search_r1.md).

  ssp-jax train --config configs/search_r1_world.py         # Qwen2.5-Coder-1.5B-Instruct, one H200
  ssp-jax train --config configs/search_r1_world.py:0.5b    # Qwen2.5-Coder-0.5B-Instruct
  ssp-jax train --config configs/search_r1_world.py:tiny    # embedded SmolLM2-135M, 2-core CPU
  ssp-jax eval --config configs/search_r1_world.py --checkpoint RUN_DIR --limit 0 --out OUT

Each variant is configs/ssp_world.py's with `game = "search_r1"`: the same model, world,
retriever, rollout and RL settings, warm start (same cache key, so both runs start from the same
weights), total steps and eval. The solver's rollouts per step are equal:

  search_r1.batch_size * search_r1.n == ssp.batch_size * ssp.proposer_n * ssp.solver_n

(1.5b/0.5b: 64 questions x 5 = 64 answers x 1 proposal x 5 attempts; tiny: 2 x 2), as are the
solver's temperature, response budget and reward (EM).
"""
import os

import ml_collections

from ssp_jax.config_loader import load_config_file
from ssp_jax.search_r1.config import from_ssp_config

HERE = os.path.dirname(os.path.abspath(__file__))


def get_config(arg=None) -> ml_collections.ConfigDict:
  spec = os.path.join(HERE, "ssp_world.py") + (f":{arg}" if arg else "")
  c = from_ssp_config(load_config_file(spec))
  c.workdir = c.workdir.replace("runs/ssp_world", "runs/search_r1_world")
  return c
