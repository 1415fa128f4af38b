"""SvS on Qwen2.5-3B-Instruct: the original's 3B setting (`MasterVito/SvS` scripts; anchors.md
2.1/2.2): 256 problems a step, 8 solutions each, 8 syntheses per correct response of an
under-performing problem, GRPO for every section, lr 1e-6, no KL, clip 0.2/0.28, token-mean loss,
prompts up to 4096 and responses up to 8192 tokens, 30 epochs over MATH-12k.

Launch (one host with 8 GPUs):
  launch/run_gpu.sh --config configs/svs_qwen2_5_3b_instruct.py:gpu,root=/data/svs \\
      --config.workdir=/data/svs/runs/qwen2_5_3b
Launch (a single-host TPU VM; for a multi-host slice see docs/training.md#several-hosts):
  SSP_PIP_EXTRA="jax[tpu]" launch/run_local.sh \\
      --config configs/svs_qwen2_5_3b_instruct.py:tpu,root=/data/svs
Evaluate (mean accuracy and pass@k per data source):
  ssp-jax eval --config configs/svs_qwen2_5_3b_instruct.py:gpu,root=/data/svs \\
      --checkpoint /data/svs/runs/qwen2_5_3b --out /data/svs/runs/eval_3b

Local files under `root` (nothing is downloaded at run time):
  models/Qwen2.5-3B-Instruct/      HF checkpoint (config.json + *.safetensors + tokenizer)
  data/math_12k.jsonl              MATH-12k as JSONL {"problem", "answer"} (the original ships
                                   parquet: convert it, e.g. pandas.read_parquet(...).to_json(
                                   path, orient="records", lines=True))
  data/math_aime_eval.jsonl        {"question", "ref_answer", "data_source"} (MATH-500, AIME)

Expected (paper notes, ../shared/papers/003_*): at 3B about +2.9 points of average Pass@1 over
plain RLVR (Table 2), larger Pass@32 gains, and a policy entropy that stays in a band instead of
collapsing (Fig. 5). Not run in this repository.
"""
import ml_collections

from ssp_jax.config_loader import platform_and_root
from ssp_jax.svs.config import base_run_config

STEPS_PER_EPOCH = 47                  # ceil(12,000 MATH-12k problems / 256)


def get_config(arg=None) -> ml_collections.ConfigDict:
  platform, root = platform_and_root(arg, "/data/svs", ("gpu", "tpu"))   # "gpu,root=/data/svs"
  c = base_run_config()
  c.workdir = f"{root}/runs/svs_qwen2_5_3b_instruct"
  c.total_steps = 30 * STEPS_PER_EPOCH  # original: 30 epochs
  c.model.path = f"{root}/models/Qwen2.5-3B-Instruct"
  c.checkpoint.every = 10
  c.checkpoint.keep = 3
  c.mesh.axes = (("data", -1), ("tensor", 2))   # FSDP x tensor parallel 2 (8 GPUs: 4 x 2)

  r = c.rollout
  r.batch_size = 256 if platform == "tpu" else 128   # decode slots (KV-cache rows)
  r.max_prompt_tokens = 4096          # original: max_prompt_length 4096
  r.max_response_tokens = 8192        # original: max_response_length 8192
  r.temperature = 1.0

  rl = c.rl
  rl.lr = 1e-6                        # original: actor lr 1e-6
  rl.warmup_steps = 0                 # veRL default: no warm-up
  rl.kl_coef = 0.0                    # original: no KL loss, no KL reward
  rl.clip_low, rl.clip_high = 0.2, 0.28
  rl.loss_agg = "token-mean"
  rl.entropy_coef = 0.0
  rl.mini_batch_size = 256            # original: ppo_mini_batch_size 256
  rl.micro_batch_size = 8             # multiple of the data axis
  rl.max_len = 4096 + 8192

  s = c.svs
  s.train_path = f"{root}/data/math_12k.jsonl"
  s.batch_size = 256                  # original: train_batch_size 256
  s.n = 8                             # original: rollout.n 8 (OQA and SPA)
  s.synth_n = 8                       # original: 8 syntheses per correct response
  s.under_lower, s.under_upper = 0.125, 0.5
  s.positive_lower, s.positive_upper = 0.125, 0.625

  e = c.eval
  e.datasets = ml_collections.ConfigDict({"math_aime": f"{root}/data/math_aime_eval.jsonl"})
  e.n = 32                            # the paper's Pass@32
  e.ks = (1, 8, 32)
  e.max_new_tokens = 8192
  e.every_steps = 0                   # set e.g. 50 with the local eval file
  return c
