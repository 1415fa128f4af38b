"""Train state {params, opt_state, step, rng, nonfinite, nonfinite_total}: optimizer, shardings
and sharded creation (`eval_shape` -> shardings -> `jit(out_shardings=...)`, so the full state
never sits on one device).

`nonfinite` counts consecutive skipped updates (non-finite loss or gradient), `nonfinite_total`
all of them. The state is a plain dict so orbax saves and restores it as is.
"""
from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

import models
from models.sharding import Sharder, check_divisible

TrainState = dict[str, Any]
SCALAR_KEYS = ("step", "nonfinite", "nonfinite_total")


def lr_schedule(lr: float, warmup_steps: int):
  """Linear warm-up to `lr` over `warmup_steps` updates, then constant.

  The first update already uses lr / warmup_steps (veRL's schedule gives lr 0 to update 0,
  which wastes it).
  """
  warm = float(max(warmup_steps, 1))
  return lambda count: lr * jnp.minimum(1.0, (count + 1) / warm)


def make_optimizer(rl: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """Global-norm clip then AdamW with linear warm-up."""
  return optax.chain(
      optax.clip_by_global_norm(rl.grad_clip),
      optax.adamw(lr_schedule(rl.lr, rl.warmup_steps), b1=rl.adam_b1, b2=rl.adam_b2,
                  eps=rl.adam_eps, weight_decay=rl.weight_decay))


def single_device_sharder(device=None) -> Sharder:
  """A Sharder over a 1x1 (data, tensor) mesh of one device."""
  dev = jax.devices()[0] if device is None else device
  return Sharder(models.make_mesh((("data", 1), ("tensor", 1)), devices=[dev]))


def param_shardings(cfg: models.ModelConfig, sharder: Sharder) -> Any:
  return sharder.tree_shardings(models.param_logical_axes(cfg))


def abstract_params(cfg: models.ModelConfig, dtype) -> Any:
  shapes = models.param_shapes(cfg)
  return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s, dtype), shapes,
                      is_leaf=lambda x: isinstance(x, tuple))


def state_shardings(cfg: models.ModelConfig, tx: optax.GradientTransformation,
                    sharder: Sharder, param_dtype=jnp.float32) -> tuple[TrainState, TrainState]:
  """(abstract state of ShapeDtypeStructs, matching NamedShardings).

  Optimizer moments follow their parameter's sharding; optimizer counters and the scalar
  fields are replicated.
  """
  params = abstract_params(cfg, param_dtype)
  check_divisible(params, models.param_logical_axes(cfg), sharder)
  p_sh = param_shardings(cfg, sharder)
  opt = jax.eval_shape(tx.init, params)
  rep = NamedSharding(sharder.mesh, P())
  is_sds = lambda x: isinstance(x, jax.ShapeDtypeStruct)
  opt_sh = optax.tree_map_params(tx, lambda _, sh: sh, opt, p_sh,
                                 transform_non_params=lambda _: rep, is_leaf=is_sds)
  abstract = {"params": params, "opt_state": opt,
              "rng": jax.ShapeDtypeStruct((2,), jnp.uint32),
              **{k: jax.ShapeDtypeStruct((), jnp.int32) for k in SCALAR_KEYS}}
  shardings = {"params": p_sh, "opt_state": opt_sh, "rng": rep, **{k: rep for k in SCALAR_KEYS}}
  return abstract, shardings


def with_shardings(abstract: Any, shardings: Any) -> Any:
  """ShapeDtypeStructs carrying their target sharding (for orbax restore)."""
  return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                      abstract, shardings)


def create_train_state(cfg: models.ModelConfig, tx: optax.GradientTransformation,
                       sharder: Sharder, *, seed: int = 0, params: Optional[Any] = None,
                       param_dtype=jnp.float32) -> TrainState:
  """A sharded train state. `params` (e.g. from an HF checkpoint) are cast to `param_dtype`
  and resharded; without them, params are randomly initialised (`models.init_params`)."""
  _, shardings = state_shardings(cfg, tx, sharder, param_dtype)

  def init(params, key):
    if params is None:
      params = models.init_params(cfg, jax.random.fold_in(key, 1), dtype=param_dtype)
    params = jax.tree.map(lambda p: p.astype(param_dtype), params)
    zero = jnp.zeros((), jnp.int32)
    return {"params": params, "opt_state": tx.init(params), "rng": key, "step": zero,
            "nonfinite": zero, "nonfinite_total": zero}

  key = jax.random.PRNGKey(seed)
  return jax.jit(init, out_shardings=shardings)(params, key)


def make_reference(params: Any, cfg: models.ModelConfig, sharder: Sharder, dtype) -> Any:
  """A frozen copy of `params` in `dtype`, sharded as the policy (a new buffer, never donated)."""
  return jax.jit(lambda p: jax.tree.map(lambda x: x.astype(dtype), p),
                 out_shardings=param_shardings(cfg, sharder))(params)


def too_many_nonfinite(state: TrainState, max_nonfinite_steps: int) -> bool:
  """True when the last `max_nonfinite_steps` updates were all skipped as non-finite; the
  caller should checkpoint and stop."""
  return int(jax.device_get(state["nonfinite"])) >= max_nonfinite_steps


def nonfinite_message(state: TrainState, max_nonfinite_steps: int) -> str:
  return (f"stopping: {int(jax.device_get(state['nonfinite']))} consecutive updates had a "
          f"non-finite loss or gradient (limit rl.max_nonfinite_steps={max_nonfinite_steps}); "
          f"lower rl.lr, check the rewards/advantages, or raise the limit")


def dtype_of(name: str):
  try:
    return jnp.dtype(name)
  except TypeError:
    raise ValueError(f"unknown dtype {name!r}; use float32 or bfloat16") from None


def host_scalars(state: TrainState) -> dict[str, int]:
  return {k: int(np.asarray(jax.device_get(state[k]))) for k in SCALAR_KEYS}


# --------------------------------------------------------------------------------------------
# The LR schedule's position (optax's ScaleByScheduleState count; Adam's own step count, used
# for bias correction, is separate and always counts optimizer steps)
# --------------------------------------------------------------------------------------------
def _is_sched(x) -> bool:
  return isinstance(x, optax.ScaleByScheduleState)


def schedule_count(state: TrainState) -> int:
  states = [x for x in jax.tree.leaves(state["opt_state"], is_leaf=_is_sched) if _is_sched(x)]
  if len(states) != 1:
    raise RuntimeError(f"expected one LR schedule state in the optimizer, found {len(states)}")
  return int(jax.device_get(states[0].count))


def with_schedule_count(state: TrainState, value: int) -> TrainState:
  """`state` with the LR schedule's count set to `value` (sharded as before)."""
  def put(x):
    if not _is_sched(x):
      return x
    return x._replace(count=jax.make_array_from_callback(
        (), x.count.sharding, lambda idx: np.asarray(value, np.int32)))
  return dict(state, opt_state=jax.tree.map(put, state["opt_state"], is_leaf=_is_sched))
