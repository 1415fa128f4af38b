"""Logical axis names -> mesh axes.

Models annotate every parameter and main activation with *logical* axis names
(`embed`, `q_heads`, `act_batch`, ...). A rules table (from the run config) maps each logical
name to a mesh axis, a tuple of mesh axes, or None (replicated). Mesh axis names never appear in
model code. `Sharder` carries the mesh and the rules explicitly (no global context), is hashable,
and can be passed as a static argument to `jax.jit`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence, Union

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

MeshAxes = Union[None, str, tuple[str, ...]]
Rules = tuple[tuple[str, MeshAxes], ...]

# Default rules: FSDP over `data` for the large dim of each weight, tensor parallelism over
# `tensor` for heads / mlp / vocab, batch over `data`. Run configs may override any line.
DEFAULT_RULES: Rules = (
    # parameters
    ("layers", None),
    ("vocab", "tensor"),
    ("embed", "data"),       # FSDP: the hidden dim of weights is sharded over data
    ("q_heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("mlp", "tensor"),
    ("norm", None),
    # activations
    ("act_batch", "data"),
    ("act_len", None),
    ("act_embed", None),
    ("act_heads", "tensor"),
    ("act_kv_heads", "tensor"),
    ("act_kv_len", None),
    ("act_mlp", "tensor"),
    ("act_vocab", "tensor"),
)


def make_mesh(axes: Sequence[tuple[str, int]], devices=None) -> Mesh:
  """Builds a mesh from `(("data", -1), ("tensor", 2))`; one -1 takes the remaining devices."""
  devices = list(jax.devices() if devices is None else devices)
  names = [a for a, _ in axes]
  sizes = [int(s) for _, s in axes]
  if sizes.count(-1) > 1:
    raise ValueError(f"mesh {axes}: at most one axis may be -1")
  known = int(np.prod([s for s in sizes if s != -1])) if sizes else 1
  if -1 in sizes:
    if len(devices) % known:
      raise ValueError(f"mesh {axes}: {len(devices)} devices are not divisible by {known}")
    sizes[sizes.index(-1)] = len(devices) // known
  if int(np.prod(sizes)) != len(devices):
    raise ValueError(f"mesh {axes} needs {int(np.prod(sizes))} devices, found {len(devices)}; "
                     "fix config.mesh so the sizes multiply to the device count")
  return Mesh(np.asarray(devices).reshape(sizes), tuple(names))


@dataclasses.dataclass(frozen=True)
class Sharder:
  """A mesh plus the logical->mesh rules table."""
  mesh: Mesh
  rules: Rules = DEFAULT_RULES

  def __post_init__(self):
    object.__setattr__(self, "rules", tuple((k, tuple(v) if isinstance(v, list) else v)
                                            for k, v in self.rules))

  def spec(self, logical: Sequence[Optional[str]]) -> P:
    table = dict(self.rules)
    used: set[str] = set()
    out = []
    for name in logical:
      axes = table.get(name) if name is not None else None
      if axes is None:
        out.append(None)
        continue
      axes_t = (axes,) if isinstance(axes, str) else tuple(axes)
      # Drop mesh axes missing from this mesh, of size 1, or already used by an earlier dim.
      axes_t = tuple(a for a in axes_t if a in self.mesh.shape and a not in used)
      used.update(axes_t)
      out.append(None if not axes_t else axes_t[0] if len(axes_t) == 1 else axes_t)
    return P(*out)

  def sharding(self, logical: Sequence[Optional[str]]) -> NamedSharding:
    return NamedSharding(self.mesh, self.spec(logical))

  def axis_size(self, logical: str) -> int:
    spec = self.spec((logical,))[0]
    if spec is None:
      return 1
    names = (spec,) if isinstance(spec, str) else spec
    return int(np.prod([self.mesh.shape[a] for a in names]))

  def constrain(self, x: jax.Array, logical: Sequence[Optional[str]]) -> jax.Array:
    spec = self.spec(logical)
    # A dim that the mesh does not divide is left unconstrained rather than padded.
    fixed = []
    for dim, s in zip(x.shape, spec):
      if s is None:
        fixed.append(None)
        continue
      names = (s,) if isinstance(s, str) else s
      size = int(np.prod([self.mesh.shape[a] for a in names]))
      fixed.append(s if dim % size == 0 else None)
    return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, P(*fixed)))

  def tree_shardings(self, logical_tree: Any) -> Any:
    """Maps a pytree of logical-axis tuples to NamedShardings."""
    return jax.tree.map(self.sharding, logical_tree, is_leaf=_is_axes)


def _is_axes(x) -> bool:
  return isinstance(x, tuple) and all(a is None or isinstance(a, str) for a in x)


def constrain(x: jax.Array, logical: Sequence[Optional[str]], sharder: Optional[Sharder]):
  """Activation sharding constraint; a no-op when `sharder` is None (single device)."""
  return x if sharder is None else sharder.constrain(x, logical)


def check_divisible(shapes_tree: Any, logical_tree: Any, sharder: Sharder) -> None:
  """Raises a clear error when a mesh axis does not divide a sharded parameter dim."""
  is_shape = lambda x: isinstance(x, tuple) and all(isinstance(d, int) for d in x)
  flat_s = jax.tree_util.tree_flatten_with_path(shapes_tree, is_leaf=is_shape)[0]
  flat_l = jax.tree.leaves(logical_tree, is_leaf=_is_axes)
  for (path, shape), logical in zip(flat_s, flat_l):
    shape = getattr(shape, "shape", shape)
    for dim, name in zip(shape, logical):
      if name is None:
        continue
      size = sharder.axis_size(name)
      if dim % size:
        raise ValueError(
            f"parameter {jax.tree_util.keystr(path)}: dim {name!r} of size {dim} is not divisible "
            f"by the mesh axes it maps to (size {size}); change config.mesh or the "
            f"sharding rule for {name!r}")
