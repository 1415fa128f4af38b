"""Compile the fused train step and the decode step for a TPU topology, on a CPU host.

Catches sharding errors and out-of-memory before a pod is rented: JAX lowers and compiles the
real programs for the target chips (no TPU needed, only `libtpu` from `pip install "jax[tpu]"`,
in its own venv) and XLA reports the per-chip memory.

  python3 -m venv .venv-tpu && .venv-tpu/bin/pip install "jax[tpu]" ml-collections optax flax \
      numpy safetensors
  PYTHONPATH=. .venv-tpu/bin/python launch/aot_compile.py \
      --config configs/ssp_qwen2_5_7b_instruct.py --topology v5p:4x4x2

The model shape comes from `--preset`, else `config.model.preset`, else config.json under
`config.model.path` when the weights are on this host, else the preset that the directory name of
`config.model.path` names (`.../Qwen2.5-7B-Instruct` -> qwen2.5-7b), so the command above works on
a CPU host without the 7B weights. Prints one JSON object per program. Fields can be overridden
as in `ssp-jax train` (`--config.rl.layer_loop=scan:2`), to check a setting's fit before a launch.

With `rl.pack` (the default) the train step is compiled in the packed layout: micro-batches of
rl.micro_batch_size rows of the full row length (rl.pack_len, else the sequence length), with
segment ids and positions, as many micro-batches as packing one mini-batch of trajectories
sampled from `--length-mix` (default: bench/length_mix_paper.json for SSP configs; none for
SvS, which then assumes every trajectory fills a row) gives, rounded up to a power of two as
the learner does.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import NamedSharding, PartitionSpec as P

import models
from ssp_jax.config_loader import (ConfigOverrideError, add_config_arguments,
                                   config_from_args)
from ssp_jax.config_ranges import RangeError
from ssp_jax.rl import learner as learner_lib
from ssp_jax.rl import step as step_lib
from ssp_jax.rl import train_state as ts
from ssp_jax.rl.config import check_rl_config
from ssp_jax.rl.registry import RLConfigError


def preset_for_path(path: str) -> str:
  """The preset whose family and size the checkpoint directory's name carries ("" if none):
  `Qwen2.5-7B-Instruct` -> qwen2.5-7b, `Meta-Llama-3.1-8B-Instruct` -> llama-3.1-8b."""
  name = os.path.basename(os.path.normpath(path or "")).lower()
  tokens = set(name.replace("_", "-").split("-"))
  found = []
  for preset in models.PRESETS:
    family, _, size = preset.rpartition("-")
    if family and family in name and size in tokens:
      found.append(preset)
  return max(found, key=len) if found else ""


def model_config(cfg, preset: str) -> models.ModelConfig:
  """The model shape to compile (see the module docstring for the order)."""
  preset = preset or cfg.model.get("preset", "")
  if preset:
    return models.get_preset(preset)
  path = cfg.model.path
  if path and os.path.exists(os.path.join(os.path.expanduser(path), "config.json")):
    return models.ModelConfig.from_hf_dir(path)
  guess = preset_for_path(path)
  if not guess:
    raise SystemExit(f"aot_compile: config.model.path {path!r} has no config.json on this host "
                     "and its name matches no preset; pass --preset NAME (known: "
                     f"{', '.join(sorted(models.PRESETS))})")
  print(f"aot_compile: no weights at {path!r}; using preset {guess} (its name)", file=sys.stderr)
  return models.get_preset(guess)


def _sds(shape, dtype, sharding):
  return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)


def memory_report(name, compiled, extra):
  mem = compiled.memory_analysis()
  gib = lambda b: round(b / 2**30, 2)
  out = {"program": name, **extra}
  if mem is not None:
    out.update(argument_gib=gib(mem.argument_size_in_bytes),
               output_gib=gib(mem.output_size_in_bytes),
               temp_gib=gib(mem.temp_size_in_bytes),
               alias_gib=gib(mem.alias_size_in_bytes),
               total_per_chip_gib=gib(mem.argument_size_in_bytes + mem.output_size_in_bytes
                                      + mem.temp_size_in_bytes - mem.alias_size_in_bytes))
  return out


def samples_per_prompt(cfg) -> int:
  """Rollouts per prompt in one mini-batch of the config's game: SSP's solver_n (the paper's
  layout: mini_batch_size questions x solver_n attempts), SvS's n solutions per problem."""
  if cfg.get("game", "ssp") == "svs":
    return int(cfg.svs.n)
  return int(cfg.ssp.solver_n)


def packed_micro_batches(cfg, per_update: int, row_len: int, m: int, length_mix: str,
                         vocab: int) -> tuple[int, dict]:
  """Micro-batches of one packed mini-batch of `per_update` trajectories drawn from the mix
  (none: each trajectory fills a row), bucketed as `Learner.mini_batches` does."""
  from ssp_jax.rl import pack as pack_lib
  if not length_mix:
    return pack_lib.micro_batches_bucket(per_update, m) // m, {"length_mix": "worst case"}
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                  "bench"))
  import length_mix as mix_lib
  trajs, _ = mix_lib.sample_trajectories(mix_lib.load_mix(length_mix), per_update, vocab=vocab,
                                         max_len=row_len)
  lengths = [len(t.prompt_ids) + len(t.response_ids) for t in trajs]
  rows = len(pack_lib.first_fit_decreasing(lengths, row_len,
                                           int(cfg.rl.get("pack_max_segments", 64))))
  fill = sum(lengths) / float(-(-rows // m) * m * row_len)
  return pack_lib.micro_batches_bucket(rows, m) // m, {
      "length_mix": length_mix, "packed_rows": rows, "fill_rate": round(fill, 4),
      "mean_len": round(sum(lengths) / len(lengths), 1)}


def compile_train_step(mcfg, cfg, sharder, seq, length_mix=""):
  rl = cfg.rl
  sc = learner_lib.StepConfig.from_config(rl)
  tx = ts.make_optimizer(rl)
  abstract, shardings = ts.state_shardings(mcfg, tx, sharder, ts.dtype_of(rl.param_dtype))
  state = ts.with_shardings(abstract, shardings)
  with_ref = rl.kl_coef != 0.0
  ref = None
  if with_ref:
    ref = jax.tree.map(lambda a, s: _sds(a.shape, ts.dtype_of(rl.ref_dtype), s),
                       abstract["params"], shardings["params"])
  rows = sharder.axis_size("act_batch")
  m = max(rl.micro_batch_size, rows)
  per_update = rl.mini_batch_size * samples_per_prompt(cfg)
  packed = bool(rl.get("pack", False))
  extra = {}
  if packed:
    seq = int(rl.get("pack_len", 0)) or seq
    K, extra = packed_micro_batches(cfg, per_update, seq, m, length_mix, mcfg.vocab_size)
  else:
    K = max(per_update // m, 1)
  batch = step_lib.abstract_inputs(sharder, packed, K, m, seq, sc.score_loss_tokens)
  step = learner_lib.make_train_step(mcfg, sc, tx, sharder, shardings, with_ref=with_ref,
                                     packed=packed)
  compiled = step.lower(state, ref, batch).compile()
  return memory_report("train_step", compiled, {
      "layout": "packed" if packed else "padded", "micro_batch": m, "micro_batches": K,
      "seq": seq, "trajectories": per_update, "remat": rl.remat,
      "layer_loop": rl.get("layer_loop", "scan"), "param_dtype": rl.param_dtype,
      "compute_dtype": rl.compute_dtype, "kl_ref": with_ref,
      **extra})


def _decode_layout(mcfg, sharder, dtype):
  """Abstract decode-layout params (`ssp_jax.sampling.decode_params`: per-layer buffers, the
  [D, V] output projection), each with the sharding its logical axes give."""
  shapes, logical = models.param_shapes(mcfg), models.param_logical_axes(mcfg)
  sds = lambda shape, axes: _sds(tuple(shape), dtype, sharder.sharding(axes))
  layer = {k: sds(shape[1:], logical["layers"][k][1:]) for k, shape in shapes["layers"].items()}
  V, D = shapes["embed"]
  return {"embed": sds((V, D), logical["embed"]), "final_norm": sds((D,), ("norm",)),
          "lm_head": sds((D, V), ("embed", "vocab")),
          "layers": [dict(layer) for _ in range(mcfg.num_layers)]}


def compile_decode_step(mcfg, cfg, sharder, batch, cache_len):
  """The sampler's decode step (`ssp_jax.sampling.decode_forward`) at the config's slots."""
  from ssp_jax.sampling.decode_step import decode_forward
  dtype = jnp.dtype(cfg.rollout.get("dtype", "bfloat16"))
  cache_dtype = jnp.dtype(cfg.rollout.get("cache_dtype", "bfloat16"))
  attn = str(cfg.rollout.get("decode_attention", "auto"))
  if attn == "auto":   # the engine's choice off a GPU (rollout/engine.py): the batched GEMMs
    attn = "einsum"
  dparams = _decode_layout(mcfg, sharder, dtype)
  cache_sh = sharder.sharding(models.decoder.CACHE_LOGICAL[1:])
  shape = (batch, mcfg.num_kv_heads, cache_len, mcfg.head_dim)   # the engine's per-layer buffers
  cache = {k: [_sds(shape, cache_dtype, cache_sh) for _ in range(mcfg.num_layers)]
           for k in ("k", "v")}
  row = NamedSharding(sharder.mesh, P(sharder.spec(("act_batch",))[0]))
  tok, pos = _sds((batch,), jnp.int32, row), _sds((batch,), jnp.int32, row)

  def step(p, t, s, c):
    return decode_forward(mcfg, p, t, s, c, dtype=dtype, sharder=sharder, attn_impl=attn)

  compiled = jax.jit(step, donate_argnums=(3,)).lower(dparams, tok, pos, cache).compile()
  return memory_report("decode_step", compiled, {"batch": batch, "cache_len": cache_len,
                                                 "decode_attention": attn})


def build_parser() -> argparse.ArgumentParser:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  add_config_arguments(ap)   # --config PATH[:ARG], and --config.FIELD=VALUE overrides
  ap.add_argument("--topology", default="v5p:4x4x2", help="e.g. v5e:4x4, v5p:4x4x2, v4:2x2x2")
  ap.add_argument("--preset", default="", help="model preset (default: config.model.preset)")
  ap.add_argument("--seq", type=int, default=0, help="train sequence length (default: "
                  "rollout max_prompt_tokens + max_response_tokens)")
  ap.add_argument("--decode-batch", type=int, default=0)
  ap.add_argument("--length-mix", default=None, help="packed layout: trajectory lengths from "
                  "this mix (bench/length_mix_<name>.json or a path; default paper for SSP, "
                  "none for SvS: every trajectory a full row)")
  return ap


def main(argv=None):
  a = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
  try:   # the config's rl section checked as `ssp-jax train` does, before minutes of compile
    cfg = config_from_args(a)
    roles = cfg.rl.get("roles")
    check_rl_config(cfg.rl, tuple(roles.keys()) if roles is not None else ())
  except (ConfigOverrideError, RLConfigError, RangeError) as e:
    print(f"aot_compile: {e}", file=sys.stderr)
    raise SystemExit(2) from None
  mcfg = model_config(cfg, a.preset)
  topo = topologies.get_topology_desc(a.topology, "tpu")
  mesh = models.make_mesh(tuple(tuple(x) for x in cfg.mesh.axes), devices=topo.devices)
  rules = tuple(cfg.mesh.rules) or models.DEFAULT_RULES
  sharder = models.Sharder(mesh, rules)
  seq = a.seq or (cfg.rollout.max_prompt_tokens + cfg.rollout.max_response_tokens)
  head = {"topology": a.topology, "chips": len(topo.devices),
          "device_kind": topo.devices[0].device_kind, "mesh": dict(mesh.shape),
          "params": mcfg.num_params()}
  mix = a.length_mix
  if mix is None:
    mix = "" if cfg.get("game", "ssp") == "svs" else "paper"
  print(json.dumps({**head, **compile_train_step(mcfg, cfg, sharder, seq, mix)}), flush=True)
  batch = a.decode_batch or cfg.rollout.batch_size
  print(json.dumps({**head, **compile_decode_step(mcfg, cfg, sharder, batch, seq)}), flush=True)


if __name__ == "__main__":
  main()
