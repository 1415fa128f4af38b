"""Peak host memory of loading a model (issue 11, part 2): one JSON line.

  python bench/load_memory.py                        # the embedded SmolLM2-135M GGUF, float32
  python bench/load_memory.py --model /path/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \
      --dtype bfloat16
  python bench/load_memory.py --tiny                 # same as no --model (CPU, seconds)

Keys: model, file_bytes, dtype, param_bytes (the loaded params), rss_before_bytes (after imports,
before loading), peak_rss_bytes (the process's peak resident set, `ru_maxrss`), load_extra_bytes
(peak minus before), extra_over_params (load_extra_bytes / param_bytes: 1.0 would mean loading
costs no more than the params it makes), load_s, platform.
Loading runs on the default JAX device; run with JAX_PLATFORMS=cpu to measure host placement.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def current_rss() -> int:
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--model", default=None, help=".gguf file or HF directory (default: embedded)")
  ap.add_argument("--dtype", default="float32", help="float32 | bfloat16")
  ap.add_argument("--tiny", action="store_true", help="the embedded SmolLM2-135M (CPU)")
  args = ap.parse_args(argv)
  import jax
  import jax.numpy as jnp

  import models
  from models import gguf_io, hf_io
  path = models.checkpoint.default_model_path() if args.tiny or not args.model else args.model
  dtype = jnp.dtype(args.dtype)
  before = current_rss()
  t0 = time.perf_counter()
  if os.path.isdir(path):
    _, params = hf_io.load_hf_checkpoint(path, dtype=dtype)
  else:
    _, params = gguf_io.load_gguf(path, dtype=dtype)
  jax.block_until_ready(params)
  load_s = time.perf_counter() - t0
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # KiB on Linux
  param_bytes = sum(int(x.size) * x.dtype.itemsize for x in jax.tree.leaves(params))
  file_bytes = (os.path.getsize(path) if os.path.isfile(path) else
                sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)))
  print(json.dumps({
      "model": os.path.basename(path.rstrip("/")), "file_bytes": file_bytes,
      "dtype": dtype.name, "param_bytes": param_bytes, "rss_before_bytes": before,
      "peak_rss_bytes": peak, "load_extra_bytes": peak - before,
      "extra_over_params": round((peak - before) / param_bytes, 3), "load_s": round(load_s, 2),
      "platform": jax.devices()[0].platform}))
  return 0


if __name__ == "__main__":
  sys.exit(main())
