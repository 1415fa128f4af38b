"""The declarative HF <-> ours mapping table (see `models/decoder.py` for our params).

Every HF tensor name maps to (our param path, transform). A transform says how an HF tensor is
viewed as ours: `ours = hf.reshape(view).transpose(perm)`, where the view splits HF dims into
groups (e.g. q_proj [N*H, D] -> view [N, H, D] -> ours [D, N, H]). The same table drives loading
and saving (`models/hf_io.py`) and the GGUF loader (GGUF tensors have HF layouts once
dequantized).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

import numpy as np

from models.config import ModelConfig
from models.decoder import param_shapes

class CheckpointError(ValueError):
  """A checkpoint whose tensors do not match the config, with the tensor named."""


# --------------------------------------------------------------------------------------------
# The mapping table
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Transform:
  """ours = hf.reshape(view).transpose(perm); `groups[i]` lists the view dims of HF dim i."""
  perm: tuple[int, ...]
  groups: tuple[tuple[int, ...], ...]

  def view_shape(self, ours: Sequence[int]) -> tuple[int, ...]:
    view = [0] * len(ours)
    for j, p in enumerate(self.perm):
      view[p] = ours[j]
    return tuple(view)

  def hf_shape(self, ours: Sequence[int]) -> tuple[int, ...]:
    view = self.view_shape(ours)
    return tuple(int(np.prod([view[d] for d in g])) for g in self.groups)


COPY1 = Transform((0,), ((0,),))
COPY2 = Transform((0, 1), ((0,), (1,)))
TRANSPOSE = Transform((1, 0), ((0,), (1,)))                 # [out, in] -> [in, out]
IN_PROJ = Transform((2, 0, 1), ((0, 1), (2,)))              # [N*H, D] -> [D, N, H]
OUT_PROJ = Transform((1, 2, 0), ((0,), (1, 2)))             # [D, N*H] -> [N, H, D]
HEAD_BIAS = Transform((0, 1), ((0, 1),))                    # [N*H] -> [N, H]

_L = "model.layers.{i}."
# HF name -> (our path, transform). "{i}" marks a per-layer tensor (stacked on our L axis).
HF_TABLE: tuple[tuple[str, str, Transform], ...] = (
    ("model.embed_tokens.weight", "embed", COPY2),
    ("model.norm.weight", "final_norm", COPY1),
    ("lm_head.weight", "lm_head", TRANSPOSE),
    (_L + "input_layernorm.weight", "layers/attn_norm", COPY1),
    (_L + "self_attn.q_proj.weight", "layers/wq", IN_PROJ),
    (_L + "self_attn.k_proj.weight", "layers/wk", IN_PROJ),
    (_L + "self_attn.v_proj.weight", "layers/wv", IN_PROJ),
    (_L + "self_attn.o_proj.weight", "layers/wo", OUT_PROJ),
    (_L + "self_attn.q_proj.bias", "layers/bq", HEAD_BIAS),
    (_L + "self_attn.k_proj.bias", "layers/bk", HEAD_BIAS),
    (_L + "self_attn.v_proj.bias", "layers/bv", HEAD_BIAS),
    (_L + "self_attn.q_norm.weight", "layers/q_norm", COPY1),
    (_L + "self_attn.k_norm.weight", "layers/k_norm", COPY1),
    (_L + "post_attention_layernorm.weight", "layers/mlp_norm", COPY1),
    (_L + "mlp.gate_proj.weight", "layers/w_gate", TRANSPOSE),
    (_L + "mlp.up_proj.weight", "layers/w_up", TRANSPOSE),
    (_L + "mlp.down_proj.weight", "layers/w_down", TRANSPOSE),
)
# Tensors some checkpoints carry that we may skip: the rotary cache of old exports.
_IGNORABLE = re.compile(r"^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$")


def _get(tree: dict, path: str) -> Any:
  for part in path.split("/"):
    tree = tree[part]
  return tree


def _set(tree: dict, path: str, value: Any) -> None:
  *head, last = path.split("/")
  for part in head:
    tree = tree.setdefault(part, {})
  tree[last] = value


def mapping(cfg: ModelConfig) -> dict[str, tuple[str, Transform, tuple[int, ...]]]:
  """Every param path this config has -> (HF name template, transform, shape of one layer)."""
  shapes = param_shapes(cfg)
  out = {}
  for hf_name, path, tr in HF_TABLE:
    try:
      shape = _get(shapes, path)
    except KeyError:
      continue  # e.g. no lm_head when tied, no biases without qkv_bias
    out[path] = (hf_name, tr, tuple(shape[1:]) if "{i}" in hf_name else tuple(shape))
  return out


def expected_hf_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
  """HF tensor name -> HF shape, for every tensor a checkpoint of `cfg` must hold."""
  out = {}
  for hf_name, tr, shape in mapping(cfg).values():
    layers = range(cfg.num_layers) if "{i}" in hf_name else [None]
    for i in layers:
      out[hf_name.format(i=i)] = tr.hf_shape(shape)
  return out
