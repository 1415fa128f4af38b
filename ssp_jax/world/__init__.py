"""A seeded fictional encyclopedia with exact answers (a known-ground-truth world for SSP).

  from ssp_jax.world import ensure_world, WORLD_FILES, WorldChecker
  d = ensure_world(seed=0, size=5000)   # built once into $SSP_JAX_CACHE/worlds/seed0_n5000
  WorldChecker(d).check("Who founded Brisholm Works?", "Veloria Quandt")

Files of a world directory (WORLD_FILES): corpus.jsonl (passages), answers.jsonl (SSP answer
set), qa_train.jsonl and qa_heldout.jsonl (questions with exact answers), world.json (the graph).
See docs/world.md.
"""
from __future__ import annotations

from ssp_jax.world.build import WORLD_FILES, build_world, ensure_world


def __getattr__(name):
  if name == "WorldChecker":          # imported on use: the builder does not need it
    from ssp_jax.world.check import WorldChecker
    return WorldChecker
  raise AttributeError(f"module 'ssp_jax.world' has no attribute {name!r}")


__all__ = ["WORLD_FILES", "build_world", "ensure_world", "WorldChecker"]
