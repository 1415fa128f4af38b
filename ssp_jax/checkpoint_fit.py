"""Does a checkpoint fit the state a run would restore into, and is a failed restore damage?

`Checkpointer.restore_newest_intact` compares the saved tree (read from orbax metadata) with the
run's abstract state leaf by leaf before restoring, so that a config mistake (another model or
param dtype) is named as such and never taken for a damaged checkpoint; `environment_error`
keeps a restore that failed for a reason outside the files (memory, permissions) from being
taken for one either.
"""
from __future__ import annotations

from typing import Any, Optional

import jax
import numpy as np

import models

# ModelConfig fields that shape the params (and so the AdamW moments).
MODEL_SHAPE_FIELDS = ("model_type", "vocab_size", "hidden_size", "intermediate_size",
                      "num_layers", "num_heads", "num_kv_heads", "head_dim", "tie_embeddings",
                      "qkv_bias", "qk_norm")



def model_shape_changes(old: models.ModelConfig, new: models.ModelConfig) -> list[str]:
  """'hidden_size 64 -> 32' for each MODEL_SHAPE_FIELDS field that differs."""
  return [f"{f} {getattr(old, f)} -> {getattr(new, f)}" for f in MODEL_SHAPE_FIELDS
          if getattr(old, f) != getattr(new, f)]


def _key_name(k: Any) -> str:
  for attr in ("key", "idx", "name"):     # DictKey, SequenceKey, GetAttrKey
    if hasattr(k, attr):
      return str(getattr(k, attr))
  return str(k)


def tree_leaves(tree: Any, prefix: str = "") -> dict[str, Optional[tuple]]:
  """{"params/embed": ((V, D), "float32"), ...} for a state of arrays / ShapeDtypeStructs or
  orbax item metadata (dicts, sequences and namedtuples spelled alike); None for a leaf that
  is not an array."""
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    name = "/".join([prefix] * bool(prefix) + [_key_name(k) for k in path])
    shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
    out[name] = None if shape is None or dtype is None else (tuple(shape), np.dtype(dtype).name)
  return out


def tree_differences(saved: dict, wanted: dict) -> list[str]:
  """One phrase per leaf whose presence, shape or dtype differs, the params' first."""
  show = lambda v: "(not an array)" if v is None else f"{list(v[0])} {v[1]}"
  out = []
  for k in sorted(set(saved) | set(wanted), key=lambda k: (not k.startswith("params/"), k)):
    if k not in saved:
      out.append(f"{k} is not in the checkpoint")
    elif k not in wanted:
      out.append(f"{k} is saved but not in this run's state")
    elif saved[k] != wanted[k]:
      out.append(f"{k} saved {show(saved[k])}, this run {show(wanted[k])}")
  return out


_ENV_TEXTS = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory", "PERMISSION_DENIED",
              "Permission denied")


def environment_error(e: Optional[BaseException]) -> Optional[str]:
  """The reason when `e` (or an exception it chains from) is about the machine, not the files
  (no memory, no permission to read them): such a checkpoint is not damaged. Else None."""
  seen = set()
  while e is not None and id(e) not in seen:
    seen.add(id(e))
    if isinstance(e, (MemoryError, PermissionError)):
      return f"{type(e).__name__}: {e}"
    text = str(e)
    for t in _ENV_TEXTS:
      if t in text:
        return t
    e = e.__cause__ or e.__context__
  return None
