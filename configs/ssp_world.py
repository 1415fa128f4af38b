"""SSP on a generated world (`ssp_jax.world`): its answers, its corpus and its held-out questions.

  ssp-jax train --config configs/ssp_world.py              # Qwen2.5-Coder-1.5B-Instruct, one H200
  ssp-jax train --config configs/ssp_world.py:0.5b         # Qwen2.5-Coder-0.5B-Instruct, one H200
  ssp-jax train --config configs/ssp_world.py:tiny         # embedded SmolLM2-135M, 2-core CPU
  ssp-jax train --config configs/ssp_world.py --config.world.seed=7      # another world
  ssp-jax eval --config configs/ssp_world.py --checkpoint RUN_DIR --limit 0 --out OUT

The world (`config.world`: seed, size) is built at build time, once (cached by
`ssp_jax.world.ensure_world`), never when this file is imported; `ssp_jax/world_config.py` fills
from it the answer set (`ssp.answers_path`), `ssp.world_dir`, the retriever (the MiniLM index
over the world's corpus, built on first use next to the world with the default index's encoder
settings) and the eval set (`world:qa_heldout`). In training, every `eval.every_steps` steps, a
seeded subset of `eval.limit` held-out questions is evaluated (step 0 included); `ssp-jax eval
--limit 0` evaluates the whole held-out set.

H200 variants: the settings of configs/ssp_small_h200.py (batch sizes, lengths, format warm
start, EM solver reward, one update per step), the 1.5B model by default. `:tiny`: the settings
of configs/tiny.py (the embedded model, its warm start) on a small world.
configs/search_r1_world.py is the Search-R1 baseline of each variant, with as many solver
rollouts per step.
"""
import os

import ml_collections

from ssp_jax.config_loader import load_config_file
from ssp_jax.world_config import get_world_config

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = ("1.5b", "0.5b", "tiny")
MODELS = {"1.5b": "registry:qwen2.5-coder-1.5b-instruct",
          "0.5b": "registry:qwen2.5-coder-0.5b-instruct",
          "tiny": ""}                          # "" = the embedded SmolLM2-135M-Instruct
WORLD_SIZE = {"1.5b": 5000, "0.5b": 5000, "tiny": 200}
HELDOUT_EVAL = 300                             # in-training eval questions (seeded subset)


def variant_of(arg) -> str:
  v = (arg or "1.5b").strip()
  if v not in VARIANTS:
    raise ValueError(f"config arg {arg!r}: use one of {', '.join(VARIANTS)} (default 1.5b)")
  return v


def get_config(arg=None) -> ml_collections.ConfigDict:
  v = variant_of(arg)
  base = "tiny.py" if v == "tiny" else "ssp_small_h200.py"
  c = load_config_file(os.path.join(HERE, base))
  c.workdir = "runs/ssp_world" + ("" if v == "1.5b" else "_" + v.replace(".", ""))
  c.model.path = MODELS[v]
  c.world = get_world_config()
  c.world.size = WORLD_SIZE[v]
  c.retrieval.index_dir = ""                   # the world's index (built on first use)
  # the warm start's demonstrations come from the world's train questions: many forms and 1-3
  # hops, not the one fill-in-the-blank form the proposer otherwise learns and keeps
  # (ssp_jax/ssp/warmstart/world_demos.py; a difference from the paper, like the warm start)
  c.warmstart.demos = "world"

  e = c.eval
  e.datasets = ml_collections.ConfigDict({"world_heldout": "world:qa_heldout"})
  e.limit = HELDOUT_EVAL
  e.seed = 0
  if v == "tiny":
    e.limit = 8                                # a few questions: 2 CPU cores
    e.max_new_tokens = 320
  else:
    e.every_steps = 10                         # 7 evaluations of 60 steps, the first at step 0
    e.at_start = True
    # A 3-hop question needs 3 searches of up to rollout.max_obs_tokens=256 observation tokens
    # each, and the response budget counts them: at ssp_small_h200's 512 tokens every two-search
    # answer ran out (docs/results.md, 2026-12-02), so both solvers learned to search once.
    c.ssp.solver_max_new_tokens = 1024
    e.max_new_tokens = 1024
  return c
