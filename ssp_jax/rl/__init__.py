"""RL pieces: advantage estimators, the policy loss, batching, the learner and its config."""
from ssp_jax.rl.advantages import (compute_advantages, grpo_advantages, reinforce_advantages,
                                   rloo_advantages)
from ssp_jax.rl.losses import aggregation_weights, kl_k1, kl_k3, policy_loss
from ssp_jax.rl.registry import (ADVANTAGE_ESTIMATORS, KL_PENALTIES, LOSS_AGGREGATIONS,
                                 Registry, RLConfigError)
from ssp_jax.rl.roles import Role, RoleTable, roles_config
