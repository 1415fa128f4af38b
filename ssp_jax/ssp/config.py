"""The `ssp` section of a run config (the game's knobs, paper Algorithm 1 and App. A) and the
SSP run config that `configs/*.py` start from (the game-neutral skeleton of ssp_jax/run/config.py
with the warm start, `ssp` and `eval` sections).

  from ssp_jax.ssp.config import base_run_config
  config = base_run_config()         # then --config.ssp.rag.noise_docs=7 etc.
"""
from __future__ import annotations

import ml_collections


def get_ssp_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.mode = "selfplay"           # selfplay | solver_only (frozen proposer) | proposer_only
  c.answers_path = ""           # answer-set JSONL ("" = ssp_jax/data/answers_wiki_sample.jsonl)
  c.default_hops = 2            # hops of answer lines without `search_turns`
  c.batch_size = 256            # answers (proposer prompts) per step; problems per step too
  c.proposer_n = 1              # proposals per answer (1 = REINFORCE; >1 for GRPO, paper B.5)
  c.solver_n = 5                # solver rollouts per problem (GRPO group)
  c.temperature = 1.0           # rollout temperature of both roles (the original's effective T)
  c.proposer_max_new_tokens = 0  # response budget per proposer rollout (0 = rollout config's)
  c.solver_max_new_tokens = 0    # response budget per solver rollout (0 = rollout config's)
  c.seed = 0                    # answer sampling, noise mixing, replay sampling (per step)
  c.samples_per_step = 16       # proposals written to samples_<step>.jsonl
  c.world_dir = ""              # a world directory (`ssp-jax world build`): log world/* metrics
                                # (grounded, hops, leak, copy8) of each proposal ("" = off)

  c.filters = ml_collections.ConfigDict()
  c.filters.min_chars = 10      # question length bounds after strip (original: 10..1000)
  c.filters.max_chars = 1000
  c.filters.min_words = 10      # whitespace words (original: 10)
  c.filters.min_searches = 2    # original rejects <= 1 search
  c.filters.min_documents = 1   # retrieved documents over the proposer trajectory
  c.filters.allow_duplicate_queries = False

  c.rag = ml_collections.ConfigDict()
  c.rag.enabled = True          # False: rule filters only (paper's "w/o RAG" ablation)
  c.rag.noise_docs = 4          # other trajectories' materials mixed in (paper: 0/1/4/7)
  c.rag.verifier = "policy"     # who answers from the materials: "policy" (this project's
                                # default, a difference: the original asks its external judge
                                # model, Qwen2.5-32B-Instruct in the paper), a local checkpoint
                                # path (frozen JAX model), or an OpenAI-compatible endpoint URL
                                # http://host:port/v1 (served model: judge.model)
  c.rag.max_new_tokens = 256    # verifier budget (short reasoning + <answer>)
  c.rag.temperature = 0.1       # original judge-model sampling temperature
  c.rag.use_judge = False       # EM misses go to the judge too (original code: True; a
                                # difference by default because the default judge is the policy)

  c.judge = ml_collections.ConfigDict()
  c.judge.source = "policy"     # "policy", a local checkpoint path, or an OpenAI-compatible
                                # endpoint URL (original: Qwen2.5-32B-Instruct served by vLLM)
  c.judge.model = ""            # served model name sent to a URL source (judge and verifier)
  c.judge.timeout_s = 30.0      # per socket wait (connect, a read) of a URL source (original
                                # OpenAI client: 30 s per request)
  c.judge.retries = 3           # retries on connection errors, timeouts, 5xx, 429 (original: 3)
  c.judge.max_concurrency = 32  # requests in flight to a URL source
  c.judge.call_deadline_s = 120.0  # total per call to a URL source: connect, send, every read,
                                   # all retries and their waits (a dripping server included)
  c.judge.step_deadline_s = 600.0  # endpoint time per step and client (judge; a URL verifier
                                   # has its own): once spent, the step's remaining calls are
                                   # not made (failures, counted in judge/deadline_skipped);
                                   # 0 = no limit
  c.judge.max_reply_bytes = 1 << 20  # longer replies are failures (judge/reply_too_large)
  c.judge.max_retry_after_s = 60.0   # longest Retry-After wait honoured on 429/503
  c.judge.api_key_env = ""      # NAME of the environment variable holding the API key, sent as
                                # "Authorization: Bearer ..." (e.g. "OPENAI_API_KEY"; "" = none);
                                # the key itself never goes in the config or the URL
  c.judge.max_new_tokens = 10
  c.judge.temperature = 0.1

  c.reward = ml_collections.ConfigDict()
  c.reward.solver = "em_then_judge"   # em | f1 | judge | em_then_judge
  c.reward.proposer = "1-acc"         # 1-acc | intermediate_difficulty
  c.reward.invalid_proposal = 0.0     # reward of a rejected proposal (paper: -0.1 collapses)
  c.reward.spam_max_tags = 10         # more answer tags than this divides the reward by 4
                                      # (original: always on at 10); 0 turns the rule off

  c.fill = ml_collections.ConfigDict()
  c.fill.strategy = "replay"    # replay | full_reuse | dummy | resample (paper B.1)
  c.fill.reset_every = 10       # replay: clear the whole buffer every N steps
  c.fill.max_solve_rate = 1.0   # replay draws problems with solve rate <= this (any as fallback)
  c.fill.capacity = 100_000     # buffer size cap (oldest dropped)
  c.fill.max_resample_rounds = 4  # resample: proposer rounds per step at most
  return c


def base_run_config() -> ml_collections.ConfigDict:
  """Every section of an SSP run config: the game-neutral skeleton (ssp_jax/run/config.py) with
  the warm start, the `ssp` section and the QA evaluation; run configs (`configs/*.py`) start from this and
  override fields."""
  from ssp_jax.eval.config import get_eval_config
  from ssp_jax.rl.config import get_rl_config
  from ssp_jax.run.config import base_run_config as run_base
  from ssp_jax.ssp.warmstart import get_warmstart_config
  c = run_base()
  c.workdir = "runs/ssp"        # metrics.jsonl, tb/, samples/, checkpoints/
  c.total_steps = 200           # SSP steps (each: proposer + solver rollouts + updates)
  c.warmstart = get_warmstart_config()  # format SFT before self-play (small models; not paper)
  c.rl = get_rl_config(roles={"proposer": "reinforce",   # one sample per answer: A = r
                               "solver": "grpo"})        # a group of solver_n per question
  c.ssp = get_ssp_config()
  c.eval = get_eval_config()    # the QA evaluation with search (ssp_jax/eval)
  c.eval.every_steps = 0        # in-training validation every N steps (0: off)
  c.eval.at_start = False       # and of the starting policy, logged as step 0 (fresh runs only)
  return c
