"""Builds a world directory: graph -> passages -> questions -> answer set -> files.

  build_world(seed, size, out_dir) -> summary dict     (the `ssp-jax world build` verb)
  ensure_world(seed, size, root)   -> directory        (built once into the cache, then reused)

Same (seed, size) -> the same bytes in every file: JSON with sorted keys, integers and strings
only (no floats), lists in a fixed order. Each file is written to a temporary name and renamed,
so a reader never sees half a file; `ensure_world` builds the whole directory under a temporary
name and renames it, so a concurrent caller never sees half a world.
"""
from __future__ import annotations

import collections
import json
import os
import shutil
import tempfile
from typing import Iterable, Optional

from ssp_jax.world.graph import Graph, generate
from ssp_jax.world.questions import answer_set, make_questions
from ssp_jax.world.render import render
from ssp_jax.world.schema import VERSION

CORPUS, ANSWERS, QA_TRAIN, QA_HELDOUT, WORLD = ("corpus.jsonl", "answers.jsonl", "qa_train.jsonl",
                                                "qa_heldout.jsonl", "world.json")
WORLD_FILES = (CORPUS, ANSWERS, QA_TRAIN, QA_HELDOUT, WORLD)
DEFAULT_SIZE = 5000
MIN_SIZE = 100


def _dumps(obj) -> str:
  return json.dumps(obj, sort_keys=True, ensure_ascii=False)


def _write(path: str, lines: Iterable[str]) -> None:
  """Writes `lines` (each ending in a newline) to `path` atomically."""
  tmp = f"{path}.tmp-{os.getpid()}"
  with open(tmp, "w", encoding="utf-8", newline="\n") as f:
    for line in lines:
      f.write(line)
  os.replace(tmp, path)


def world_record(g: Graph, where: dict) -> dict:
  """world.json: every entity (id, kind, type, name, aliases, attributes and the passages that
  state each attribute, its own article's passages) and every relation triple with the passages
  that state it."""
  def pids(fact) -> list[str]:
    return sorted(where.get(fact, ()), key=int)

  entities = []
  for e in g.entities:
    sources = {a: pids(("a", e.idx, a)) for a in e.attrs}
    entities.append({"id": e.id, "kind": e.kind, "type": e.type, "name": e.name,
                     "aliases": list(e.aliases), "attributes": dict(e.attrs),
                     "sources": sources, "passages": pids(("e", e.idx))})
  relations = [{"subject": g.entities[s].id, "relation": rel, "object": g.entities[o].id,
                "passages": pids(("r", s, rel, o))} for s, rel, o in g.triples]
  return {"seed": g.seed, "size": g.size, "version": VERSION, "entities": entities,
          "relations": relations}


def check_size(size: int) -> None:
  if isinstance(size, bool) or not isinstance(size, int) or size < MIN_SIZE:
    raise ValueError(f"world size={size!r} must be an integer >= {MIN_SIZE} (entities); "
                     f"the default is {DEFAULT_SIZE}")


def build_world(seed: int, size: int, out_dir: str) -> dict:
  """Writes the five world files into `out_dir` (created if missing); returns the summary."""
  check_size(size)
  g = generate(seed, size)
  passages, where = render(g)
  records = make_questions(g, where, seed)
  answers = answer_set(g, records, seed)
  os.makedirs(out_dir, exist_ok=True)
  split = {"train": [], "heldout": []}
  for rec in records:
    split[rec["split"]].append({k: v for k, v in rec.items() if k != "split"})
  _write(os.path.join(out_dir, CORPUS), (_dumps(p) + "\n" for p in passages))
  _write(os.path.join(out_dir, ANSWERS), (_dumps(a) + "\n" for a in answers))
  _write(os.path.join(out_dir, QA_TRAIN), (_dumps(r) + "\n" for r in split["train"]))
  _write(os.path.join(out_dir, QA_HELDOUT), (_dumps(r) + "\n" for r in split["heldout"]))
  _write(os.path.join(out_dir, WORLD), [_dumps(world_record(g, where)) + "\n"])
  return summary(g, passages, split, answers, out_dir)


def summary(g: Graph, passages, split: dict, answers: list, out_dir: str) -> dict:
  def hist(items, key) -> dict:
    return dict(sorted(collections.Counter(str(key(x)) for x in items).items()))

  return {"dir": out_dir, "seed": g.seed, "size": g.size, "version": VERSION,
          "entities": hist(g.entities, lambda e: e.type),
          "kinds": hist(g.entities, lambda e: e.kind),
          "relations": len(g.triples), "passages": len(passages),
          "train": {"n": len(split["train"]), "hops": hist(split["train"], lambda r: r["hops"]),
                    "kinds": hist(split["train"], lambda r: r["kind"])},
          "heldout": {"n": len(split["heldout"]),
                      "hops": hist(split["heldout"], lambda r: r["hops"]),
                      "kinds": hist(split["heldout"], lambda r: r["kind"])},
          "answers": {"n": len(answers), "hops": hist(answers, lambda a: a["search_turns"])}}


def read_header(world_dir: str) -> Optional[dict]:
  """{"seed", "size", "version"} of a world directory, or None if it holds no readable world."""
  try:
    with open(os.path.join(world_dir, WORLD), encoding="utf-8") as f:
      rec = json.load(f)
    return {k: rec[k] for k in ("seed", "size", "version")}
  except (OSError, ValueError, KeyError, TypeError):
    return None


def is_world(world_dir: str, seed: int, size: int) -> bool:
  """True if `world_dir` holds every world file of this (seed, size) and the current version."""
  if not all(os.path.isfile(os.path.join(world_dir, f)) for f in WORLD_FILES):
    return False
  return read_header(world_dir) == {"seed": seed, "size": size, "version": VERSION}


def default_root() -> str:
  """`$SSP_JAX_CACHE/worlds` (default ~/.cache/ssp-jax/worlds), next to the default index."""
  from retrieval.search import cache_root
  return os.path.join(cache_root(), "worlds")


def ensure_world(seed: int = 0, size: int = DEFAULT_SIZE, root: Optional[str] = None) -> str:
  """The directory of world (seed, size) under `root`, built on first use.

  The world is built in a temporary sibling directory and renamed into place, so a concurrent
  call either finds the finished directory or builds its own copy and discards it when another
  one won the rename. An outdated world (older VERSION) is replaced."""
  check_size(size)
  root = os.path.abspath(os.path.expanduser(root or default_root()))
  final = os.path.join(root, f"seed{int(seed)}_n{int(size)}")
  if is_world(final, seed, size):
    return final
  os.makedirs(root, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=f".tmp-seed{seed}_n{size}-", dir=root)
  try:
    build_world(seed, size, tmp)
    if os.path.isdir(final) and not is_world(final, seed, size):   # outdated or broken
      stale = tempfile.mkdtemp(prefix=f".stale-seed{seed}_n{size}-", dir=root)
      try:
        os.replace(final, os.path.join(stale, "old"))
      except OSError:
        pass                          # another caller moved it first
      shutil.rmtree(stale, ignore_errors=True)
    try:
      os.rename(tmp, final)
    except OSError:                   # another caller's world is in place
      if not is_world(final, seed, size):
        raise
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return final
