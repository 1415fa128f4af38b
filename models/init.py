"""Random parameter init from a pytree of shapes (tests and benchmarks; real runs load weights)."""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp


def init_from_shapes(shapes: Any, rng: jax.Array, dtype, std: float,
                     is_one: Callable[[str], bool], is_zero: Callable[[str], bool]) -> Any:
  """normal(std) for every leaf of `shapes` (a pytree of tuples), except ones where
  `is_one(leaf_name)` and zeros where `is_zero(leaf_name)`; leaf_name is the dict key."""
  flat, treedef = jax.tree_util.tree_flatten_with_path(
      shapes, is_leaf=lambda x: isinstance(x, tuple))
  keys = jax.random.split(rng, len(flat))
  leaves = []
  for (path, shape), key in zip(flat, keys):
    name = str(getattr(path[-1], "key", path[-1]))
    if is_one(name):
      leaves.append(jnp.ones(shape, dtype))
    elif is_zero(name):
      leaves.append(jnp.zeros(shape, dtype))
    else:
      leaves.append((std * jax.random.normal(key, shape, jnp.float32)).astype(dtype))
  return jax.tree_util.tree_unflatten(treedef, leaves)
