"""Multi-turn search rollouts: `RolloutEngine(...).generate(params, prompts, rng) -> [Trajectory]`.
See docs/rollout.md."""
from ssp_jax.rollout.config import get_rollout_config
from ssp_jax.rollout.engine import RolloutEngine
