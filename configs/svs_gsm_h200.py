"""SvS (or plain GRPO, the RLVR baseline) on generated grade-school math, one H200, ~8 minutes.

Model: Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF joined from registry parts,
`registry:qwen2.5-coder-0.5b-instruct`; docs/models.md), dequantised to float32 master params,
bf16 rollouts and bf16 compute. Problems: ssp_jax/data/gsm_gen_train.jsonl (4096 problems of
ssp_jax/svs/gsm.py); held-out: ssp_jax/data/gsm_gen_heldout.jsonl (256 problems, disjoint texts,
same templates). GRPO groups of 8 solutions per problem.

  ssp-jax eval  --config configs/svs_gsm_h200.py --out runs/gsm_eval_before          # before
  ssp-jax train --config configs/svs_gsm_h200.py                                     # SvS
  ssp-jax train --config configs/svs_gsm_h200.py:rlvr                                # RLVR baseline
  ssp-jax eval  --config configs/svs_gsm_h200.py --checkpoint runs/svs_gsm_h200 \\
      --out runs/gsm_eval_after                                                        # after
  ssp-jax plot runs/svs_gsm_h200 --out runs/svs_gsm_h200/plots

`:rlvr` sets `svs.synthesis = False` and the workdir runs/rlvr_gsm_h200 (the same as
`--config.svs.synthesis=False --config.workdir=...`).

Sizing (an estimate from bench/RESULTS.md, not a measurement of this config): 32 problems x 8
solutions = 256 OQA rollouts = one wave of the 256 decode slots (Qwen2.5-0.5B shape: 2.6 ms per
decode step at batch 256, so a 512-token wave is ~1.5-3 s); with synthesis, at most ~40 correct
responses of under-performing problems x 4 syntheses and 8 SPA solutions each (<= 1280 rollouts,
~5 waves, ~10 s); the update is <= ~1,500 rows of <= 1,536 tokens with the 1.5B train step's
44.5k tok/s divided by the model's ~3x smaller FLOPs (~5-10 s). About 15-25 s a SvS step after
compilation and ~8-12 s a RLVR step: 30 steps is ~8-12 minutes of SvS. Check `time/step` in
metrics.jsonl after a few steps and set `--config.total_steps` to the time you have.
"""
import ml_collections

from ssp_jax.svs import gsm
from ssp_jax.svs.config import base_run_config


def get_config(arg=None) -> ml_collections.ConfigDict:
  variant = (arg or "svs").strip()
  if variant not in ("svs", "rlvr"):
    raise ValueError(f"configs/svs_gsm_h200.py:{variant}: use :svs (default) or :rlvr")
  c = base_run_config()
  c.workdir = f"runs/{variant}_gsm_h200"
  c.total_steps = 30
  c.model.path = "registry:qwen2.5-coder-0.5b-instruct"
  c.checkpoint.every = 10
  c.checkpoint.keep = 2
  c.mesh.axes = (("data", -1), ("tensor", 1))

  r = c.rollout
  r.batch_size = 256                  # decode slots: one step's 32 x 8 OQA rollouts at once
  r.max_prompt_tokens = 1024          # synthesis prompt (~300 tokens) + a <= 512-token solution
  r.max_response_tokens = 512
  r.cache_min_len = 512
  r.dtype = "bfloat16"
  r.cache_dtype = "bfloat16"
  r.temperature = 1.0

  rl = c.rl
  rl.lr = 2e-6                        # above SvS's 1e-6 (3B, 1400 steps): a 30-step run
  rl.warmup_steps = 2
  rl.kl_coef = 0.0                    # SvS / DAPO style: no KL
  rl.mini_batch_size = 64             # groups per optimizer update
  rl.micro_batch_size = 32            # 32 x 1536 tokens per accumulation step
  rl.max_len = 1024 + 512
  rl.bucket = 128
  rl.remat = "dots"                   # fastest where memory allows (bench/RESULTS.md)
  rl.compute_dtype = "bfloat16"
  rl.param_dtype = "float32"
  rl.logprob_chunk = 512

  s = c.svs
  s.synthesis = variant == "svs"
  s.train_path = gsm.TRAIN_PATH
  s.batch_size = 32                   # problems per step
  s.n = 8                             # GRPO group: 8 solutions per problem (OQA and SPA)
  s.synth_n = 4                       # syntheses per correct response (paper: 8; cost)
  s.solve_max_new_tokens = 512
  s.synth_max_new_tokens = 256
  s.samples_per_step = 8

  e = c.eval
  e.datasets = ml_collections.ConfigDict({"gsm_heldout": gsm.HELDOUT_PATH})
  e.limit = 0                         # all 256 held-out problems
  e.n = 8                             # samples per problem: pass@1 (= mean accuracy) and pass@8
  e.ks = (1, 8)
  e.temperature = 1.0
  e.top_p = 1.0
  e.max_new_tokens = 512
  e.every_steps = 0                   # evaluate before/after with `ssp-jax eval` (above)
  return c
