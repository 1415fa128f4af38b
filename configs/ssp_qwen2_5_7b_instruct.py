"""SSP on Qwen2.5-7B-Instruct: the paper's main setting (Table 1, hyper-parameters of App. A.1).

Launch (one TPU v5p-64 slice; every worker runs the same command, process 0 searches and
writes; docs/training.md#several-hosts — tested with 2 local CPU processes and 2 GPU processes,
not yet on a real pod). The sharded programs for this slice compile and fit
(`launch/aot_compile.py`, bench/RESULTS.md):
  TPU_NAME=my-v5p-64 ZONE=us-east5-a launch/run_tpu_pod.sh \\
      --config configs/ssp_qwen2_5_7b_instruct.py:tpu,root=/data/ssp \\
      --config.workdir=/data/ssp/runs/qwen2_5_7b
Launch (one host with 8 GPUs):
  launch/run_gpu.sh --config configs/ssp_qwen2_5_7b_instruct.py:gpu,root=/data/ssp \\
      --config.workdir=/data/ssp/runs/qwen2_5_7b

Local files under `root` (nothing is downloaded at run time):
  models/Qwen2.5-7B-Instruct/           HF checkpoint (config.json + *.safetensors + tokenizer)
  indexes/e5_wiki18_flat/               `ssp-jax index build --corpus corpus/wiki-18.jsonl
                                         --encoder models/e5-base-v2 --out indexes/e5_wiki18_flat`
  corpus/wiki-18.jsonl                  the Search-R1 Wikipedia 2018 dump ({"id", "contents"})
  data/train_answers_random_hop_50000_proposer.jsonl   the 50k-answer set of the paper
  models/Qwen2.5-32B-Instruct/          the RAG verifier and LLM judge of the paper (App. A), run
                                         frozen on the same mesh (its memory beside the 7B run is
                                         not checked by launch/aot_compile.py; not yet run)
  data/qa/<dataset>.jsonl               the seven QA test sets (FlashRAG JSONL) for eval
Or serve the index elsewhere (`ssp-jax retrieve`) and pass --config.retrieval.url=http://host:8000.
Or serve the 32B judge beside the job, as the original does (vLLM/SGLang/JetStream with an
OpenAI-compatible API), and pass
  --config.ssp.judge.source=http://judge-host:8000/v1 --config.ssp.rag.verifier=http://judge-host:8000/v1
  --config.ssp.judge.model=Qwen/Qwen2.5-32B-Instruct          (the served model's name)

What a run should show: the proposer's valid-question rate rising over the first tens of steps.
The paper reports +8.0 average points on the seven QA benchmarks for this setting (Table 1); no
run of this config in this project has reproduced or measured that yet.

Deliberate differences from the original that remain here are listed in docs/training.md
("Differences from the original").
"""
import ml_collections

from ssp_jax.config_loader import platform_and_root
from ssp_jax.ssp.config import base_run_config


def get_config(arg=None) -> ml_collections.ConfigDict:
  platform, root = platform_and_root(arg, "/data/ssp", ("tpu", "gpu"))   # "tpu,root=/data/ssp"
  c = base_run_config()
  c.workdir = f"{root}/runs/ssp_qwen2_5_7b_instruct"
  c.total_steps = 200                 # paper: 150-200 steps
  c.distributed = platform == "tpu"   # multi-host TPU slice: jax.distributed.initialize()
  c.model.path = f"{root}/models/Qwen2.5-7B-Instruct"
  c.retrieval.index_dir = f"{root}/indexes/e5_wiki18_flat"   # E5-base-v2, flat inner product
  c.ssp.answers_path = f"{root}/data/train_answers_random_hop_50000_proposer.jsonl"
  c.checkpoint.every = 5              # original save_freq
  c.checkpoint.keep = 3

  # One v5p-64 slice = 32 chips (JAX devices): FSDP over 8 x tensor parallel 4.
  # One 8-GPU host: FSDP over 2 x tensor parallel 4.
  c.mesh.axes = (("data", -1), ("tensor", 4))

  r = c.rollout
  r.batch_size = 256 if platform == "tpu" else 128   # decode slots (KV-cache rows)
  r.max_prompt_tokens = 4096          # paper: max prompt length 4096
  r.max_response_tokens = 8192        # paper: max response length 8192 (observations included)
  r.temperature = 1.0                 # paper: rollout temperature 1.0
  r.max_searches = 10                 # paper: at most 10 searches per trajectory
  r.topk = 3                          # paper: E5 top-3 documents per search
  r.max_obs_tokens = 0                # original: observations spliced untruncated

  rl = c.rl
  rl.lr = 1e-6                        # paper: learning rate 1e-6
  rl.warmup_steps = 5                 # original: 5 warm-up steps
  rl.kl_coef = 0.01                   # paper: KL coefficient 0.01 (k3, loss term)
  rl.temperature = 1.0
  rl.mini_batch_size = 128            # paper: mini-batch 128 prompts (256 -> 2 updates a role)
  rl.max_len = 4096 + 8192
  rl.micro_batch_size = 8             # multiple of the data axis (8 on TPU, 2 on GPU)
  rl.roles.proposer.estimator = "reinforce"  # paper: proposer REINFORCE (n=1)
  rl.roles.solver.estimator = "grpo"         # paper: solver GRPO (n=5)
  rl.update_schedule = "by_role"      # original: proposer update (1 optimizer step),
                                      # then the solver's (2) with old log-probs recomputed;
                                      # LR schedule steps once per update call
  rl.loss_agg = "seq-mean-token-mean"  # original: veRL's loss with one sequence per micro-batch
                                      # = mean over sequences of per-sequence token means

  s = c.ssp
  s.batch_size = 256                  # paper: global batch 256
  s.proposer_n = 1
  s.solver_n = 5
  s.temperature = 1.0
  s.fill.strategy = "replay"          # paper: replay buffer with periodic reset ...
  s.fill.reset_every = 10             # ... every 10 steps
  s.rag.noise_docs = 4                # paper: 4 noise documents in RAG verification
  judge_model = f"{root}/models/Qwen2.5-32B-Instruct"   # paper App. A: verifier and judge
  s.rag.verifier = judge_model        # the 32B model answers from the materials (original)
  s.rag.use_judge = True              # original: verifier EM misses go to the judge
  s.judge.source = judge_model        # one frozen copy serves both (loaded once)
  s.judge.model = "Qwen/Qwen2.5-32B-Instruct"   # the served name when the sources are a URL
  s.reward.solver = "em_then_judge"   # binary EM, then the LLM judge for non-matches
  s.reward.spam_max_tags = 10         # original: > 10 answer tags divides the reward by 4
  s.reward.invalid_proposal = 0.0     # paper B.3: -0.1 collapses training

  c.eval.judge = "ssp"                # report judge accuracy (the paper's metric) besides EM/F1
  c.eval.every_steps = 0              # set to 5 (original test_freq) with local QA files:
  c.eval.datasets = ml_collections.ConfigDict({
      name: f"{root}/data/qa/{name}.jsonl" for name in (
          "nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")})
  return c
