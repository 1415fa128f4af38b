"""The `warmstart` section of a run config (a difference from the paper: off by default)."""
from __future__ import annotations

import ml_collections


def get_warmstart_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.enabled = False      # True: SFT on demonstrations before self-play (configs/tiny.py)
  c.sources = 48         # answers turned into demonstrations (each gives up to 3: proposer,
                         # RAG verifier, solver); passages that support eval questions are skipped
  c.solver_sources = 0   # solver demonstrations from this many answers (0: as many as
                         # `sources`; they are the shortest, ~400 tokens for the 135M default)
  c.epochs = 2           # passes over the demonstrations
  c.lr = 5e-5            # AdamW learning rate (constant, no weight decay)
  c.batch_size = 2       # packed rows per SFT step
  c.max_len = 1536       # tokens per packed row (one compiled shape); longer demonstrations
                         # are dropped
  c.remat = "full"       # activation recompute in the SFT step (none | full | dots ...)
  c.train_layers = 0     # > 0: train only the top this many layers (+ final norm and output
                         # projection); the backward pass stops below them (faster on a CPU);
                         # 0, or at least the model's layers: all of them
  c.seed = 0             # which answers are used, and the batch order
  c.demos = "blank"      # "blank": fill-in-the-blank questions from the answer set's passages
                         # (one question form); "world": the train questions of the run's world
                         # (`ssp.world_dir`), many forms and 1-3 hops, replayed with the real
                         # retriever (ssp_jax/ssp/warmstart/world_demos.py)
  return c
