"""The warm start of a training run: demonstrations -> SFT -> params, cached on disk.

`warm_params(config, ...)` returns the warm-started params, training them on first use (a few
minutes on a 2-core CPU for the 135M default) and reading them from the cache afterwards:
`$SSP_JAX_CACHE/warmstart/<key>/` (an HF checkpoint directory + `warmstart.json`), keyed by the
model file, the `warmstart` section, the answer set, the corpus, the retriever and the prompt
layout settings. A run resumed from a checkpoint restores its own params; the warm-started ones
still give it the same KL reference.

A cache entry whose `warmstart.json` is missing, empty, not JSON or without its fields (an
interrupted copy, a full disk) is a cache miss: one warning line, then it is trained again. Before
training, the cache directory is checked for writing and for room for the checkpoint
(`models.cache.ensure_writable`), so a read-only or full cache is one line naming it and
$SSP_JAX_CACHE before the minutes of SFT, not an error after them.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time

import jax

import models
from models.cache import cache_root, ensure_writable, write_failed
from ssp_jax.eval.data import builtin_path
from ssp_jax.ssp.warmstart import demos as demos_lib
from ssp_jax.ssp.warmstart.sft import learned, sft

log = logging.getLogger(__name__)
VERSION = 3      # bump when the demonstrations or the SFT change meaning
EVAL_SUPPORT = builtin_path("wiki_sample")   # its passages are never demonstrations


def _file_id(path: str) -> str:
  if not path or not os.path.exists(path):
    return str(path)
  st = os.stat(path)
  return f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}"


def _answers_path(config) -> str:
  from ssp_jax.ssp.answers import default_answers_path
  return config.ssp.answers_path or default_answers_path()


def cache_key(config) -> str:
  from retrieval.corpus import default_corpus_path
  from retrieval.search import _file_digest as _digest
  model = config.model.path or models.checkpoint.default_model_path()
  w = {k: v for k, v in config.warmstart.to_dict().items()   # defaults added later keep old keys
       if (k, v) not in (("demos", "blank"), ("train_layers", 0))}
  parts = (VERSION, _file_id(model), config.model.chat_format, w,
           _digest(_answers_path(config)), _digest(default_corpus_path()),
           config.retrieval.url or config.retrieval.index_dir or "default-index",
           config.rollout.topk, config.rollout.max_obs_tokens, config.ssp.filters.to_dict(),
           config.ssp.default_hops, config.rl.compute_dtype, config.ssp.rag.noise_docs,
           config.ssp.rag.enabled)
  from ssp_jax.rl.step import resolve_attn_impl
  attn = resolve_attn_impl(config.rl.attn_impl)
  if attn == "blocked":   # the same SFT up to rounding
    parts += (("attn", "blocked", int(config.rl.attn_chunk)),)
  elif attn in ("cudnn", "cudnn_gqa"):   # entries trained before the padding-gradient fix
    parts += (("attn", "cudnn-padding-guarded"),)   # (models/layers.py, 2026-12-05) learned
                                                    # nothing: not reused
  if config.warmstart.get("demos", "blank") == "world":   # the world's files, not the shipped ones
    world_dir = config.ssp.get("world_dir", "")
    parts += tuple(_digest(os.path.join(world_dir, f))
                   for f in ("qa_train.jsonl", "world.json", "corpus.jsonl"))
  return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]


DEMO_SOURCES = ("blank", "world")


def build_demos(config, tokenizer, retriever) -> list[demos_lib.Demo]:
  from ssp_jax.ssp import filters
  w = config.warmstart
  kind = w.get("demos", "blank")
  if kind not in DEMO_SOURCES:
    raise ValueError(f"warmstart.demos={kind!r} is not one of {DEMO_SOURCES}")
  if kind == "world":
    from ssp_jax.ssp.warmstart import world_demos
    world_dir = config.ssp.get("world_dir", "")
    if not world_dir:
      raise ValueError("warmstart.demos='world' needs ssp.world_dir (a directory written by "
                       "`ssp-jax world build`)")
    want = int(w.sources)
    sources = world_demos.load_world_sources(world_dir, limit=max(8 * want, 256), seed=w.seed)
    return world_demos.build_world_demos(
        sources, retriever, tokenizer, topk=config.rollout.topk,
        max_obs_tokens=config.rollout.max_obs_tokens,
        filter_cfg=filters.FilterConfig.from_config(config.ssp.filters),
        max_searches=int(config.rollout.max_searches), want=want,
        want_solvers=w.solver_sources,
        noise_docs=config.ssp.rag.noise_docs if config.ssp.rag.enabled else 0, seed=w.seed)
  sources = demos_lib.load_sources(_answers_path(config), default_hops=config.ssp.default_hops,
                                   seed=w.seed)
  return demos_lib.build_demos(
      sources, retriever, tokenizer, topk=config.rollout.topk,
      max_obs_tokens=config.rollout.max_obs_tokens,
      filter_cfg=filters.FilterConfig.from_config(config.ssp.filters),
      exclude_ids=sorted(demos_lib.eval_support_ids([EVAL_SUPPORT])), want=w.sources,
      want_solvers=w.solver_sources,
      noise_docs=config.ssp.rag.noise_docs if config.ssp.rag.enabled else 0, seed=w.seed)


def fit_to_rows(demos: list[demos_lib.Demo], max_len: int) -> list[demos_lib.Demo]:
  """The demonstrations that fit a packed row of `max_len` tokens. Raises when every
  demonstration of a role is longer (that role would never be learned), naming the length
  it needs; prints how many were left out otherwise."""
  size = lambda d: len(d.traj.prompt_ids) + len(d.traj.response_ids)
  kept = [d for d in demos if size(d) <= max_len]
  for role in ("proposer", "verifier", "solver"):
    mine = [size(d) for d in demos if d.role == role]
    out = sum(n > max_len for n in mine)
    if mine and out == len(mine):
      raise ValueError(f"warm start: every {role} demonstration is longer than "
                       f"warmstart.max_len={max_len} (shortest {min(mine)} tokens); raise "
                       f"warmstart.max_len, or shorten the prompts (rollout.max_obs_tokens, "
                       f"ssp.rag.noise_docs)")
    if out:
      print(f"warm start: {out} of {len(mine)} {role} demonstrations are longer than "
            f"warmstart.max_len={max_len} and are left out", file=sys.stderr)
  return kept


def demos_for_config(config):
  """(demonstrations, tokenizer) of a config, for inspection (`python -m ssp_jax.ssp.warmstart.demos`)."""
  from ssp_jax.run.components import load_model, make_retriever
  _, _, tok = load_model(config.model.path, None, "float32", config.model.chat_format)
  return build_demos(config, tok, make_retriever(config.retrieval)), tok


def warm_params(config, model_cfg: models.ModelConfig, params, tokenizer, retriever, *,
                sharder=None, dtype=None):
  """Warm-started params (cached); `params` are the loaded model's."""
  if jax.process_count() > 1:
    raise ValueError("warmstart.enabled works in single-process runs only: run the warm start "
                     "once on one host (ssp-jax train --config.total_steps=0) and point "
                     "model.path at the directory it prints")
  out = os.path.join(cache_root(), "warmstart", cache_key(config))
  meta = read_meta(out)
  if meta is not None and learned(meta["epoch_loss"]):   # a cached entry that learned nothing
    print(f"WARNING (the cached entry {out}): {learned(meta['epoch_loss'])}; delete the entry "
          "to train it again", file=sys.stderr)
  if meta is None:
    ensure_writable(os.path.dirname(out), _checkpoint_bytes(params), "the warm start")
    _train_and_save(config, model_cfg, params, tokenizer, retriever, out)
    meta = read_meta(out)
    if meta is None:
      raise ValueError(f"warm start: {out} was written but its warmstart.json cannot be read "
                       "back; check the disk, or set SSP_JAX_CACHE to another directory")
  log.info("warm start: %s (%s demonstrations, loss %s)", out, meta["demos"], meta["epoch_loss"])
  _, warm = models.hf_io.load_hf_checkpoint(
      out, dtype=dtype or jax.tree.leaves(params)[0].dtype, sharder=sharder)
  return warm


META_FIELDS = ("demos", "epoch_loss", "version")


def read_meta(out: str):
  """The cached entry's warmstart.json as a dict, or None for a cache miss. A damaged entry (an
  empty, truncated or foreign file, missing fields, no config.json beside it) is a miss with one
  warning line: it is trained again, never a traceback."""
  path = os.path.join(out, "warmstart.json")
  if not os.path.exists(path):
    return None
  problem = None
  try:
    with open(path, encoding="utf-8") as f:
      meta = json.load(f)
  except (OSError, ValueError) as e:     # JSONDecodeError and UnicodeDecodeError are ValueErrors
    problem = f"not readable JSON ({type(e).__name__}: {e})"
  else:
    if not isinstance(meta, dict):
      problem = "not a JSON object"
    elif any(k not in meta for k in META_FIELDS):
      problem = f"lacks field(s) {[k for k in META_FIELDS if k not in meta]}"
    elif not os.path.exists(os.path.join(out, "config.json")):
      problem = "has no config.json beside it"
  if problem:
    print(f"warm start: the cached {path} is {problem}; treating it as a cache miss and "
          "training the warm start again", file=sys.stderr)
    return None
  return meta


def _checkpoint_bytes(params) -> int:
  """Bytes the saved warm start takes, about: the params at their dtype, plus the tokenizer."""
  return sum(int(x.size) * x.dtype.itemsize for x in jax.tree.leaves(params)) + (32 << 20)


def _train_and_save(config, model_cfg, params, tokenizer, retriever, out: str) -> None:
  w = config.warmstart
  t0 = time.perf_counter()
  print(f"warm start (first use only, cached in {out}): building demonstrations",
        file=sys.stderr)
  demos = fit_to_rows(build_demos(config, tokenizer, retriever), w.max_len)
  counts = {r: sum(d.role == r for d in demos) for r in ("proposer", "solver", "verifier")}
  if not counts["proposer"] or not counts["solver"]:
    raise ValueError(f"warm start: too few demonstrations ({counts}); check the answer set "
                     f"({_answers_path(config)}) and the retriever, or set "
                     "warmstart.enabled=False")
  tokens = sum(len(d.traj.prompt_ids) + len(d.traj.response_ids) for d in demos)
  print(f"warm start: {len(demos)} demonstrations {counts}, {tokens} tokens; "
        f"{w.epochs} epochs of SFT", file=sys.stderr)
  t1 = time.perf_counter()
  warm, epoch_loss = sft(model_cfg, params, [d.traj for d in demos], epochs=w.epochs, lr=w.lr,
                         batch_size=w.batch_size, max_len=w.max_len,
                         seed=w.seed, compute_dtype=config.rl.compute_dtype, remat=w.remat,
                         train_layers=int(w.get("train_layers", 0)),
                         attn_impl=config.rl.attn_impl, attn_chunk=int(config.rl.attn_chunk),
                         progress=bool(config.progress))
  meta = {"demos": counts, "tokens": tokens, "epoch_loss": [round(x, 4) for x in epoch_loss],
          "build_s": round(t1 - t0, 1), "sft_s": round(time.perf_counter() - t1, 1),
          "config": config.warmstart.to_dict(), "version": VERSION}
  failed = _save(out, model_cfg, warm, tokenizer, meta)
  if failed is not None:   # raised here, outside the except block: see models/cache.py
    raise write_failed(os.path.dirname(out), failed, "the warm start")
  print(f"warm start done: loss per epoch {meta['epoch_loss']} ({meta['sft_s']} s)",
        file=sys.stderr)
  flat = learned(epoch_loss)
  if flat:
    print(f"WARNING: {flat} (the entry {out} is kept: delete it to train it again)",
          file=sys.stderr)


def _save(out: str, model_cfg, warm, tokenizer, meta: dict):
  """Writes the entry atomically (a temporary directory renamed to `out`); returns the OSError
  that stopped it (the disk filled up while writing), else None."""
  tmp = None
  try:
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".warmstart-", dir=os.path.dirname(out))
    models.hf_io.save_hf_checkpoint(tmp, model_cfg, warm)
    tokenizer.hf.save_pretrained(tmp)   # a complete HF dir: `ssp-jax eval --checkpoint DIR`
    with open(os.path.join(tmp, "warmstart.json"), "w", encoding="utf-8") as f:
      json.dump(meta, f, indent=1)
    if os.path.exists(out):
      shutil.rmtree(out)
    os.replace(tmp, out)
  except OSError as e:
    return e
  finally:
    if tmp is not None:
      shutil.rmtree(tmp, ignore_errors=True)
  return None
