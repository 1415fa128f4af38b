"""Forward+backward throughput and MFU of the decoder (issue 2 benchmark).

Default: the Qwen2.5-1.5B shape, batch x sequence = 8 x 4096, bf16 params and compute, random
weights, next-token cross-entropy through a chunked lm head. Prints one JSON object per setting.

  python bench/forward.py                              # GPU/TPU: the issue's setting
  python bench/forward.py --preset tiny --batch 2 --seq 128 --steps 2   # CPU smoke test

FLOPs per token = 6 N (N = parameters that do matmuls: all but the embedding lookup, with the
tied lm head counted once) + 6 L T D for causal attention (QK^T and PV, halved by causality,
times 3 for forward + backward).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp

from models import ModelConfig, get_preset, hidden_states, init_params
from models.decoder import lm_head_weight

TINY = ModelConfig(model_type="qwen2", vocab_size=512, hidden_size=64, intermediate_size=128,
                   num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16)


def flops_per_token(cfg: ModelConfig, seq: int) -> float:
  n = cfg.num_params(include_embedding=False) + cfg.vocab_size * cfg.hidden_size
  return 6.0 * n + 6.0 * cfg.num_layers * seq * cfg.num_heads * cfg.head_dim


def chunked_xent(cfg, params, h_BTD, targets_BT, chunk: int) -> jax.Array:
  """Mean next-token cross-entropy without materialising [B, T, V] logits at once."""
  B, T, D = h_BTD.shape
  w_DV = lm_head_weight(cfg, params).astype(h_BTD.dtype)
  n = T // chunk
  h_nBCD = h_BTD.reshape(B, n, chunk, D).swapaxes(0, 1)
  t_nBC = targets_BT.reshape(B, n, chunk).swapaxes(0, 1)

  @jax.checkpoint
  def one(h_BCD, t_BC):
    logits = jnp.einsum("BCD,DV->BCV", h_BCD, w_DV, preferred_element_type=jnp.float32)
    lse = jax.nn.logsumexp(logits, axis=-1)
    tgt = jnp.take_along_axis(logits, t_BC[..., None], axis=-1)[..., 0]
    return jnp.sum(lse - tgt)

  total = jax.lax.map(lambda a: one(*a), (h_nBCD, t_nBC))
  return jnp.sum(total) / (B * T)


def run(cfg, batch, seq, remat, attn, steps, chunk):
  params = jax.jit(lambda k: init_params(cfg, k, jnp.bfloat16))(jax.random.PRNGKey(0))
  tokens = jax.random.randint(jax.random.PRNGKey(1), (batch, seq + 1), 0, cfg.vocab_size)

  def loss_fn(p, toks):
    h = hidden_states(cfg, p, toks[:, :-1], dtype=jnp.bfloat16, remat=remat, attn_impl=attn)
    return chunked_xent(cfg, p, h, toks[:, 1:], min(chunk, seq))

  step = jax.jit(jax.value_and_grad(loss_fn))
  t0 = time.perf_counter()
  loss, grads = step(params, tokens)
  jax.block_until_ready(grads)
  compile_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  for _ in range(steps):
    loss, grads = step(params, tokens)
  jax.block_until_ready(grads)
  dt = (time.perf_counter() - t0) / steps
  tok_s = batch * seq / dt
  fpt = flops_per_token(cfg, seq)
  return {
      "bench": "forward_backward", "batch": batch, "seq": seq, "remat": remat, "attn": attn,
      "params": cfg.num_params(), "step_s": round(dt, 4), "tokens_per_s": round(tok_s, 1),
      "tflops_per_s": round(tok_s * fpt / 1e12, 1),
      "mfu_vs_797": round(tok_s * fpt / 797e12, 4), "mfu_vs_989": round(tok_s * fpt / 989e12, 4),
      "compile_s": round(compile_s, 1), "loss": float(loss),
      "device": jax.devices()[0].device_kind, "jax": jax.__version__,
  }


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--preset", default="qwen2.5-1.5b")
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--seq", type=int, default=4096)
  ap.add_argument("--remat", default="full", help="comma list of policies: none,dots,full")
  ap.add_argument("--attn", default="auto", help="xla | cudnn | auto")
  ap.add_argument("--steps", type=int, default=5)
  ap.add_argument("--chunk", type=int, default=1024, help="lm-head chunk along T")
  a = ap.parse_args()
  cfg = TINY if a.preset == "tiny" else get_preset(a.preset)
  attn = a.attn
  if attn == "auto":
    attn = "cudnn" if jax.devices()[0].platform == "gpu" else "xla"
  for remat in a.remat.split(","):
    try:
      print(json.dumps(run(cfg, a.batch, a.seq, remat, attn, a.steps, a.chunk)), flush=True)
    except Exception as e:  # an OOM for one policy should not hide the others
      print(json.dumps({"bench": "forward_backward", "remat": remat, "error": str(e)[:300]}),
            flush=True)


if __name__ == "__main__":
  main()
