"""The decode step's layer GEMMs alone: XLA's dot (cuBLAS) against the Pallas split-K kernel
(ssp_jax/sampling/gemm_pallas.py) over its knobs. Prints one JSON line per (model, GEMM, rows,
setting): microseconds a GEMM (median of `--repeats` timings of a jitted loop over `--layers`
distinct weights, so the weights come from HBM as in a step, not from L2), the weight bytes and
the rate they make, and `rel_err` against the float32 XLA form; then per GEMM the best Pallas
setting, the default's line and XLA's, marked.

GEMMs of one layer at T = 1 (`decode_step._fuse_layer`'s fused weights), each as the decode
step runs it with rollout.decode_matmul "xla" (XLA's kernels around cuBLAS) or "pallas":
  qkv     rms_norm([M, D]) x [D, (N + 2K) H] + bias   (Pallas: norm and bias inside, one share)
  o       [M, N H] x [N H, D] + x                     (the residual)
  gate_up rms_norm([M, D]) x [D, 2F] -> silu(gate) * up   (Pallas: all inside, one share)
  down    [M, F] x [F, D] + x

`--mode layers`: the decode step's own layer code (`decode_step._qkv_fused` and
`_attn_out_and_mlp`, fused weights, random, every layer of the model) with each
rollout.decode_matmul, the attention left out (the q/k/v projection's first N H columns stand in
for its output): microseconds a layer, all four GEMMs and whatever runs around them (norms,
SiLU, the K shares' sums), with the kernel's default knobs; `rel_diff_vs_xla` compares one
layer's output with XLA's on the same weights.

  python bench/decode_gemm.py                            # 0.5B and 7B at 256 rows, sweep
  python bench/decode_gemm.py --models 0.5b --gemms down --grid default
  python bench/decode_gemm.py --mode layers              # the layers, each decode_matmul
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if "xla_gpu_enable_triton_gemm" not in os.environ.get("XLA_FLAGS", ""):   # as bench/sampler.py
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_gpu_enable_triton_gemm=false").strip()

import jax
import jax.numpy as jnp
import numpy as np

import models
from models import layers as L_
from ssp_jax.sampling import decode_step as DS
from ssp_jax.sampling import gemm_pallas as GP

MODELS = {   # D, N * H, (N + 2K) * H, F, layers
    "0.5b": (896, 896, 1152, 4864, 24),
    "7b": (3584, 3584, 4608, 18944, 28),
    "tiny": (64, 64, 128, 128, 2),
}
GEMMS = ("qkv", "o", "gate_up", "down")


def shape_of(model: str, gemm: str) -> tuple[int, int, bool, bool, bool]:
  """(K, N of the weight, swiglu, residual, norm)."""
  D, NH, E, F, _ = MODELS[model]
  return {"qkv": (D, E, False, False, True), "o": (NH, D, False, True, False),
          "gate_up": (D, 2 * F, True, False, True), "down": (F, D, False, True, False)}[gemm]


def grid(name: str, M: int, K: int, N: int, swiglu: bool, norm: bool = False) -> list:
  """Pallas settings that fit the shape: "default" or "sweep" (one share with swiglu or a
  norm)."""
  out = [None]   # default_knobs
  if name == "default":
    return out
  n = N // 2 if swiglu else N
  for bm, bn, w in ((32, 32, 4), (32, 64, 4), (64, 32, 4), (64, 64, 4), (64, 128, 4),
                    (128, 64, 4), (128, 128, 8), (256, 64, 8)):
    for bk, sp in itertools.product((64, 128), (1, 2, 4, 7, 8)):
      kn = GP.Knobs(bm, bn, bk, sp, w, 3 if bk == 128 else 4)
      if (swiglu or norm) and sp != 1:
        continue
      try:
        kn = GP.check(M, K, n, kn, swiglu)
      except ValueError:
        continue
      programs = (M // kn.block_m) * (n // bn) * sp
      if 64 <= programs <= 1024 and kn not in out[1:]:
        out.append(kn)
  return out


def layers_for(model: str, wbytes: int) -> int:
  """Distinct weights a timed loop cycles through: the model's layers, more while they hold
  under 192 MB (so a small weight is not read from a 50 MB L2; a step reads ~0.7 GB of 0.5B
  weights between two uses of one), at most 96; fewer (at least 3) past 512 MB (7B gate_up
  is 271 MB a layer)."""
  n = MODELS[model][4]
  while n * wbytes < 192e6 and n < 96:
    n *= 2
  while n > 3 and n * wbytes > 512e6:
    n -= 1
  return n


def time_gemm(impl, M, K, N, swiglu, residual, norm, layers, iters, repeats, knobs, dtype):
  """(median microseconds of one GEMM, its error): a loop of `iters` passes over `layers`
  weights, each GEMM's output feeding the next one's input (a column of it added), so none is
  hoisted. The error is max |out - ref| / max |ref| on the first weight, ref the XLA form in
  float32 (so a kernel that is fast and wrong shows it)."""
  keys = jax.random.split(jax.random.key(0), layers + 2)
  a = jax.random.normal(keys[0], (M, K), dtype)
  ws = [jax.random.normal(k, (K, N), dtype) / np.sqrt(K).astype(dtype) for k in keys[2:]]
  x = jax.random.normal(keys[1], (M, N // 2 if swiglu else N), dtype) if residual else None
  g = (1 + 0.1 * jax.random.normal(keys[1], (K,), dtype)) if norm else None
  bias = jax.random.normal(keys[0], (N,), dtype) if norm and not swiglu else None
  interpret = jax.default_backend() == "cpu"

  def gemm(a, w, x, impl=impl, bias=bias, g=g):
    if impl == "pallas":
      return GP.matmul(a, w, x, bias_N=bias, norm_K=g, knobs=knobs, swiglu=swiglu,
                       interpret=interpret)
    if norm:   # as decode_step._qkv_fused / _attn_out_and_mlp with rollout.decode_matmul xla
      a = L_.rms_norm(a, g, 1e-6)
    y = jnp.dot(a, w)
    if bias is not None:
      y = y + bias
    if swiglu:
      F = N // 2
      return jax.nn.silu(y[:, :F]) * y[:, F:]
    return x + y if residual else y

  @jax.jit
  def loop(a, ws, x):
    def body(i, a):
      for w in ws:
        y = gemm(a, w, x)
        a = a + y[:, :1]   # a dependency: the next GEMM waits for this one
      return a
    return jax.lax.fori_loop(0, iters, body, a)

  jax.block_until_ready(loop(a, ws, x))
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    jax.block_until_ready(loop(a, ws, x))
    times.append(time.perf_counter() - t)
  f32 = lambda t: None if t is None else t.astype(jnp.float32)
  out = jax.jit(gemm)(a, ws[0], x).astype(jnp.float32)
  ref = jax.jit(lambda a, w, x: gemm(a, w, x, "xla", f32(bias), f32(g)))(
      f32(a), f32(ws[0]), f32(x))
  err = float(jnp.max(jnp.abs(out - ref)) / jnp.max(jnp.abs(ref)))
  return statistics.median(times) / (iters * layers) * 1e6, err


def model_config(model: str) -> models.ModelConfig:
  if model == "tiny":
    return models.ModelConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                              num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                              qkv_bias=True)
  return models.get_preset({"0.5b": "qwen2.5-0.5b", "7b": "qwen2.5-7b"}[model])


def time_layers(matmul: str, cfg, M: int, iters: int, repeats: int, dtype):
  """(median microseconds of one decode layer without its attention (see the docstring), the
  first layer's output on the loop's input: the same weights for each matmul, to compare)."""
  D, N, K, H, F = (cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
                   cfg.intermediate_size)
  E = (N + 2 * K) * H
  keys = iter(jax.random.split(jax.random.key(0), 8 * cfg.num_layers + 1))
  w = lambda *shape: (jax.random.normal(next(keys), shape, dtype)
                     / np.sqrt(shape[0]).astype(dtype))
  layers = [{"w_qkv": w(D, E), "b_qkv": w(E), "attn_norm": 1 + w(D),
             "wo": w(N * H, D).reshape(N, H, D), "mlp_norm": 1 + w(D),
             "w_gate_up": w(D, 2 * F), "w_down": w(F, D)} for _ in range(cfg.num_layers)]
  if not cfg.qkv_bias:
    for lp in layers:
      lp.pop("b_qkv")
  x = jax.random.normal(next(keys), (M, 1, D), dtype)

  def layer(x, lp):
    qkv = DS._qkv_fused(cfg, lp, x, matmul)
    attn = qkv[..., :N * H].reshape(M, 1, N, H)   # stands in for the attention's output
    return DS._attn_out_and_mlp(cfg, lp, x, attn, None, matmul)

  @jax.jit
  def loop(x, layers):
    def body(i, x):
      for lp in layers:
        x = layer(x, lp)
      return x
    return jax.lax.fori_loop(0, iters, body, x)

  jax.block_until_ready(loop(x, layers))
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    jax.block_until_ready(loop(x, layers))
    times.append(time.perf_counter() - t)
  return (statistics.median(times) / (iters * cfg.num_layers) * 1e6,
          jax.jit(layer)(x, layers[0]).astype(jnp.float32))


def main_layers(models_: list, rows: list, args) -> int:
  dtype = jnp.dtype(args.dtype)
  for model in models_:
    cfg = model_config(model)
    for M in rows:
      base = {"bench": "decode_gemm_layers", "model": model, "rows": M,
              "layers": cfg.num_layers, "device": jax.devices()[0].device_kind}
      us, outs = {}, {}
      for mm in DS.MATMULS:
        line = {**base, "decode_matmul": mm}
        try:
          us[mm], outs[mm] = time_layers(mm, cfg, M, args.iters, args.repeats, dtype)
        except Exception as e:  # noqa: BLE001 - reported, the other path still runs
          line["error"] = f"{type(e).__name__}: {str(e)[:200]}"
          print(json.dumps(line), flush=True)
          continue
        line["us_per_layer"] = round(us[mm], 2)
        if mm != "xla" and "xla" in us:
          line["vs_xla"] = round(us["xla"] / us[mm], 3)
          # one layer's output against XLA's (both bf16): max |diff| / max |xla's|
          ref = outs["xla"]
          line["rel_diff_vs_xla"] = float(
              f"{float(jnp.max(jnp.abs(outs[mm] - ref)) / jnp.max(jnp.abs(ref))):.2e}")
        print(json.dumps(line), flush=True)
  return 0


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--models", default="0.5b,7b", help=f"comma list of {sorted(MODELS)}")
  p.add_argument("--gemms", default=",".join(GEMMS), help=f"comma list of {GEMMS}")
  p.add_argument("--rows", default="256", help="comma list of M (decode batch sizes)")
  p.add_argument("--grid", default="sweep", choices=("default", "sweep"))
  p.add_argument("--layers", type=int, default=0,
                 help="distinct weights a loop passes over (0: `layers_for`)")
  p.add_argument("--iters", type=int, default=4)
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--dtype", default="bfloat16")
  p.add_argument("--mode", default="gemms", choices=("gemms", "layers"),
                 help="gemms: each GEMM over the knobs; layers: the step's layers, each matmul")
  args = p.parse_args(argv)
  models, gemms = args.models.split(","), args.gemms.split(",")
  for name, known in (("--models", MODELS), ("--gemms", GEMMS)):
    bad = [x for x in (models if name == "--models" else gemms) if x not in known]
    if bad:
      p.error(f"{name}: unknown {bad}; use a comma list of {sorted(known)}")
  try:
    rows = [int(x) for x in args.rows.split(",")]
  except ValueError:
    p.error(f"--rows {args.rows!r}: use a comma list of integers")
  if args.mode == "layers":
    return main_layers(models, rows, args)
  dtype = jnp.dtype(args.dtype)
  for model in models:
    for gemm in gemms:
      K, N, swiglu, residual, norm = shape_of(model, gemm)
      layers = args.layers or layers_for(model, K * N * dtype.itemsize)
      for M in rows:
        base = {"bench": "decode_gemm", "model": model, "gemm": gemm, "rows": M, "K": K, "N": N,
                "layers": layers, "device": jax.devices()[0].device_kind}
        wbytes = K * N * dtype.itemsize
        lines = []
        for impl, knobs in [("xla", None)] + [("pallas", k) for k in grid(args.grid, M, K, N,
                                                                              swiglu, norm)]:
          line = {**base, "impl": impl, "knobs": list(knobs) if knobs else None}
          if impl == "pallas" and knobs is None:
            line["knobs"] = list(GP.default_knobs(M, K, N // 2 if swiglu else N,
                                                  swiglu or norm))
            line["default"] = True
          try:
            us, err = time_gemm(impl, M, K, N, swiglu, residual, norm, layers, args.iters,
                                args.repeats, knobs, dtype)
          except Exception as e:  # noqa: BLE001 - reported, the other settings still run
            line["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            print(json.dumps(line), flush=True)
            continue
          line.update(us=round(us, 2), rel_err=float(f"{err:.2e}"),
                      weight_gb_s=round(wbytes / us / 1e3, 1),
                      tflop_s=round(2 * M * K * N / us / 1e6, 1))
          print(json.dumps(line), flush=True)
          lines.append(line)
        pal = [d for d in lines if d["impl"] == "pallas"]
        if pal:
          best = min(pal, key=lambda d: d["us"])
          xla = [d for d in lines if d["impl"] == "xla"]
          print(json.dumps({**best, "bench": "decode_gemm_best",
                            "xla_us": xla[0]["us"] if xla else None}), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
