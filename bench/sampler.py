"""Sampler throughput with random weights; prints one JSON object per measurement.

  python bench/sampler.py                                  # Qwen2.5-0.5B and 7B, batch 64 and 256
  python bench/sampler.py --presets qwen2.5-0.5b --batches 256 --multiturn
  python bench/sampler.py --tiny                           # CPU smoke run (tiny shape)
  python bench/sampler.py --tiny --multiturn --kv-layout dense,paged --paper-step

Single turn: prompt 128 tokens, 256 new tokens, temperature 1, bf16 weights / compute / cache;
no stop ever fires, so every row decodes exactly `--new-tokens` tokens. `decode_tok_s` counts
generated tokens over the jitted while_loop only; `e2e_tok_s` includes the prefill.
Multi-turn (`--multiturn`): the full RolloutEngine loop (continuous refill, `</search>` stops,
batched stub-corpus retrieval, observation prefill into the cache). With random weights a
synthetic tokenizer maps 1/256 of the vocabulary to the text `<search> q </search>`, so a search
happens every ~256 tokens; `policy_tok_s` counts sampled tokens, `all_tok_s` adds observations;
`vs_single_turn` = policy_tok_s / the single-turn decode_tok_s of the same model, slots and KV layout.
KV layout (`--kv-layout dense,paged`): `dense` is the [L, B, K, S, H] cache, `paged` the page pool
(docs/rollout.md); every line carries `kv_layout` and `decode_attention`.
Peer (`--peer tunix`, on by default when `import tunix` works): tunix's Sampler on the same shape
(its Qwen2 model, random weights, same dtype, temperature 1, no eos); the single-turn line gets
`tunix_tok_s` (batch x new tokens over tunix's whole sampler call, prefill included),
`vs_tunix` (our e2e_tok_s / tunix_tok_s, like for like) and `vs_tunix_decode` (decode_tok_s /
tunix_tok_s).
Paper step (`--paper-step`): 256 proposer + 1,280 solver trajectories through the engine, response
budgets drawn from lognormals with the stated means (`--step-*`), printing `rollout_s`.
With --no-warmup the timed run compiles: `compile_s` is the XLA compile time inside it and
`policy_tok_s_excl_compile` the rate without it (tracing is not subtracted; null when the
compiles, summed over the host threads compiling ahead, took longer than the wall).
Memory: after each multi-turn / paper-step run a `sampler_memory` line gives the device's peak
bytes in use (process-wide so far; null on CPU) against weights + KV-cache estimates (paged: the
pages in use at most; `kv_pool_bytes` is the pool allocated, rollout.kv_pool).
Multi-turn and paper-step lines carry `engine_stats` (the host-loop time breakdown, decode steps,
occupancy, compiles; docs/rollout.md), `compiled_functions` (the timed run's compilations by
jitted function: `jit(prefill_pages)`, `jit(decode)`, ...) and, after the untimed warm-up,
`warmup_compiles` / `warmup_compile_s`. `--presets tiny` runs the tiny shape at the given batches and lengths.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# XLA's Triton GEMMs were 1.3x slower than cuBLAS for these decode shapes on an H200 (7B, b256).
if "xla_gpu_enable_triton_gemm" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_gpu_enable_triton_gemm=false").strip()

import jax
import jax.numpy as jnp
import numpy as np

import models
from models.config import ModelConfig
from ssp_jax import sampling as S
from ssp_jax.sampling import decode_step as DS
from ssp_jax.sampling import dense_pallas as DP
from ssp_jax.sampling import gemm_pallas as GP
from ssp_jax.sampling import paged_pallas as PP

ATTN = "einsum"   # --decode-attention (dense layout)
PAGED_ATTN = "gather"   # --paged-attention (paged layout)
UNROLL = 1   # --decode-unroll: decode steps per while-loop iteration
HEAD = "xla"   # --decode-head: the step's projection to the vocabulary and draw
MATMUL = "xla"   # --decode-matmul: the step's layer GEMMs (rollout.decode_matmul)
DENSE_KNOBS = "default"   # --dense-knobs: the dense decode kernel's Triton settings, this process
PAGED_KNOBS = "default"   # --paged-knobs: the paged decode kernel's, this process
MATMUL_KNOBS = "default"  # --matmul-knobs: the Pallas GEMMs' (a bench/decode_gemm.py sweep)
TINY = ModelConfig(model_type="qwen2", vocab_size=1024, hidden_size=64, intermediate_size=128,
                   num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16)


def _params(cfg, dtype):
  return jax.jit(lambda k: models.init_params(cfg, k, dtype=dtype))(jax.random.key(0))


def _init(cfg, B, P, N, dtype, tables, layout, page_size=64):
  window = tables.prefix_VM.shape[1]
  if layout == "dense":
    return S.init_state(cfg, B, P + N, window, dtype), ATTN
  cols = 1 << (-(-(P + N) // page_size) - 1).bit_length()   # pages a row, a power of two
  # every row owns its own pages (contiguous ids); page 0 is the null page
  st = S.init_paged_state(cfg, B, 1 + B * cols, page_size, cols, window, dtype)
  table = 1 + jnp.arange(B * cols, dtype=jnp.int32).reshape(B, cols)
  return S.set_table(st, table), PAGED_ATTN


def _run_once(cfg, params, dparams, B, P, N, dtype, tables, layout):
  st, attn = _init(cfg, B, P, N, dtype, tables, layout)
  rng = np.random.default_rng(0)
  prompt = jnp.asarray(rng.integers(0, cfg.vocab_size, (B, P)), jnp.int32)
  rows = jnp.arange(B, dtype=jnp.int32)
  jax.block_until_ready(st)
  t0 = time.perf_counter()
  if layout == "dense":
    st = S.prefill_rows(cfg, st, params, rows, prompt[:, :-1], jnp.zeros((B,), jnp.int32),
                        dtype=dtype)
  else:   # as the engine prefills pages: the pools alone, decode-layout weights
    k, v = S.prefill_pages(cfg, st.cache["k"], st.cache["v"], dparams, st.cache["table"],
                           prompt[:, :-1], jnp.zeros((B,), jnp.int32), dtype=dtype)
    st = st._replace(cache={**st.cache, "k": k, "v": v})
  st = S.set_rows(st, rows, prompt[:, -1], jnp.full((B,), P - 1, jnp.int32),
                  jnp.ones((B,), bool))
  jax.block_until_ready(st)
  t1 = time.perf_counter()
  st, out = S.decode(cfg, st, dparams, tables, jnp.asarray([-1], jnp.int32), jnp.ones((B,), bool),
                     jnp.full((B,), N, jnp.int32), jnp.int32(B + 1), jax.random.key(1),
                     num_steps=N, sampling=S.SamplingParams(1.0), dtype=dtype,
                     attn_impl=attn, unroll=UNROLL, head=HEAD, matmul=MATMUL)
  count = int(jax.device_get(out.count_B).sum())
  t2 = time.perf_counter()
  return count, t1 - t0, t2 - t1


def single_turn(name, cfg, B, P, N, dtype, repeats, layout):
  params = _params(cfg, dtype)
  tables = S.build_stop_tables([b"x"] * cfg.vocab_size, []).to_device()
  dparams = S.make_decode_params(cfg, params, dtype, FUSE)   # once per rollout call (engine)
  _run_once(cfg, params, dparams, B, P, N, dtype, tables, layout)  # compile
  runs = [_run_once(cfg, params, dparams, B, P, N, dtype, tables, layout)
          for _ in range(repeats)]
  count, pre, dec = min(runs, key=lambda r: r[2])
  assert count == B * N, (count, B * N)
  _profiled(f"single_{name}_b{B}_p{P}_{layout}_{ATTN if layout == 'dense' else PAGED_ATTN}"
            + (f"_u{UNROLL}" if UNROLL > 1 else "") + (f"_{HEAD}head" if HEAD != "xla" else "")
            + (f"_{MATMUL}mm" if MATMUL != "xla" else ""),
            lambda: _run_once(cfg, params, dparams, B, P, N, dtype, tables, layout))
  return {"bench": "sampler_single_turn", "model": name, "batch": B, "prompt_len": P,
          "new_tokens": N, "dtype": str(jnp.dtype(dtype)), "device": jax.devices()[0].device_kind,
          "prefill_s": round(pre, 4), "decode_s": round(dec, 4),
          "decode_tok_s": round(count / dec, 1), "e2e_tok_s": round(count / (pre + dec), 1),
          "ms_per_step": round(1000 * dec / N, 3), "kv_layout": layout, "fused_proj": FUSE,
          "prng": jax.config.jax_default_prng_impl,
          "decode_attention": ATTN if layout == "dense" else PAGED_ATTN, "decode_unroll": UNROLL,
          "decode_head": HEAD, "decode_matmul": MATMUL, "dense_knobs": DENSE_KNOBS,
          "paged_knobs": PAGED_KNOBS, "matmul_knobs": MATMUL_KNOBS,
          "direct_out": DP.DIRECT_OUT}


class SyntheticTokenizer:
  """Random-weight stand-in: token i is the text 'w{i} '; 1/256 of ids are a whole search."""

  def __init__(self, vocab_size: int, search_every: int = 256):
    self.vocab_size = vocab_size
    self.token_bytes = [b"<search> q </search>" if i % search_every == 7 else f"w{i} ".encode()
                        for i in range(vocab_size)]
    self.eos_ids = ()

  def prompt_ids(self, prompt):
    return list(prompt)

  def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
    b = text.encode()
    return [(8 + 31 * j + c) % self.vocab_size for j, c in enumerate(b[::4])]  # ~4 bytes/token

  def ids_to_bytes(self, ids, skip_special=False) -> bytes:
    return b"".join(self.token_bytes[i] for i in ids)

  def decode(self, ids, skip_special=False) -> str:
    return self.ids_to_bytes(ids).decode("utf-8", "replace")


def _engine(cfg, B, P, max_new, dtype, max_obs, layout, kv_max_tokens):
  from ssp_jax.rollout import RolloutEngine, get_rollout_config
  from ssp_jax.testing.small_retriever import SmallBM25Retriever
  rc = get_rollout_config()
  rc.update(dict(batch_size=B, max_response_tokens=max_new, max_prompt_tokens=P,
                 dtype=str(jnp.dtype(dtype)), cache_dtype=str(jnp.dtype(dtype)),
                 steps_per_call=min(256, max_new), max_obs_tokens=max_obs, kv_layout=layout,
                 kv_max_tokens=kv_max_tokens,
                 decode_attention=ATTN if layout == "dense" else PAGED_ATTN))
  if TAIL_MIN_BATCH is not None:
    rc.tail_min_batch = TAIL_MIN_BATCH
  rc.compile_ahead = COMPILE_AHEAD
  rc.prefill_attention = PREFILL_ATTN
  rc.decode_unroll = UNROLL
  rc.decode_head = HEAD
  rc.decode_matmul = MATMUL
  return RolloutEngine(cfg, SyntheticTokenizer(cfg.vocab_size), rc, SmallBM25Retriever())


WARMUP = True   # --warmup: an untimed identical run first, so the timed one compiles nothing
PROFILE = ""    # --profile DIR: one more run of each measurement under the JAX profiler
FUSE = True     # --fuse: one q/k/v and one gate/up GEMM a layer (the engine's unsharded default)
TAIL_MIN_BATCH = None   # --tail-min-batch (None: the rollout config's default)
COMPILE_AHEAD = -1      # --compile-ahead: rollout.compile_ahead (-1 auto, 0 off, N threads)
PREFILL_ATTN = "auto"   # --prefill-attention: rollout.prefill_attention (paged prefill)


def layer_matmul_flops(cfg) -> float:
  """FLOPs a token of the decoder layers' projections (q/k/v/o and the MLP): 2 x their weights.
  The embedding lookup and the lm_head are not run by a prefill; attention is left out."""
  D, F, H = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
  per_layer = D * H * (2 * cfg.num_heads + 2 * cfg.num_kv_heads) + 3 * D * F
  return 2.0 * cfg.num_layers * per_layer


def prefill_rates(cfg, stats: dict) -> dict:
  """The engine's prefill in model TFLOP/s of its projections (the `prefill_s` timer holds the
  device time of every prefill call, prompts and observations, and the host work between them):
  of the real tokens, and of the computed ones (padding of pieces and of calls included)."""
  s = float(stats.get("prefill_s", 0.0))
  if s <= 0:
    return {}
  f = layer_matmul_flops(cfg)
  return {"prefill_tflop_s_real": round(f * stats.get("prefill_tokens", 0) / s / 1e12, 1),
          "prefill_tflop_s_computed": round(f * stats.get("prefill_computed", 0) / s / 1e12, 1)}


def _profiled(tag: str, fn) -> None:
  """Runs fn once more under jax.profiler (a perfetto trace under PROFILE/tag); its time is not
  reported (the profiler slows it). bench/trace_summary.py reads the trace."""
  if not PROFILE:
    return
  d = os.path.join(PROFILE, tag)
  with jax.profiler.trace(d, create_perfetto_trace=True):
    fn()
  print(f"sampler.py: profile of {tag} in {d}", file=sys.stderr)


def _timed_generate(eng, params, prompts, budgets):
  warm = {}
  if WARMUP:
    _, first = eng.generate(params, prompts, jax.random.key(1), max_new_tokens=budgets)
    warm = {"warmup_wall_s": round(first["wall_s"], 3),
            "warmup_compiles": first["compiles"],
            "warmup_compile_s": round(first["compile_s"], 3),
            "warmup_engine_stats": {k: round(v, 3) if isinstance(v, float) else v
                                    for k, v in first.items()}}
  t0 = time.perf_counter()
  trajs, stats = eng.generate(params, prompts, jax.random.key(1), max_new_tokens=budgets)
  wall = time.perf_counter() - t0
  policy = sum(sum(t.loss_mask) for t in trajs)
  total = sum(len(t.response_ids) for t in trajs)
  reasons = {r: sum(t.stop_reason == r for t in trajs) for r in {t.stop_reason for t in trajs}}
  compile_s = float(stats.get("compile_s", 0.0))   # > 0 only with --no-warmup
  _profiled(f"engine_b{eng.cfg.batch_size}_{eng.cfg.kv_layout}_{eng.cfg.decode_attention}"
            + (f"_u{UNROLL}" if UNROLL > 1 else "") + (f"_{HEAD}head" if HEAD != "xla" else "")
            + (f"_{MATMUL}mm" if MATMUL != "xla" else ""),
            lambda: eng.generate(params, prompts, jax.random.key(1), max_new_tokens=budgets))
  return {"wall_s": round(wall, 3), "policy_tok_s": round(policy / wall, 1),
          "compile_s": round(compile_s, 3),
          # compiles on the ahead threads overlap the run (their seconds add up past the
          # wall): then no rate without them is defined, and the line says None
          "policy_tok_s_excl_compile": (round(policy / (wall - compile_s), 1)
                                        if compile_s < wall else None),
          "all_tok_s": round(total / wall, 1), "policy_tokens": policy, "all_tokens": total,
          "searches": sum(t.num_searches for t in trajs), "stop_reasons": reasons,
          "engine_stats": {k: round(v, 3) if isinstance(v, float) else v
                           for k, v in stats.items() if k != "compiled_functions"},
          "compiled_functions": stats["compiled_functions"], **warm}


def multi_turn(name, cfg, B, P, max_new, dtype, n_prompts, max_obs, layout, kv_max_tokens,
               single_tok_s):
  eng = _engine(cfg, B, P, max_new, dtype, max_obs, layout, kv_max_tokens)
  params = _params(cfg, dtype)
  rng = np.random.default_rng(0)
  prompts = [rng.integers(0, cfg.vocab_size, P).tolist() for _ in range(n_prompts)]
  res = _timed_generate(eng, params, prompts, None)
  return {"bench": "sampler_multi_turn", "model": name, "batch": B, "prompts": n_prompts,
          "prompt_len": P, "max_response_tokens": max_new, "max_obs_tokens": max_obs,
          "dtype": str(jnp.dtype(dtype)), "device": jax.devices()[0].device_kind,
          "kv_layout": layout, "decode_attention": eng.cfg.decode_attention,
          "decode_unroll": UNROLL, "decode_head": HEAD, "decode_matmul": MATMUL,
          "dense_knobs": DENSE_KNOBS, "paged_knobs": PAGED_KNOBS, "matmul_knobs": MATMUL_KNOBS,
          "direct_out": DP.DIRECT_OUT,
          "prefill_attention": eng.cfg.get("prefill_attention", "xla"), **res,
          **prefill_rates(cfg, res["engine_stats"]),
          "single_turn_decode_tok_s": single_tok_s,
          "vs_single_turn": round(res["policy_tok_s"] / single_tok_s, 3),
          "vs_single_turn_excl_compile": (
              round(res["policy_tok_s_excl_compile"] / single_tok_s, 3)
              if res["policy_tok_s_excl_compile"] is not None else None)}, eng


def paper_step(name, cfg, B, P, dtype, max_obs, layout, kv_max_tokens, a):
  """256 proposer + 1,280 solver trajectories, lognormal response budgets with the given means."""
  rng = np.random.default_rng(0)
  def budgets(n, mean):   # lognormal with E = mean: mu = log(mean) - sigma^2 / 2
    x = rng.lognormal(np.log(mean) - a.step_sigma ** 2 / 2, a.step_sigma, n)
    return np.clip(x, 16, a.step_max_new).astype(int).tolist()
  nprop, nsol = a.step_proposers, a.step_solvers
  lens = budgets(nprop, a.step_proposer_mean) + budgets(nsol, a.step_solver_mean)
  prompts = [rng.integers(0, cfg.vocab_size, P).tolist() for _ in lens]
  eng = _engine(cfg, B, P, a.step_max_new, dtype, max_obs, layout, kv_max_tokens)
  res = _timed_generate(eng, _params(cfg, dtype), prompts, lens)
  return {"bench": "sampler_paper_step", "model": name, "slots": B, "proposers": nprop,
          "solvers": nsol, "prompt_len": P, "proposer_mean_budget": a.step_proposer_mean,
          "solver_mean_budget": a.step_solver_mean, "lognormal_sigma": a.step_sigma,
          "max_response_tokens": a.step_max_new, "budget_tokens": int(sum(lens)),
          "max_obs_tokens": max_obs, "dtype": str(jnp.dtype(dtype)),
          "device": jax.devices()[0].device_kind, "kv_layout": layout,
          "decode_attention": eng.cfg.decode_attention,
          "prefill_attention": eng.cfg.get("prefill_attention", "xla"),
          **prefill_rates(cfg, res["engine_stats"]), "rollout_s": res.pop("wall_s"), **res}, eng


def memory_line(name, cfg, dtype, eng, after: str, engine_stats: dict):
  """Peak device bytes (process-wide so far) against weights + KV-cache estimates."""
  stats = jax.devices()[0].memory_stats() or {}
  peak = stats.get("peak_bytes_in_use")
  nparams = sum(int(np.prod(x)) for x in jax.tree.leaves(
      models.param_shapes(cfg), is_leaf=lambda t: isinstance(t, tuple)))
  weights = nparams * jnp.dtype(dtype).itemsize
  tok_bytes = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * jnp.dtype(dtype).itemsize
  c = eng.cfg
  pool = None
  if c.kv_layout == "paged":
    kv = int(engine_stats.get("kv_pages_peak", 0)) * int(c.page_size) * tok_bytes
    pool = int(engine_stats.get("kv_pool_pages", 0)) * int(c.page_size) * tok_bytes
  else:
    kv = int(c.batch_size) * (int(c.max_prompt_tokens) + int(c.max_response_tokens)
                              + int(c.prefill_chunk)) * tok_bytes
  est = 2 * weights + kv   # stacked params (prefill) + per-layer copy (decode)
  return {"bench": "sampler_memory", "model": name, "after": after, "kv_layout": c.kv_layout,
          "batch": int(c.batch_size), "peak_bytes": peak, "weights_bytes": weights,
          "kv_bytes_estimate": kv, "kv_pool_bytes": pool, "estimate_bytes": est,
          "peak_over_estimate": round(peak / est, 3) if peak else None}


def _tunix_config(name, cfg, dtype):
  import dataclasses
  from tunix.models.qwen2 import model as tq
  presets = {"qwen2.5-0.5b": tq.ModelConfig.qwen2p5_0p5b, "qwen2.5-7b": tq.ModelConfig.qwen2p5_7b}
  if name in presets:
    tcfg = presets[name]()
  else:
    tcfg = tq.ModelConfig(num_layers=cfg.num_layers, vocab_size=cfg.vocab_size,
                          embed_dim=cfg.hidden_size, hidden_dim=cfg.intermediate_size,
                          num_heads=cfg.num_heads, head_dim=cfg.head_dim,
                          num_kv_heads=cfg.num_kv_heads, rope_theta=int(cfg.rope_theta),
                          norm_eps=cfg.rms_norm_eps, use_tied_embedding=cfg.tie_embeddings)
  return tq, dataclasses.replace(tcfg, dtype=dtype, param_dtype=dtype)


class _IdTokenizer:
  """tunix tokenizer protocol over fixed random prompts: the text 'i' encodes to prompt i."""

  def __init__(self, prompts):
    self.prompts = prompts

  def encode(self, text, **kw):
    return list(self.prompts[int(text)])

  def decode(self, ids, **kw):
    return ""

  def bos_id(self):
    return 0   # falsy: tunix adds no BOS

  def eos_id(self):
    return -1

  def pad_id(self):
    return 0


def tunix_peer(name, cfg, B, P, N, dtype, repeats):
  """tok/s of tunix's Sampler on the same shape (whole call: prefill + decode), or None."""
  from flax import nnx
  from tunix.generate import sampler as ts
  tq, tcfg = _tunix_config(name, cfg, dtype)
  model = tq.Qwen2(tcfg, rngs=nnx.Rngs(0))
  rng = np.random.default_rng(0)
  tok = _IdTokenizer(rng.integers(1, cfg.vocab_size, (B, P)))
  sampler = ts.Sampler(model, tok, ts.CacheConfig(cache_size=P + N, num_layers=cfg.num_layers,
                                                  num_kv_heads=cfg.num_kv_heads,
                                                  head_dim=cfg.head_dim))
  texts = [str(i) for i in range(B)]
  call = lambda: sampler(texts, max_generation_steps=N, max_prompt_length=P, temperature=1.0,
                         top_p=1.0, eos_tokens=[-1], seed=0)   # returns host tokens (synced)
  call()   # compile
  best = min(_timed(call) for _ in range(repeats))
  return round(B * N / best, 1)


def _timed(fn):
  t0 = time.perf_counter()
  fn()
  return time.perf_counter() - t0


# what tunix's sampler and Qwen2 model import at module level
TUNIX_DEPS = ("flax (nnx), optax, orbax-checkpoint, etils, sentencepiece, jaxtyping, absl-py, "
              "Pillow (and metrax, stubbed when absent)")


def _import_tunix() -> None:
  """Imports tunix's Sampler and Qwen2 model. tunix/__init__.py imports tunix's whole API (SFT,
  distillation, RL learners) and all their dependencies; when that fails, the package is set up
  as a bare module over the same directory (its __init__ not run), so only the sampler's and the
  model's own imports are needed."""
  try:
    import tunix.generate.sampler  # noqa: F401
    import tunix.models.qwen2.model  # noqa: F401
    return
  except Exception:   # noqa: BLE001 - retried below without tunix/__init__.py
    pass
  import importlib.util
  import types
  for name in [m for m in sys.modules if m == "tunix" or m.startswith("tunix.")]:
    del sys.modules[name]
  try:   # tunix's Qwen2 imports jax.experimental.shard_map, which newer JAX may no longer have
    import jax.experimental.shard_map  # noqa: F401
  except ImportError:
    if hasattr(jax, "shard_map"):
      shim = types.ModuleType("jax.experimental.shard_map")
      shim.shard_map = jax.shard_map
      sys.modules["jax.experimental.shard_map"] = shim
  spec = importlib.util.find_spec("tunix")
  if spec is None or not spec.submodule_search_locations:
    raise ModuleNotFoundError("No module named 'tunix' (put tunix's source dir on PYTHONPATH)")
  pkg = types.ModuleType("tunix")
  pkg.__path__ = list(spec.submodule_search_locations)
  sys.modules["tunix"] = pkg
  if importlib.util.find_spec("metrax") is None:
    # metrax is imported only by tunix's SFT metrics logger (tunix.common.configs imports it),
    # never called by the sampler: a stub with the three backend names lets the sampler import.
    metrax, logging_ = types.ModuleType("metrax"), types.ModuleType("metrax.logging")
    for name in ("LoggingBackend", "TensorboardBackend", "WandbBackend"):
      setattr(logging_, name, type(name, (), {}))
    metrax.logging = logging_
    sys.modules.update({"metrax": metrax, "metrax.logging": logging_})
    print("sampler.py: tunix peer with a stub for metrax (absent here; only tunix's training "
          "metrics logger uses it)", file=sys.stderr)
  import tunix.generate.sampler  # noqa: F401,F811
  import tunix.models.qwen2.model  # noqa: F401,F811


def _tunix_import_error() -> str:
  """'' when tunix's sampler imports, else why not (the missing module named)."""
  try:
    _import_tunix()
    return ""
  except Exception as e:   # absent, or one of its dependencies is
    missing = e.name if isinstance(e, ModuleNotFoundError) else None
    what = f"missing module {missing!r}" if missing else f"{type(e).__name__}: {e}"
    return (f"{what}; tunix's sampler imports at module level: {TUNIX_DEPS}")


def _report(name, bench, layout, run, cfg, dtype):
  """Prints a run's line and its memory line; a failure (e.g. out of device memory) becomes an
  `error` line, so one shape that does not fit does not end the whole benchmark."""
  try:
    line, eng = run()
  except Exception as e:  # noqa: BLE001 - reported, not hidden
    print(json.dumps({"bench": bench, "model": name, "kv_layout": layout,
                      "error": f"{type(e).__name__}: {str(e)[:300]}"}), flush=True)
    return
  print(json.dumps(line), flush=True)
  print(json.dumps(memory_line(name, cfg, dtype, eng, bench, line.get("engine_stats", {}))),
        flush=True)


def _knobs(p, flag: str, value: str) -> tuple[int, int, int] | None:
  """A --*-knobs value: None for "default", else three positive integers (exit 2 otherwise)."""
  if value == "default":
    return None
  try:
    knobs = tuple(int(x) for x in value.split(","))
    assert len(knobs) == 3 and min(knobs) >= 1
  except (ValueError, AssertionError):
    p.error(f"{flag} {value!r}: three positive integers W,S,B (num_warps, num_stages, "
            f"max_block), or default")
  return knobs


def swept_knobs(p, path: str):
  """gemm_pallas.default_knobs's stand-in from a bench/decode_gemm.py output: per weight shape
  (K, N), the fastest Pallas line's knobs (lines with an error, or rel_err >= 0.03, skipped;
  two GEMMs of one shape, e.g. q/k/v and gate/up of the tiny model, share the faster's);
  at another row count its block_m is lowered to fit, and where it still does not fit, or the
  shape was not swept, gemm_pallas.default_knobs decides. Exit 2 naming the flag when the file
  cannot be read or holds no Pallas line."""
  best = {}   # (K, N the kernel's output width) -> (us, Knobs)
  try:
    with open(path) as f:
      for raw in f:
        d = json.loads(raw) if raw.startswith("{") else {}
        if (d.get("bench") != "decode_gemm" or d.get("impl") != "pallas" or "error" in d
                or d.get("rel_err", 1.0) >= 0.03):
          continue
        key = (d["K"], d["N"] // 2 if d["gemm"] == "gate_up" else d["N"])
        if key not in best or d["us"] < best[key][0]:
          best[key] = (d["us"], GP.Knobs(*d["knobs"]))
  except (OSError, ValueError, KeyError, TypeError) as e:
    p.error(f"--matmul-knobs {path!r}: not a bench/decode_gemm.py output ({e})")
  if not best:
    p.error(f"--matmul-knobs {path!r}: no Pallas line without an error (run "
            f"bench/decode_gemm.py and pass its output)")
  default = GP.default_knobs

  def knobs(M, K, N, one_share=False):
    if (K, N) in best:
      kn = best[(K, N)][1]
      kn = kn._replace(block_m=min(kn.block_m, GP._pow2_divisor(M)))
      if not (one_share and kn.splits != 1):
        try:
          return GP.check(M, K, N, kn)
        except ValueError:
          pass
    return default(M, K, N, one_share)
  return knobs, {f"{k[0]}x{k[1]}": list(v[1]) for k, v in sorted(best.items())}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--presets", default="qwen2.5-0.5b,qwen2.5-7b")
  p.add_argument("--batches", default="64,256")
  p.add_argument("--prompt-len", type=int, default=128)
  p.add_argument("--new-tokens", type=int, default=256)
  p.add_argument("--dtype", default="bfloat16")
  p.add_argument("--repeats", type=int, default=2)
  p.add_argument("--tiny", action="store_true", help="tiny shape, small batch (CPU smoke run)")
  p.add_argument("--single", action=argparse.BooleanOptionalAction, default=True)
  p.add_argument("--multiturn", action="store_true", help="also the full search loop")
  p.add_argument("--mt-max-new", type=int, default=1024)
  p.add_argument("--mt-prompts-per-slot", type=int, default=2)
  p.add_argument("--mt-max-obs", type=int, default=512)
  p.add_argument("--decode-attention", default="einsum",
                 help="dense layout: reduce | einsum | cudnn | xla | pallas | pallas_rope (RoPE "
                 "in the kernel); a comma list compares them")
  p.add_argument("--decode-unroll", default="1",
                 help="decode steps per while-loop iteration (rollout.decode_unroll); a comma "
                      "list compares them")
  p.add_argument("--decode-head", default="xla",
                 help="the step's projection and draw (rollout.decode_head): xla | pallas (one "
                      "kernel, the logits never stored); a comma list compares them")
  p.add_argument("--decode-matmul", default="xla",
                 help="the step's layer GEMMs (rollout.decode_matmul): xla | pallas (Triton, "
                      "K split, norms and SiLU inside); a comma list compares them")
  p.add_argument("--dense-knobs", default="default", metavar="W,S,B",
                 help="the dense decode kernel's num_warps, num_stages, max_block for every "
                      "cache in this process, in place of dense_pallas.default_knobs (to time "
                      "settings in the loop; one setting a process: the kernel is traced once)")
  p.add_argument("--paged-knobs", default="default", metavar="W,S,B",
                 help="the paged decode kernel's num_warps, num_stages, max_block in this "
                      "process, in place of paged_pallas.default_knobs (as --dense-knobs)")
  p.add_argument("--matmul-knobs", default="default", metavar="FILE",
                 help="rollout.decode_matmul pallas: each GEMM's knobs from a "
                      "bench/decode_gemm.py output (the fastest line per weight shape), in "
                      "place of gemm_pallas.default_knobs in this process")
  p.add_argument("--direct-out", choices=("default", "on", "off"), default="default",
                 help="the Pallas decode kernels (dense and paged) write each KV head's real "
                      "query rows straight into [B, N, H] (on) or a padded tile that XLA slices "
                      "(off), in this process; default: dense_pallas.DIRECT_OUT")
  p.add_argument("--kv-layout", default="dense", help="dense | paged; a comma list compares them")
  p.add_argument("--paged-attention", default=None,
                 help="paged layout: gather | pallas (fused, sampling/paged_pallas.py) | "
                 "pallas_rope (the same, RoPE in the kernel) | pallas_jax (JAX's library "
                 "kernel); a comma list compares them (default: pallas on GPU, else gather)")
  p.add_argument("--kv-max-tokens", type=int, default=0,
                 help="paged pool cap in tokens (rollout.kv_max_tokens; 0 = no cap)")
  p.add_argument("--peer", default="auto", help="auto (tunix when importable) | tunix | none")
  p.add_argument("--paper-step", action="store_true",
                 help="256 proposer + 1,280 solver trajectories, lognormal budgets")
  p.add_argument("--step-slots", type=int, default=256)
  p.add_argument("--step-proposers", type=int, default=256)
  p.add_argument("--step-solvers", type=int, default=1280)
  p.add_argument("--step-proposer-mean", type=float, default=1024.0)
  p.add_argument("--step-solver-mean", type=float, default=2048.0)
  p.add_argument("--step-sigma", type=float, default=0.8)
  p.add_argument("--step-max-new", type=int, default=8192)
  p.add_argument("--tail-min-batch", type=int, default=None,
                 help="rollout.tail_min_batch for the engine runs (0 = the batch never shrinks)")
  p.add_argument("--compile-ahead", type=int, default=-1,
                 help="rollout.compile_ahead for the engine runs: paged programs compiled on N "
                      "host threads before they are needed (-1 auto: on a GPU; 0 = off)")
  p.add_argument("--fuse", action=argparse.BooleanOptionalAction, default=True,
                 help="single turn: fused q/k/v and gate/up decode weights (the engine fuses "
                      "whenever it is unsharded)")
  p.add_argument("--prng", default="", help="JAX PRNG implementation for sampling "
                 "(threefry2x32 | rbg | unsafe_rbg; default: JAX's)")
  p.add_argument("--profile", default="", metavar="DIR",
                 help="also run each measurement once more under the JAX profiler, writing a "
                      "perfetto trace under DIR (read it with bench/trace_summary.py)")
  p.add_argument("--prefill-attention", default="auto",
                 help="rollout.prefill_attention of the engine runs: auto | xla | cudnn")
  p.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                 help="multi-turn / paper step: an untimed identical run first (compiles); "
                      "--no-warmup halves the time and counts compilation in the timed run")
  a = p.parse_args(argv)
  global ATTN, PAGED_ATTN, WARMUP, PROFILE, TAIL_MIN_BATCH, FUSE, COMPILE_AHEAD, PREFILL_ATTN
  global UNROLL, HEAD, MATMUL, DENSE_KNOBS, PAGED_KNOBS, MATMUL_KNOBS
  WARMUP, PROFILE, TAIL_MIN_BATCH, FUSE = a.warmup, a.profile, a.tail_min_batch, a.fuse
  COMPILE_AHEAD, PREFILL_ATTN = a.compile_ahead, a.prefill_attention
  if a.prng:
    jax.config.update("jax_default_prng_impl", a.prng)
  try:
    unrolls = [int(u) for u in a.decode_unroll.split(",")]
  except ValueError:
    unrolls = [0]
  if min(unrolls) < 1:
    p.error(f"--decode-unroll {a.decode_unroll!r}: decode steps per loop iteration, integers "
            f">= 1 (a comma list compares them)")
  dense_knobs = _knobs(p, "--dense-knobs", a.dense_knobs)
  if dense_knobs:
    DENSE_KNOBS = a.dense_knobs
    DP.default_knobs = lambda S, H: dense_knobs
  paged_knobs = _knobs(p, "--paged-knobs", a.paged_knobs)
  if paged_knobs:
    PAGED_KNOBS = a.paged_knobs
    PP.default_knobs = lambda H: paged_knobs
  if a.matmul_knobs != "default":
    GP.default_knobs, table = swept_knobs(p, a.matmul_knobs)
    MATMUL_KNOBS = table
  if a.direct_out != "default":
    DP.DIRECT_OUT = a.direct_out == "on"
  heads = a.decode_head.split(",")
  if not set(heads) <= set(S.HEADS):
    p.error(f"--decode-head {a.decode_head!r}: a comma list of {S.HEADS}")
  matmuls = a.decode_matmul.split(",")
  if not set(matmuls) <= set(DS.MATMULS):
    p.error(f"--decode-matmul {a.decode_matmul!r}: a comma list of {DS.MATMULS}")
  paged_impls = (a.paged_attention
                 or ("pallas" if jax.default_backend() == "gpu" else "gather")).split(",")
  PAGED_ATTN = paged_impls[0]
  layouts = a.kv_layout.split(",")
  for lay in layouts:
    if lay not in ("dense", "paged"):
      p.error(f"--kv-layout {lay!r}: use dense, paged or both (comma list)")
  if a.peer not in ("auto", "tunix", "none"):
    p.error(f"--peer {a.peer!r}: use auto, tunix or none")
  why = _tunix_import_error() if a.peer != "none" else "--peer none"
  if a.peer == "tunix" and why:
    p.error(f"--peer tunix: cannot import tunix ({why}); put tunix's source and its "
            f"dependencies on PYTHONPATH, or use --peer none")
  peer = not why
  if a.peer == "auto" and why:
    print(f"sampler.py: no tunix peer ({why})", file=sys.stderr)
  dtype = jnp.dtype(a.dtype)
  if a.tiny:
    shapes, batches, a.new_tokens, a.mt_max_new, a.mt_max_obs = [("tiny", TINY)], [8], 32, 96, 24
    a.step_slots, a.step_proposers, a.step_solvers = 8, 4, 20
    a.step_proposer_mean, a.step_solver_mean, a.step_max_new = 24.0, 48.0, 96
  else:
    shapes = [(n, TINY if n == "tiny" else models.get_preset(n)) for n in a.presets.split(",")]
    batches = [int(b) for b in a.batches.split(",")]
  for name, cfg in shapes:
    for B in batches:
      tunix_tok_s = None
      if peer and a.single:
        try:
          tunix_tok_s = tunix_peer(name, cfg, B, a.prompt_len, a.new_tokens, dtype, a.repeats)
        except Exception as e:  # noqa: BLE001 - reported; our own lines still come
          print(json.dumps({"bench": "sampler_tunix_peer", "model": name, "batch": B,
                            "error": f"{type(e).__name__}: {str(e)[:300]}"}), flush=True)
      for lay in layouts:
        for impl in (a.decode_attention.split(",") if lay == "dense" else paged_impls):
          if lay == "dense":
            ATTN = impl
          else:
            PAGED_ATTN = impl
          for UNROLL, HEAD, MATMUL in itertools.product(unrolls, heads, matmuls):
            single = None
            if a.single or a.multiturn:
              single = single_turn(name, cfg, B, a.prompt_len, a.new_tokens, dtype, a.repeats,
                                   lay)
              if tunix_tok_s:
                single.update(tunix_tok_s=tunix_tok_s,
                              vs_tunix=round(single["e2e_tok_s"] / tunix_tok_s, 3),
                              vs_tunix_decode=round(single["decode_tok_s"] / tunix_tok_s, 3))
              if a.single:
                print(json.dumps(single), flush=True)
            if a.multiturn:
              _report(name, "sampler_multi_turn", lay, lambda: multi_turn(
                  name, cfg, B, a.prompt_len, a.mt_max_new, dtype, a.mt_prompts_per_slot * B,
                  a.mt_max_obs, lay, a.kv_max_tokens, single["decode_tok_s"]), cfg, dtype)
    if a.paper_step:
      for lay in layouts:
        ATTN = a.decode_attention.split(",")[0]
        _report(name, "sampler_paper_step", lay, lambda: paper_step(
            name, cfg, a.step_slots, a.prompt_len, dtype, a.mt_max_obs, lay, a.kv_max_tokens,
            a), cfg, dtype)
  return 0


if __name__ == "__main__":
  sys.exit(main())
