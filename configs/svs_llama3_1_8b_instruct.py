"""SvS on Llama-3.1-8B-Instruct: the original's LLaMA setting (`MasterVito/SvS`
scripts/run_svs_llama3.1_8b.sh). Its hyper-parameters and data are the 3B script's (MATH-12k,
B=256, n=8, lr 1e-6, no KL, clip 0.2/0.28, prompts 4096 / responses 8192, 30 epochs;
`original_run_config`); what differs is the model (and its chat template: `model.chat_format`
follows the checkpoint's tokenizer).

Launch (one host with 8 GPUs):
  launch/run_gpu.sh --config configs/svs_llama3_1_8b_instruct.py:gpu,root=/data/svs
Launch (a TPU slice):
  launch/run_tpu_pod.sh --config configs/svs_llama3_1_8b_instruct.py:tpu,root=/data/svs
Check the TPU fit (v5p-32 = 16 chips, mesh data 8 x tensor 2; docs/svs.md has the figures):
  PYTHONPATH=. .venv-tpu/bin/python launch/aot_compile.py \\
      --config configs/svs_llama3_1_8b_instruct.py:tpu --preset llama-3.1-8b --topology v5p:2x2x4

Local files under `root`:
  models/Llama-3.1-8B-Instruct/        HF checkpoint
  data/MATH_12k.parquet                training problems (verl schema)
  data/MATH-AIME-Evaluation.parquet    MATH-500, AIME 2024, AIME 2025

Not run in this repository.
"""
import ml_collections

from ssp_jax.config_loader import platform_and_root
from ssp_jax.svs.config import MATH_12K, original_run_config

STEPS_PER_EPOCH = 47                  # ceil(12,000 MATH-12k problems / 256)


def get_config(arg=None) -> ml_collections.ConfigDict:
  platform, root = platform_and_root(arg, "/data/svs", ("gpu", "tpu"))
  c = original_run_config(root, "Llama-3.1-8B-Instruct", MATH_12K, STEPS_PER_EPOCH)
  c.workdir = f"{root}/runs/svs_llama3_1_8b_instruct"
  c.mesh.axes = (("data", -1), ("tensor", 2))   # FSDP x tensor parallel 2 (8 GPUs: 4 x 2)
  c.rollout.batch_size = 256 if platform == "tpu" else 128   # decode slots (KV-cache rows)
  c.rl.micro_batch_size = 8           # multiple of the data axis
  c.rl.remat = "full"
  return c
