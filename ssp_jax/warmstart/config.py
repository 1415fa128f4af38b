"""The `warmstart` section of a run config (a difference from the paper: off by default)."""
from __future__ import annotations

import ml_collections


def get_warmstart_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.enabled = False      # True: SFT on demonstrations before self-play (configs/tiny.py)
  c.sources = 48         # answers turned into demonstrations (each gives up to 3: proposer,
                         # RAG verifier, solver); passages that support eval questions are skipped
  c.epochs = 2           # passes over the demonstrations
  c.lr = 5e-5            # AdamW learning rate (constant, no weight decay)
  c.batch_size = 4       # rows per SFT step
  c.bucket = 256         # rows padded to a multiple of this (few compiled shapes)
  c.max_len = 1536       # longer demonstrations are dropped
  c.seed = 0             # which answers are used, and the batch order
  return c
