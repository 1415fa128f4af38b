"""cuDNN packed attention: are the q/k/v gradients finite at padding tokens, and equal to the XLA
path's at the segments? Prints the JAX version and whether its wrapper takes grouped-query K/V
unrepeated (`layers.cudnn_packed_gqa_ok`), one JSON line an implementation (unguarded cuDNN, the
guarded `models.layers.fused_segment_attention` with "cudnn", and with "cudnn_gqa" where the
wrapper allows it, XLA), then the relative differences of gradients and outputs. GPU only.

  python bench/cudnn_grad_check.py
"""
import json, math, sys
import jax, jax.numpy as jnp, numpy as np
from jax._src.cudnn import fused_attention_stablehlo as cudnn_fa
from models import layers

B, T, N, K, H, M = 2, 512, 14, 2, 64, 8
rng = np.random.default_rng(0)
seg = np.zeros((B, T), np.int32)
seg[0, :200] = 1; seg[0, 200:450] = 2          # row 0: two segments, 62 padding
seg[1, :100] = 1                                # row 1: one segment, 412 padding
pos = np.zeros((B, T), np.int32)
for b in range(B):
  for s_ in set(seg[b]) - {0}:
    i = np.where(seg[b] == s_)[0]; pos[b, i] = np.arange(len(i))
q = jnp.asarray(rng.normal(size=(B, T, N, H)), jnp.bfloat16)
k = jnp.asarray(rng.normal(size=(B, T, K, H)), jnp.bfloat16)
v = jnp.asarray(rng.normal(size=(B, T, K, H)), jnp.bfloat16)
w = jnp.asarray(rng.normal(size=(B, T, N, H)), jnp.float32)
seg_j, pos_j = jnp.asarray(seg), jnp.asarray(pos)

def unguarded(q, k, v):
  G = N // K
  kk, vv = jnp.repeat(k, G, axis=2), jnp.repeat(v, G, axis=2)
  sl, off = layers.segment_seqlens_offsets(seg_j, M)
  out = cudnn_fa.dot_product_attention(q, kk, vv, bias=None, mask=None, q_seqlen=sl,
      kv_seqlen=sl, q_offsets=off, kv_offsets=off, scale=1.0 / math.sqrt(H),
      mask_type=cudnn_fa.MaskType.PADDING_CAUSAL, qkv_layout="BTNH")
  return jnp.where((seg_j > 0)[:, :, None, None], out, 0)

fns = {"cudnn_unguarded": unguarded,
       "cudnn_guarded": lambda q, k, v: layers.fused_segment_attention(q, k, v, seg_j, pos_j, "cudnn", M),
       "xla": lambda q, k, v: layers.fused_segment_attention(q, k, v, seg_j, pos_j, "xla", M)}
gqa_ok = layers.cudnn_packed_gqa_ok()
print(json.dumps({"jax": jax.__version__, "cudnn_packed_gqa_ok": gqa_ok}))
if gqa_ok:   # K/V at their 2 heads (attn_impl "cudnn_gqa"): must match XLA like the repeat does
  fns["cudnn_gqa"] = lambda q, k, v: layers.fused_segment_attention(q, k, v, seg_j, pos_j,
                                                                    "cudnn_gqa", M)
grads = {}
real = (seg > 0)
for name, f in fns.items():
  loss = lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32) * w)
  g = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
  g = [np.asarray(x, np.float32) for x in g]
  grads[name] = g
  print(json.dumps({"impl": name,
      "finite_all": [bool(np.isfinite(x).all()) for x in g],
      "finite_at_segments": [bool(np.isfinite(x[real]).all()) for x in g],
      "nonfinite_at_padding": [int((~np.isfinite(x[~real])).sum()) for x in g],
      "abs_max_at_padding": [float(np.nan_to_num(np.abs(x[~real]), nan=np.inf).max()) for x in g]}))
out_xla = np.asarray(fns["xla"](q, k, v), np.float32)[real]
for name in [n for n in fns if n.startswith("cudnn")]:
  d = [float(np.abs(a[real] - b[real]).max() / (np.abs(b[real]).max() + 1e-9))
       for a, b in zip(grads[name], grads["xla"])]
  o = np.asarray(jax.jit(fns[name])(q, k, v), np.float32)[real]
  print(json.dumps({"impl": name, "rel_max_diff_vs_xla_at_segments": d,
                    "out_rel_max_diff_vs_xla": float(np.abs(o - out_xla).max()
                                                     / (np.abs(out_xla).max() + 1e-9))}))
