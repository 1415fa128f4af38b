"""SvS on Qwen2.5-32B-Instruct with DAPO-Math-17k: the original's 32B setting (`MasterVito/SvS`
scripts/run_svs_qwen2.5_32b.sh). Its hyper-parameters are the 3B script's (B=256, n=8, lr 1e-6,
no KL, clip 0.2/0.28, prompts 4096 / responses 8192, 30 epochs; `original_run_config`); what
differs is the model and the training set (DAPO-17k: 17,917 problems, answers all integers).

Launch (a TPU slice; docs/training.md#several-hosts):
  launch/run_tpu_pod.sh --config configs/svs_qwen2_5_32b_instruct.py:tpu,root=/data/svs
Launch (GPUs: at least two hosts of 8 x 141 GB; the optimizer state alone is ~0.5 TB):
  launch/run_gpu.sh --config configs/svs_qwen2_5_32b_instruct.py:gpu,root=/data/svs
Check the TPU fit (v5p-64 = 32 chips, mesh data 8 x tensor 4; docs/svs.md has the figures):
  PYTHONPATH=. .venv-tpu/bin/python launch/aot_compile.py \\
      --config configs/svs_qwen2_5_32b_instruct.py:tpu --preset qwen2.5-32b --topology v5p:2x4x4

Local files under `root`:
  models/Qwen2.5-32B-Instruct/         HF checkpoint
  data/dapo_math_17k.parquet           training problems (verl schema, as the original ships it)
  data/MATH-AIME-Evaluation.parquet    MATH-500, AIME 2024, AIME 2025

Not run in this repository.
"""
import ml_collections

from ssp_jax.config_loader import platform_and_root
from ssp_jax.svs.config import DAPO_17K, original_run_config

STEPS_PER_EPOCH = 70                  # ceil(17,917 DAPO-17k problems / 256)


def get_config(arg=None) -> ml_collections.ConfigDict:
  platform, root = platform_and_root(arg, "/data/svs", ("gpu", "tpu"))
  c = original_run_config(root, "Qwen2.5-32B-Instruct", DAPO_17K, STEPS_PER_EPOCH)
  c.workdir = f"{root}/runs/svs_qwen2_5_32b_instruct"
  c.mesh.axes = (("data", -1), ("tensor", 4))   # FSDP x tensor parallel 4 (40 heads, 8 KV)
  c.rollout.batch_size = 256 if platform == "tpu" else 128   # decode slots (KV-cache rows)
  c.rl.micro_batch_size = 8           # one row per data shard on 32 chips
  c.rl.remat = "full"                 # 64 layers x 12,288 tokens
  return c
