"""Hugging Face safetensors checkpoints <-> our params pytree (see `models/decoder.py`).

Reading and writing follow the mapping table of `models/hf_mapping.py`: loading reads any slice
of any param straight from the file, saving applies the inverse.

Loading with a mesh builds every param with `jax.make_array_from_callback`: each device's
callback reads only its own slice from the safetensors file (layer by layer), so no device
ever holds the whole model and the host holds at most one shard at a time.
"""
from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Callable, Iterable, Optional, Sequence

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.sharding import Mesh, SingleDeviceSharding

from models.config import ModelConfig
from models.decoder import Params, param_logical_axes, param_shapes
from models.hf_mapping import (_IGNORABLE, CheckpointError, Transform, _get, _set,
                               expected_hf_shapes, mapping)
from models.sharding import Sharder, check_divisible


# --------------------------------------------------------------------------------------------
# Tensor sources: safetensors files (sliced reads) or an in-memory / lazy dict (GGUF)
# --------------------------------------------------------------------------------------------
class SafetensorsSource:
  """Reads slices of named tensors from one or many safetensors files (lazily opened)."""

  def __init__(self, path: str):
    from safetensors import safe_open
    self._stack = contextlib.ExitStack()
    self._files: dict[str, Any] = {}
    self._open = lambda f: self._stack.enter_context(safe_open(f, framework="numpy"))
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
      with open(index) as f:
        weight_map = json.load(f)["weight_map"]
      self._where = {k: os.path.join(path, v) for k, v in weight_map.items()}
    else:
      files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
      if not files:
        raise CheckpointError(f"{path!r} has no *.safetensors files (nor an index); "
                              "pass a Hugging Face checkpoint directory")
      self._where = {}
      for name in files:
        full = os.path.join(path, name)
        self._where.update({k: full for k in self._handle(full).keys()})

  def _handle(self, file: str):
    if file not in self._files:
      try:
        self._files[file] = self._open(file)
      except Exception as e:  # SafetensorError (bad header, cut short), OSError
        raise CheckpointError(f"safetensors file {file!r} is corrupt or incomplete "
                              f"({' '.join(str(e).split())}); copy or download it "
                              "again") from None
    return self._files[file]

  def keys(self) -> Iterable[str]:
    return self._where.keys()

  def shape(self, key: str) -> tuple[int, ...]:
    return tuple(self._handle(self._where[key]).get_slice(key).get_shape())

  def read(self, key: str, index: tuple[slice, ...]) -> np.ndarray:
    return self._handle(self._where[key]).get_slice(key)[index]

  def close(self):
    self._stack.close()


class DictSource:
  """Tensors from `name -> (shape, loader)`; the loader returns the whole numpy array."""

  def __init__(self, tensors: dict[str, tuple[tuple[int, ...], Callable[[], np.ndarray]]]):
    self._t = tensors

  def keys(self):
    return self._t.keys()

  def shape(self, key):
    return tuple(self._t[key][0])

  def read(self, key, index):
    return self._t[key][1]()[index]

  def close(self):
    pass


# --------------------------------------------------------------------------------------------
# Reading one slice of one param
# --------------------------------------------------------------------------------------------
def _norm(index: tuple, shape: Sequence[int]) -> list[tuple[int, int]]:
  out = []
  for s, n in zip(tuple(index) + (slice(None),) * (len(shape) - len(index)), shape):
    start, stop, step = s.indices(n)
    assert step == 1, "shardings only produce unit-stride slices"
    out.append((start, stop))
  return out


def read_layer_slice(src, key: str, tr: Transform, shape: Sequence[int],
                     bounds: Sequence[tuple[int, int]]) -> np.ndarray:
  """The [start, stop) `bounds` of our per-layer param `shape`, read from HF tensor `key`.

  For an HF dim that packs several view dims (N*H), reads the contiguous rows covering the
  wanted range of its outer view dim, then slices the inner view dims in numpy.
  """
  view = tr.view_shape(shape)
  vb = [None] * len(shape)
  for j, p in enumerate(tr.perm):
    vb[p] = bounds[j]
  hf_index, sub_shape, inner = [], [], []
  for g in tr.groups:
    outer, rest = g[0], g[1:]
    rest_size = int(np.prod([view[d] for d in rest]))
    lo, hi = vb[outer]
    hf_index.append(slice(lo * rest_size, hi * rest_size))
    sub_shape += [hi - lo] + [view[d] for d in rest]
    inner += [slice(None)] + [slice(*vb[d]) for d in rest]
  arr = np.asarray(src.read(key, tuple(hf_index)))
  return arr.reshape(sub_shape)[tuple(inner)].transpose(tr.perm)


def _np_dtype(dtype) -> np.dtype:
  return np.dtype(ml_dtypes.bfloat16) if jnp.dtype(dtype) == jnp.bfloat16 else np.dtype(dtype)


READ_CHUNK_BYTES = 32 << 20   # float32 bytes read (and for GGUF dequantised) at once


def read_into(out: np.ndarray, src, key: str, tr: Transform, shape: Sequence[int],
              bounds: Sequence[tuple[int, int]]) -> None:
  """Fills `out` (the `bounds` slice of our per-layer `shape`, any dtype) from HF tensor `key`
  in chunks along the HF row axis, so the float32 temporaries stay near READ_CHUNK_BYTES."""
  j = tr.perm.index(tr.groups[0][0])        # our dim that HF rows feed
  lo, hi = bounds[j]
  per_row = 4 * int(np.prod([b - a for a, b in bounds])) // max(1, hi - lo)
  step = max(1, READ_CHUNK_BYTES // max(1, per_row))
  for a in range(lo, hi, step):
    b = min(hi, a + step)
    part = list(bounds)
    part[j] = (a, b)
    where = [slice(None)] * len(bounds)
    where[j] = slice(a - lo, b - lo)
    out[tuple(where)] = read_layer_slice(src, key, tr, shape, part)


def _param_callback(src, hf_name, tr, full_shape, stacked, dtype):
  """The `make_array_from_callback` callback of one param: reads the slice `index` of it,
  a layer and a chunk of rows at a time, straight into an array of the final dtype."""
  np_dt = _np_dtype(dtype)
  layer_shape = full_shape[1:] if stacked else full_shape

  def cb(index):
    if not stacked:
      bounds = _norm(index, layer_shape)
      out = np.empty(tuple(hi - lo for lo, hi in bounds), np_dt)
      read_into(out, src, hf_name, tr, layer_shape, bounds)
      return out
    (l0, l1), *bounds = _norm(index, full_shape)
    out = np.empty((l1 - l0,) + tuple(hi - lo for lo, hi in bounds), np_dt)
    for l in range(l0, l1):  # one layer at a time: host memory stays at one shard
      read_into(out[l - l0], src, hf_name.format(i=l), tr, layer_shape, bounds)
    return out
  return cb


def params_from_source(cfg: ModelConfig, src, *, dtype=jnp.float32,
                       sharder: Optional[Sharder] = None, what: str = "checkpoint") -> Params:
  """Validates `src` against `cfg` and builds the params (sharded when `sharder` is given)."""
  validate_tensors(cfg, src, what)
  shapes = param_shapes(cfg)
  logical = param_logical_axes(cfg)
  if sharder is not None:
    check_divisible(shapes, logical, sharder)
  params: Params = {}
  for path, (hf_name, tr, _) in mapping(cfg).items():
    full_shape = tuple(_get(shapes, path))
    sharding = (sharder.sharding(_get(logical, path)) if sharder is not None
                else SingleDeviceSharding(jax.devices()[0]))
    cb = _param_callback(src, hf_name, tr, full_shape, "{i}" in hf_name, dtype)
    # Wait for each placement: transfers are asynchronous, and host buffers of params still in
    # flight would pile up (peak host memory then depends on how fast the copies run).
    _set(params, path, jax.make_array_from_callback(full_shape, sharding, cb).block_until_ready())
  return params


def validate_tensors(cfg: ModelConfig, src, what: str = "checkpoint") -> None:
  """Raises CheckpointError naming a missing, unexpected or wrongly shaped tensor."""
  expected = expected_hf_shapes(cfg)
  present = set(src.keys())
  missing = sorted(k for k in expected if k not in present)
  if missing:
    raise CheckpointError(
        f"{what} is missing tensor {missing[0]!r}" +
        (f" (and {len(missing) - 1} more: {missing[1:4]}...)" if len(missing) > 1 else "") +
        f" that a {cfg.model_type} config with these settings needs; check that config.json "
        "matches the weights (tie_word_embeddings, attention_bias, num_hidden_layers)")
  tied_extra = {"lm_head.weight"} if cfg.tie_embeddings else set()
  extra = sorted(k for k in present - set(expected) - tied_extra if not _IGNORABLE.match(k))
  if extra:
    raise CheckpointError(
        f"{what} has unexpected tensor {extra[0]!r}" +
        (f" (and {len(extra) - 1} more: {extra[1:4]}...)" if len(extra) > 1 else "") +
        f" that a {cfg.model_type} config with these settings does not use; check that "
        "config.json matches the weights")
  for key, shape in expected.items():
    found = src.shape(key)
    if tuple(found) != tuple(shape):
      raise CheckpointError(f"{what}: tensor {key!r} has shape {list(found)}, expected "
                            f"{list(shape)} from config.json")


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------
def load_hf_checkpoint(path: str, *, dtype=jnp.float32, mesh: Optional[Mesh] = None,
                       sharder: Optional[Sharder] = None) -> tuple[ModelConfig, Params]:
  """Reads a local HF directory (config.json + one or many *.safetensors) into params.

  With `mesh` (default rules) or `sharder`, params are created sharded: each device reads only
  its own slice from disk. Without, they land on the default device.
  """
  if not os.path.isdir(path):
    raise CheckpointError(f"{path!r} is not a directory; pass a Hugging Face checkpoint "
                          "directory (config.json + *.safetensors)")
  cfg = read_hf_config(path)
  if sharder is None and mesh is not None:
    sharder = Sharder(mesh)
  src = SafetensorsSource(path)
  try:
    params = params_from_source(cfg, src, dtype=dtype, sharder=sharder,
                                what=f"checkpoint {path!r}")
  finally:
    src.close()
  return cfg, params


def read_hf_config(path: str) -> ModelConfig:
  """ModelConfig of an HF directory; an unreadable config.json or one missing a field the
  model needs is one CheckpointError naming the file and the field."""
  cfg_path = os.path.join(path, "config.json")
  try:
    return ModelConfig.from_hf_dir(path)
  except json.JSONDecodeError as e:
    raise CheckpointError(f"{cfg_path} is not valid JSON ({e}); restore the file") from None
  except KeyError as e:
    raise CheckpointError(f"{cfg_path} has no field {e.args[0]!r}, which a model needs; "
                          "restore the file (save_pretrained writes it)") from None
  except (TypeError, AttributeError, ValueError) as e:
    if isinstance(e, CheckpointError) or type(e).__name__ == "ConfigError":
      raise
    raise CheckpointError(f"{cfg_path} has a field of the wrong type ({type(e).__name__}: "
                          f"{e}); restore the file") from None


def hf_tensors(cfg: ModelConfig, params: Params) -> Iterable[tuple[str, np.ndarray]]:
  """Yields (HF name, numpy array in HF layout) one tensor at a time (host memory: one layer)."""
  for path, (hf_name, tr, layer_shape) in mapping(cfg).items():
    arr = _get(params, path)
    inv = tuple(np.argsort(tr.perm))
    layers = range(cfg.num_layers) if "{i}" in hf_name else [None]
    for i in layers:
      ours = np.asarray(arr if i is None else arr[i])
      yield hf_name.format(i=i), np.ascontiguousarray(ours.transpose(inv).reshape(
          tr.hf_shape(layer_shape)))


def save_hf_checkpoint(path: str, config: ModelConfig, params: Params, *,
                       max_shard_bytes: int = 4 << 30) -> None:
  """Writes config.json + safetensors (split with an index past `max_shard_bytes`).

  Tensors are gathered to this host one layer at a time, in the params' dtype (single host:
  every shard of a param must be addressable here).
  """
  from safetensors.numpy import save_file
  os.makedirs(path, exist_ok=True)
  dtype = jnp.dtype(jax.tree.leaves(params)[0].dtype)
  hf = config.to_hf_dict()
  hf["torch_dtype"] = {"bfloat16": "bfloat16", "float16": "float16"}.get(dtype.name, "float32")
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(hf, f, indent=2)
  shards: list[dict[str, np.ndarray]] = [{}]
  size = 0
  for name, arr in hf_tensors(config, params):
    if size and size + arr.nbytes > max_shard_bytes:
      _flush(path, shards, save_file)
      shards.append({})
      size = 0
    shards[-1][name] = arr
    size += arr.nbytes
  _flush(path, shards, save_file, last=True)


def _flush(path, shards, save_file, last=False):
  """Writes the newest shard to a temp name; on `last`, renames all and writes the index."""
  n = len(shards)
  tmp = os.path.join(path, f".shard-{n:05d}.safetensors")
  if shards[-1]:
    save_file(shards[-1], tmp, metadata={"format": "pt"})
  shards[-1] = {k: None for k in shards[-1]}  # free memory; keep the names for the index
  if not last:
    return
  if n == 1:
    os.replace(tmp, os.path.join(path, "model.safetensors"))
    return
  weight_map = {}
  for i, shard in enumerate(shards, 1):
    name = f"model-{i:05d}-of-{n:05d}.safetensors"
    os.replace(os.path.join(path, f".shard-{i:05d}.safetensors"), os.path.join(path, name))
    weight_map.update({k: name for k in shard})
  with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2)
