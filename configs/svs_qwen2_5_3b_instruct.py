"""SvS on Qwen2.5-3B-Instruct: the original's 3B setting (`MasterVito/SvS`
scripts/run_svs_qwen2.5_3b.sh): 256 problems a step, 8 solutions each, 8
syntheses per correct response of an under-performing problem, GRPO for every section, lr 1e-6,
no KL, clip 0.2/0.28, token-mean loss, prompts up to 4096 and responses up to 8192 tokens, 30
epochs over MATH-12k, the original's filters and skip rule (`original_run_config`).

Launch (one host with 8 GPUs):
  launch/run_gpu.sh --config configs/svs_qwen2_5_3b_instruct.py:gpu,root=/data/svs \\
      --config.workdir=/data/svs/runs/qwen2_5_3b
Launch (a single-host TPU VM; for a multi-host slice see docs/training.md#several-hosts):
  SSP_PIP_EXTRA="jax[tpu]" launch/run_local.sh \\
      --config configs/svs_qwen2_5_3b_instruct.py:tpu,root=/data/svs
Evaluate (mean accuracy and pass@k per data source):
  ssp-jax eval --config configs/svs_qwen2_5_3b_instruct.py:gpu,root=/data/svs \\
      --checkpoint /data/svs/runs/qwen2_5_3b --out /data/svs/runs/eval_3b
Check the TPU fit (v5p-8, mesh data 4 x tensor 2; docs/svs.md has the figures):
  PYTHONPATH=. .venv-tpu/bin/python launch/aot_compile.py \\
      --config configs/svs_qwen2_5_3b_instruct.py:tpu --preset qwen2.5-3b --topology v5p:2x2x2

Local files under `root` (nothing is downloaded at run time), the original's files as they are:
  models/Qwen2.5-3B-Instruct/          HF checkpoint (config.json + *.safetensors + tokenizer)
  data/MATH_12k.parquet                training problems (verl schema)
  data/MATH-AIME-Evaluation.parquet    MATH-500, AIME 2024, AIME 2025 (verl schema; the
                                       original's .jsonl of {question, ref_answer, data_source}
                                       works too: --config.eval.datasets.math_aime=FILE)

Expected (the SvS paper, arXiv 2508.14029): at 3B about +2.9 points of average Pass@1 over
plain RLVR (Table 2), larger Pass@32 gains, and a policy entropy that stays in a band instead of
collapsing (Fig. 5). Not run in this repository.
"""
import ml_collections

from ssp_jax.config_loader import platform_and_root
from ssp_jax.svs.config import MATH_12K, original_run_config

STEPS_PER_EPOCH = 47                  # ceil(12,000 MATH-12k problems / 256)


def get_config(arg=None) -> ml_collections.ConfigDict:
  platform, root = platform_and_root(arg, "/data/svs", ("gpu", "tpu"))   # "gpu,root=/data/svs"
  c = original_run_config(root, "Qwen2.5-3B-Instruct", MATH_12K, STEPS_PER_EPOCH)
  c.workdir = f"{root}/runs/svs_qwen2_5_3b_instruct"
  c.mesh.axes = (("data", -1), ("tensor", 2))   # FSDP x tensor parallel 2 (8 GPUs: 4 x 2)
  c.rollout.batch_size = 256 if platform == "tpu" else 128   # decode slots (KV-cache rows)
  c.rl.micro_batch_size = 8           # multiple of the data axis
  return c
