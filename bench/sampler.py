"""Sampler throughput with random weights; prints one JSON object per measurement.

  python bench/sampler.py                                  # Qwen2.5-0.5B and 7B, batch 64 and 256
  python bench/sampler.py --presets qwen2.5-0.5b --batches 256 --multiturn
  python bench/sampler.py --tiny                           # CPU smoke run (tiny shape)

Single turn: prompt 128 tokens, 256 new tokens, temperature 1, bf16 weights / compute / cache;
no stop ever fires, so every row decodes exactly `--new-tokens` tokens. `decode_tok_s` counts
generated tokens over the jitted while_loop only; `e2e_tok_s` includes the prefill.
Multi-turn (`--multiturn`): the full RolloutEngine loop (continuous refill, `</search>` stops,
batched stub-corpus retrieval, observation prefill into the cache). With random weights a
synthetic tokenizer maps 1/256 of the vocabulary to the text `<search> q </search>`, so a search
happens every ~256 tokens; `policy_tok_s` counts sampled tokens, `all_tok_s` adds observations.
"""
from __future__ import annotations

import argparse
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

ATTN = "einsum"   # --decode-attention
TINY = ModelConfig(model_type="qwen2", vocab_size=1024, hidden_size=64, intermediate_size=128,
                   num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16)


def _params(cfg, dtype):
  return jax.jit(lambda k: models.init_params(cfg, k, dtype=dtype))(jax.random.key(0))


def _run_once(cfg, params, dparams, B, P, N, dtype, tables):
  st = S.init_state(cfg, B, P + N, tables.prefix_VM.shape[1], dtype)
  rng = np.random.default_rng(0)
  prompt = jnp.asarray(rng.integers(0, cfg.vocab_size, (B, P)), jnp.int32)
  rows = jnp.arange(B, dtype=jnp.int32)
  jax.block_until_ready(st)
  t0 = time.perf_counter()
  st = S.prefill_rows(cfg, st, params, rows, prompt[:, :-1], jnp.zeros((B,), jnp.int32),
                      dtype=dtype)
  st = S.set_rows(st, rows, prompt[:, -1], jnp.full((B,), P - 1, jnp.int32),
                  jnp.ones((B,), bool))
  jax.block_until_ready(st)
  t1 = time.perf_counter()
  st, out = S.decode(cfg, st, dparams, tables, jnp.asarray([-1], jnp.int32), jnp.ones((B,), bool),
                     jnp.full((B,), N, jnp.int32), jnp.int32(B + 1), jax.random.key(1),
                     num_steps=N, sampling=S.SamplingParams(1.0), dtype=dtype,
                     attn_impl=ATTN)
  count = int(jax.device_get(out.count_B).sum())
  t2 = time.perf_counter()
  return count, t1 - t0, t2 - t1


def single_turn(name, cfg, B, P, N, dtype, repeats):
  params = _params(cfg, dtype)
  tables = S.build_stop_tables([b"x"] * cfg.vocab_size, []).to_device()
  dparams = S.make_decode_params(cfg, params, dtype)   # once per rollout call in the engine
  _run_once(cfg, params, dparams, B, P, N, dtype, tables)  # compile
  runs = [_run_once(cfg, params, dparams, B, P, N, dtype, tables) for _ in range(repeats)]
  count, pre, dec = min(runs, key=lambda r: r[2])
  assert count == B * N, (count, B * N)
  return {"bench": "sampler_single_turn", "model": name, "batch": B, "prompt_len": P,
          "new_tokens": N, "dtype": str(jnp.dtype(dtype)), "device": jax.devices()[0].device_kind,
          "prefill_s": round(pre, 4), "decode_s": round(dec, 4),
          "decode_tok_s": round(count / dec, 1), "e2e_tok_s": round(count / (pre + dec), 1),
          "ms_per_step": round(1000 * dec / N, 3), "decode_attention": ATTN}


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


def multi_turn(name, cfg, B, P, max_new, dtype, n_prompts, max_obs):
  from ssp_jax.rollout import RolloutEngine, get_rollout_config
  from ssp_jax.testing.small_retriever import SmallBM25Retriever
  tok = SyntheticTokenizer(cfg.vocab_size)
  rc = get_rollout_config()
  rc.update(dict(batch_size=B, max_response_tokens=max_new, max_prompt_tokens=P,
                 dtype=str(jnp.dtype(dtype)), cache_dtype=str(jnp.dtype(dtype)),
                 steps_per_call=min(256, max_new), max_obs_tokens=max_obs,
                 decode_attention=ATTN))
  eng = RolloutEngine(cfg, tok, rc, SmallBM25Retriever())
  params = _params(cfg, dtype)
  rng = np.random.default_rng(0)
  prompts = [rng.integers(0, cfg.vocab_size, P).tolist() for _ in range(n_prompts)]
  eng.generate(params, prompts, jax.random.key(1))  # compile every shape the timed run meets
  t0 = time.perf_counter()
  trajs = eng.generate(params, prompts, jax.random.key(1))
  wall = time.perf_counter() - t0
  policy = sum(sum(t.loss_mask) for t in trajs)
  total = sum(len(t.response_ids) for t in trajs)
  reasons = {r: sum(t.stop_reason == r for t in trajs) for r in {t.stop_reason for t in trajs}}
  return {"bench": "sampler_multi_turn", "model": name, "batch": B, "prompts": n_prompts,
          "prompt_len": P, "max_response_tokens": max_new, "dtype": str(jnp.dtype(dtype)),
          "device": jax.devices()[0].device_kind, "wall_s": round(wall, 3),
          "policy_tok_s": round(policy / wall, 1), "all_tok_s": round(total / wall, 1),
          "searches": sum(t.num_searches for t in trajs), "stop_reasons": reasons,
          "engine_stats": {k: round(v, 3) if isinstance(v, float) else v
                           for k, v in eng.stats.items()}}


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
                 help="reduce | einsum | cudnn | xla; a comma list compares them")
  a = p.parse_args(argv)
  global ATTN
  dtype = jnp.dtype(a.dtype)
  if a.tiny:
    shapes, batches, a.new_tokens, a.mt_max_new, a.mt_max_obs = [("tiny", TINY)], [8], 32, 96, 24
  else:
    shapes = [(n, models.get_preset(n)) for n in a.presets.split(",")]
    batches = [int(b) for b in a.batches.split(",")]
  for name, cfg in shapes:
    for B, ATTN in [(b, i) for b in batches for i in a.decode_attention.split(",")]:
      if a.single:
        print(json.dumps(single_turn(name, cfg, B, a.prompt_len, a.new_tokens, dtype,
                                     a.repeats)), flush=True)
      if a.multiturn:
        print(json.dumps(multi_turn(name, cfg, B, a.prompt_len, a.mt_max_new, dtype,
                                    a.mt_prompts_per_slot * B, a.mt_max_obs)), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
