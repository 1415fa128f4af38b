"""The `svs` and `eval` sections of an SvS run config, and the run-config skeleton that
`configs/svs_*.py` start from (`config.game = "svs"` makes `ssp-jax train` run the SvS trainer).

  from ssp_jax.svs.config import base_run_config
  config = base_run_config()         # then --config.svs.n=16 etc.

Defaults are the original SvS run's (the `MasterVito/SvS` scripts) unless a
comment says otherwise.
"""
from __future__ import annotations

import ml_collections


def get_svs_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.train_path = ""             # JSONL or parquet, flat or verl schema ("" = builtin:math_sample)
  c.strip_instructions = True   # drop instruction suffixes/prefixes already in the data (data.py)
  c.shuffle = True              # a seeded permutation per epoch (False: file order)
  c.seed = 0                    # data order and the VPS subsampling
  c.synthesis = True            # False: the RLVR baseline (GRPO on the problems, no VPS/SPA)
  c.batch_size = 256            # problems per step (original: 256)
  c.n = 8                       # solutions per problem, in OQA and in SPA (original: 8)
  c.synth_n = 8                 # synthetic problems per correct response (original: 8)
  c.under_lower = 0.125         # under-performing: under_lower <= accuracy <= under_upper
  c.under_upper = 0.5           # (data.under_performing_acc_lower/upper)
  c.positive_lower = 0.125      # VPS reward 1 iff n*positive_lower <= SPA correct count
  c.positive_upper = 0.625      # <= n*positive_upper (data.positive_synthesis_acc_lower/upper)
  c.vps_training_ratio = 1.0    # fraction of positive VPS groups trained (r2q_training_ratio)
  c.temperature = 1.0           # rollout temperature of every section (original: 1.0)
  c.solve_max_new_tokens = 0    # OQA/SPA response budget (0 = rollout.max_response_tokens)
  c.synth_max_new_tokens = 0    # VPS response budget (0 = rollout.max_response_tokens)
  c.max_synthesis_prompt_tokens = 0  # longer VPS prompts are dropped (0 = rollout's max prompt)
  c.synthesis_prompt = "original"   # VPS wording: "original" (does not ask to hide the answer,
  #                                   as the original) | "no_spoilers" (difference: also asks)
  c.problem_filter = "tokens"   # synthetic problems kept: "tokens" (original: the solving prompt
  #   fits in max_problem_prompt_tokens) | "chars" (difference: problem_min/max_chars characters)
  c.max_problem_prompt_tokens = 0   # "tokens" limit (0 = rollout.max_prompt_tokens; original 4096)
  c.problem_min_chars = 10      # "chars" filter of an extracted synthetic problem
  c.problem_max_chars = 2000
  c.skip_without_synthesis = True   # original: no valid synthetic problem -> skip the whole step;
  #                                   False (difference): still train the OQA groups
  c.samples_per_step = 8        # problems written to samples_<step>.jsonl
  c.grader_workers = 0          # grading worker processes for sympy/math_verify (0/1: one)
  c.grader_answer_timeout_s = 5.0   # seconds of symbolic grading per answer; over it: killed,
  #                                   scored 0, counted in grade/timeouts (original: 60 s)
  c.grader_batch_timeout_s = 300.0  # seconds per grading call (a step's batch); 0 = unbounded
  return c


def get_svs_eval_config() -> ml_collections.ConfigDict:
  """`config.eval` of an SvS run: sampled solutions per problem, mean accuracy and pass@k.

  `ssp-jax eval --config configs/svs_tiny.py --out DIR` and the in-training validation read it.
  The original evaluates with T=1.0, top_p=0.95, max_tokens=2048 and reports avg@n per source;
  the paper reports Pass@32 (`n=32, ks=(1, 32)`).
  """
  c = ml_collections.ConfigDict()
  c.datasets = ml_collections.ConfigDict({"math_sample": "builtin:math_sample"})  # name -> JSONL
  c.limit = 0                   # problems per dataset, hash-sampled with `seed` (0 = all)
  c.seed = 0                    # subsampling and sampling seed
  c.n = 4                       # sampled solutions per problem
  c.ks = (1, 4)                 # pass@k reported for each k <= n
  c.temperature = 1.0
  c.top_p = 0.95
  c.max_new_tokens = 0          # 0 = rollout.max_response_tokens (original: 2048)
  c.batch_size = 0              # problems per rollout-engine call (0 = a dataset per call)
  c.every_steps = 0             # in-training validation every N steps (0: off)
  c.at_start = False            # and of the starting policy, logged as step 0 (fresh runs only)
  return c


def base_run_config() -> ml_collections.ConfigDict:
  """The game-neutral run skeleton (ssp_jax/run/config.py: model, mesh, checkpoint, rollout, rl
  sections) with the SvS game: no retriever; GRPO for both roles, no KL, clip 0.2/0.28 (the
  original's scripts)."""
  from ssp_jax.rl.roles import roles_config
  from ssp_jax.run.config import base_run_config as run_base
  c = run_base()
  del c.retrieval
  c.game = "svs"                # `ssp-jax train` dispatches on it ("ssp" when absent)
  c.workdir = "runs/svs"
  c.total_steps = 300           # steps (one batch of problems each, skipped steps included)
  c.svs = get_svs_config()
  c.eval = get_svs_eval_config()
  c.rollout.use_search = False  # math solving has no tool
  c.rollout.stop = ()           # responses end at eos / end-of-turn
  rl = c.rl
  rl.kl_coef = 0.0              # no KL loss (and no reference model)
  rl.clip_low, rl.clip_high = 0.2, 0.28
  rl.loss_agg = "token-mean"
  rl.roles = roles_config(solver="grpo",        # OQA/SPA rows: group = the problem
                          synthesizer="grpo")   # VPS rows: group = the source response
  rl.mini_batch_size = 256      # original ppo_mini_batch_size (groups per update here)
  return c


# The original's data files (MasterVito/SvS `data/`), expected under `<root>/data/`.
MATH_12K = "MATH_12k.parquet"
DAPO_17K = "dapo_math_17k.parquet"
EVAL_FILE = "MATH-AIME-Evaluation.parquet"   # MATH-500, AIME-2024-30, AIME-2025-30


def original_run_config(root: str, model_dir: str, train_file: str,
                        steps_per_epoch: int) -> ml_collections.ConfigDict:
  """What the original's three scripts (`scripts/run_svs_{qwen2.5_3b,qwen2.5_32b,llama3.1_8b}.sh`)
  share: B=256 problems x n=8, 8 syntheses per correct response, under-performing [0.125, 0.5],
  positive [0.125, 0.625], GRPO, lr 1e-6 without warm-up, no KL, clip 0.2/0.28, token-mean,
  entropy 0, mini-batch 256, prompts 4,096 and responses 8,192 tokens, 30 epochs, and the
  original's filters and skip rule (synthetic problems limited by their solving prompt's tokens,
  a step without a valid synthetic problem skipped, a synthesis prompt that does not ask to hide
  the answer). Model-specific parts (mesh, micro-batches, decode slots) are the config file's."""
  c = base_run_config()
  c.total_steps = 30 * steps_per_epoch         # original: total_epochs 30
  c.model.path = f"{root}/models/{model_dir}"
  c.checkpoint.every = 4                       # original: save_freq 4
  c.checkpoint.keep = 3

  r = c.rollout
  r.max_prompt_tokens = 4096                   # original: max_prompt_length 4096
  r.max_response_tokens = 8192                 # original: max_response_length 8192
  r.temperature = 1.0

  rl = c.rl
  rl.lr = 1e-6                                 # original: actor lr 1e-6
  rl.warmup_steps = 0                          # veRL default: no warm-up
  rl.kl_coef = 0.0                             # original: no KL loss, no KL reward
  rl.clip_low, rl.clip_high = 0.2, 0.28
  rl.loss_agg = "token-mean"
  rl.entropy_coef = 0.0
  rl.mini_batch_size = 256                     # original: ppo_mini_batch_size 256
  rl.max_len = 4096 + 8192

  s = c.svs
  s.train_path = f"{root}/data/{train_file}"
  s.batch_size = 256                           # original: train_batch_size 256
  s.n = 8                                      # original: rollout.n 8 (OQA and SPA)
  s.synth_n = 8                                # original: rollout.n syntheses per response
  s.under_lower, s.under_upper = 0.125, 0.5
  s.positive_lower, s.positive_upper = 0.125, 0.625
  s.synthesis_prompt = "original"
  s.problem_filter = "tokens"                  # solving prompt <= max_prompt_length tokens
  s.max_problem_prompt_tokens = 4096
  s.skip_without_synthesis = True
  s.grader_workers = 16                        # original: 64 reward processes per node

  e = c.eval
  e.datasets = ml_collections.ConfigDict({"math_aime": f"{root}/data/{EVAL_FILE}"})
  e.n = 32                                     # the paper's Pass@32
  e.ks = (1, 8, 32)
  e.max_new_tokens = 8192
  e.every_steps = 0                            # original: test_freq 8 with n=1; set it to run
  return c
