"""Multi-turn rollouts with tools:
`trajs, stats = RolloutEngine(...).generate(params, prompts, rng)`. See docs/rollout.md."""
from ssp_jax.rollout.config import get_rollout_config
from ssp_jax.rollout.engine import Rollout, RolloutEngine
from ssp_jax.rollout.search_tool import SearchTool
from ssp_jax.rollout.tools import Observation, Tool, ToolCall
