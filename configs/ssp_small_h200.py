"""SSP self-play learning run on one H200 with Qwen2.5-Coder-0.5B-Instruct (offline registry parts),
warm-started.

A short run to see whether the game's signals move (valid-question rate, solver reward, searches)
and whether held-out EM/F1 on the shipped 141 questions changes; results in docs/results.md.
It is not the paper's setting (that is configs/ssp_qwen2_5_7b_instruct.py): a 0.5B policy, the
format warm start (a difference, `warmstart.enabled`), EM solver reward (a 0.5B model is a poor judge),
a BM25 index over the shipped corpus (`:root=DIR` -> DIR/bm25, built with
`ssp-jax index build --corpus retrieval/data/wiki_sample.jsonl.gz --encoder bm25 --out DIR/bm25`).

  ssp-jax train --config configs/ssp_small_h200.py:root=/tmp/ssp
  ssp-jax eval --config configs/ssp_small_h200.py:root=/tmp/ssp --checkpoint RUN_DIR --out OUT
"""
import os

import ml_collections

from ssp_jax.ssp.config import base_run_config


def get_config(arg=None) -> ml_collections.ConfigDict:
  root = "/tmp/ssp"
  for part in filter(None, (arg or "").split(",")):
    if not part.startswith("root="):
      raise ValueError(f"config arg {part!r}: use root=DIR (DIR/bm25 holds the BM25 index)")
    root = part[len("root="):]
  c = base_run_config()
  c.workdir = os.path.join(root, "run")
  c.total_steps = 60
  c.checkpoint.every = 5
  c.checkpoint.keep = 2
  c.retrieval.index_dir = os.path.join(root, "bm25")
  c.model.path = "registry:qwen2.5-coder-0.5b-instruct"

  r = c.rollout
  r.batch_size = 256
  r.max_prompt_tokens = 3072    # the RAG verifier's prompt: its ~1,000 tokens of documents and
                                # one noise proposal's (a 1,024 cap cut the instructions off)
  r.max_response_tokens = 1024
  r.cache_min_len = 512
  r.steps_per_call = 64
  r.max_searches = 4
  r.max_obs_tokens = 256
  r.topk = 3
  r.kv_layout = "paged"         # paged KV + the Pallas kernels: 36.8k policy tok/s against 27.0k
                                # for the dense layout (2026-12-02) at 256 slots, 1,024-token
                                # responses on an H200, and its programs compile ahead (rollout.compile_ahead;
                                # bench/RESULTS.md, issue 26); the run of docs/results.md
                                # (2026-12-01) used the dense layout

  rl = c.rl
  rl.lr = 3e-6                 # the paper's 1e-6 is for 7B; a 0.5B model moves slowly at it
  rl.warmup_steps = 2
  rl.mini_batch_size = 256     # one optimizer update per step
  rl.micro_batch_size = 8       # 8 packed rows of 4,096 tokens a micro-batch
  rl.pack = True                # packed rows of rl.pack_len tokens: the update of one step's
  rl.pack_len = 4096            # length mix took 4.0 s on an H200, against 7.8 s with rows
                                # padded to the longest (bench/RESULTS.md, issue 26); the run
                                # of docs/results.md (2026-12-01) had rl.pack=False
  rl.max_len = 4096             # above rollout.max_prompt_tokens (the trainer checks)
  rl.remat = "dots_flash"       # save the matmul outputs and cuDNN attention's forward; recompute
                                # the elementwise ops: this update took 2.74 s on an H100 against
                                # 3.37 s with "none" (4 rows a micro-batch; bench/RESULTS.md,
                                # 2026-12-06): saving every intermediate moves more bytes
  rl.attn_impl = "auto"         # cuDNN flash attention in its packed layout on the GPU (the
                                # update benchmark's setting; "xla" built [T, T] masks)

  s = c.ssp
  s.batch_size = 64            # answers per step
  s.solver_n = 5
  s.proposer_max_new_tokens = 768
  s.solver_max_new_tokens = 512
  s.samples_per_step = 8
  s.rag.max_new_tokens = 128
  s.rag.noise_docs = 1          # one of the paper's ablation settings (0/1/4/7; default 4): with
                                # 4, five proposals' documents are ~5,000 tokens a prompt
  s.reward.solver = "em"

  w = c.warmstart
  w.enabled = True
  w.sources = 200
  w.epochs = 2
  w.max_len = 3072              # the verifier demonstrations carry the same materials
  w.batch_size = 16

  c.eval.limit = 0
  c.eval.max_new_tokens = 512
  return c
