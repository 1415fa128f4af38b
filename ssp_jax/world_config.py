"""The `world` section of a run config: a generated world (`ssp_jax.world`) as the run's data.

  config.world.seed = 7          # which world
  config.world.size = 5000       # how big (0: no world; the config's own paths are used)

A config never builds anything when it is imported: `resolve_world(config)` runs at build time
(the trainers' build step, `ssp-jax eval` before its data is read). It builds the world once
through `ssp_jax.world.ensure_world` (cached) and fills the config's empty data fields from it:
the fields its game names (`world_fields` of the game's entry, ssp_jax/run/games.py; SSP:
`ssp.answers_path` <- <world>/answers.jsonl when empty and `ssp.world_dir` <- <world>;
Search-R1 adds `search_r1.train_path` <- <world>/qa_train.jsonl when empty), then

  eval.datasets.<name>    "world:qa_heldout" -> <world>/qa_heldout.jsonl (any `world:<file>`)
  retrieval.index_dir     the MiniLM index over <world>/corpus.jsonl (only when both index_dir
                          and url are empty), built on first use next to the world with the
                          default index's encoder settings (`retrieval.search.default_index_dir`)

Paths a user set stay as they are, so `--config.retrieval.url=...` or another answer set still
work with a world.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from typing import Optional

import ml_collections

WORLD_FILES = ("corpus", "answers", "qa_train", "qa_heldout")   # <name>.jsonl in a world dir
SPEC_PREFIX = "world:"          # eval dataset spec naming a file of the world


def get_world_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0                    # the world's seed (ensure_world(seed=...))
  c.size = 0                    # the world's size; 0 = no world (the config's own paths)
  c.root = ""                   # cache directory of worlds ("" = ensure_world's default)
  return c


def enabled(config) -> bool:
  return "world" in config and int(config.world.size) > 0


def world_specs(config) -> dict[str, str]:
  """The `eval.datasets` entries that name a world file (`world:qa_heldout`)."""
  if "eval" not in config:
    return {}
  return {name: spec for name, spec in config.eval.datasets.items()
          if isinstance(spec, str) and spec.startswith(SPEC_PREFIX)}


def validate_world(config) -> None:
  """Checks the `world` section (no-op without one); raises ssp_jax.run.validate.ConfigError."""
  from ssp_jax.run.validate import ConfigError
  specs = world_specs(config)
  for name, spec in specs.items():
    file = spec[len(SPEC_PREFIX):]
    if file not in WORLD_FILES:
      raise ConfigError(f"config.eval.datasets.{name}={spec!r} names no world file; use one of "
                        + ", ".join(SPEC_PREFIX + f for f in WORLD_FILES if f.startswith("qa_")))
  if "world" not in config:
    if specs:
      raise ConfigError(f"config.eval.datasets.{next(iter(specs))} is a world file but the "
                        "config has no `world` section; give a JSONL path instead")
    return
  w = config.world
  if int(w.seed) < 0:
    raise ConfigError(f"config.world.seed={w.seed} must be >= 0")
  if int(w.size) < 0:
    raise ConfigError(f"config.world.size={w.size} must be >= 0 (0: no world)")
  if not int(w.size):
    if specs:
      raise ConfigError(f"config.eval.datasets.{next(iter(specs))}={specs[next(iter(specs))]!r} "
                        "needs a world: set --config.world.size (e.g. 5000) or give a JSONL path")
    return
  if importlib.util.find_spec("ssp_jax.world") is None:
    raise ConfigError(f"config.world.size={w.size} needs the world generator ssp_jax.world, "
                      "which this build lacks; set --config.world.size=0 and give the data "
                      "paths instead")
  from ssp_jax.world.build import check_size
  try:
    check_size(int(w.size))
  except ValueError as e:
    raise ConfigError(f"config.world.size: {e}") from None


def world_paths(world_dir: str) -> dict[str, str]:
  """name -> path of the world's files (WORLD_FILES); a missing one is a FileNotFoundError."""
  paths = {name: os.path.join(world_dir, f"{name}.jsonl") for name in WORLD_FILES}
  missing = [p for p in paths.values() if not os.path.exists(p)]
  if missing:
    raise FileNotFoundError(f"world directory {world_dir!r} lacks {', '.join(missing)}; delete "
                            "it so that it is built again")
  return paths


def world_index_dir(corpus: str) -> str:
  """The dense MiniLM index over a world's corpus, built on first use into `index/` next to it
  (file-locked, so concurrent runs build it once) with the default index's settings."""
  from retrieval import search
  from retrieval.encoders import detect_spec
  from retrieval.index import META_FILE, build_dense
  spec = detect_spec()
  key = hashlib.sha1(search.default_index_key(corpus, spec).encode()).hexdigest()[:12]
  out = os.path.join(os.path.dirname(os.path.abspath(corpus)), "index", f"minilm-{key}")
  if os.path.exists(os.path.join(out, META_FILE)):
    return out
  os.makedirs(os.path.dirname(out), exist_ok=True)
  with search._file_lock(out + ".lock"):
    if not os.path.exists(os.path.join(out, META_FILE)):
      print(f"building the world's retrieval index in {out} (first use only)", file=sys.stderr)
      build_dense(corpus, out, spec, index_type="flat",
                  sentence_windows=search.DEFAULT_SENTENCE_WINDOWS,
                  window_encoding=search.DEFAULT_WINDOW_ENCODING,
                  matmul_dtype=search.DEFAULT_MATMUL_DTYPE)
  return out


def resolve_specs(specs: dict[str, str], world_dir: Optional[str]) -> dict[str, str]:
  """{name: spec} with each `world:<file>` spec replaced by that file of `world_dir`."""
  out = {}
  for name, spec in specs.items():
    if isinstance(spec, str) and spec.startswith(SPEC_PREFIX):
      file = spec[len(SPEC_PREFIX):]
      if world_dir is None or file not in WORLD_FILES:
        raise ValueError(f"data {name}={spec!r}: " + (
            "the config has no world (config.world.size=0)" if world_dir is None else
            f"a world has no file {file!r}; use world:qa_heldout or world:qa_train"))
      spec = os.path.join(world_dir, f"{file}.jsonl")
    out[name] = spec
  return out


def _searches_here() -> bool:
  """Only process 0 of a multi-host run searches (`ssp_jax.run.components.make_retriever`)."""
  import jax
  return jax.process_index() == 0


def resolve_world(config, ensure=None) -> Optional[str]:
  """Builds (once, cached) the world of `config.world` and fills the config's empty data fields
  from it (the module docstring lists them); returns the world directory, or None without a
  world. `ensure` replaces `ssp_jax.world.ensure_world` (tests)."""
  if not enabled(config):
    return None
  if ensure is None:
    from ssp_jax.world import ensure_world as ensure
  w = config.world
  world_dir = str(ensure(seed=int(w.seed), size=int(w.size), root=w.root or None))
  paths = world_paths(world_dir)
  from ssp_jax.run.games import game_of
  with config.unlocked():
    for field, key, only_empty in game_of(config).world_fields:   # the game's own data fields
      section, _, name = field.rpartition(".")
      sub = config
      for part in section.split(".") if section else ():
        sub = sub[part]
      if not (only_empty and sub[name]):
        sub[name] = world_dir if key == "dir" else paths[key]
    specs = world_specs(config)
    for name, path in resolve_specs(specs, world_dir).items():
      config.eval.datasets[name] = path
    r = config.get("retrieval")
    if r is not None and not r.url and not r.index_dir and _searches_here():
      r.index_dir = world_index_dir(paths["corpus"])
  return world_dir
