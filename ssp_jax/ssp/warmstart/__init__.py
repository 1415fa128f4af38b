"""Format warm start for small policies (not part of the SSP paper; off in the paper configs).

A supervised pass over demonstration trajectories built from the corpus with the real retriever
(`demos.py`), trained by `sft.py`, cached as an HF checkpoint directory (`run.py`) that the
training run then starts from. See docs/training.md, "Warm start".
"""
from ssp_jax.ssp.warmstart.config import get_warmstart_config

__all__ = ["get_warmstart_config"]
