"""Retrieval benchmark; prints one JSON object.

  python bench/retrieval.py                        # CPU part: queries/s in-process and via the
                                                   # server over a 1M random-vector Flat index
  python bench/retrieval.py --device-only-encode   # accelerator part only: dense passage encoding
                                                   # passages/s, E5-base shape, random weights

CPU part: the query encoder is the real default MiniLM (or --encoder-path), queries are sentences
of the embedded corpus, the index holds --num-passages random unit vectors (dim = encoder dim)
with synthetic documents. Each figure is the median over --reps batches of --batch queries,
split into encode and search time (from the retriever's own timers).
Encode part: `models.bert.embed` jitted exactly as the index builder runs it (batch split over
all local devices), on random token ids of --seq-len tokens, fp32 and bf16.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time

import numpy as np


# --------------------------------------------------------------------------------------------
# Encode part (accelerator)
# --------------------------------------------------------------------------------------------
E5_BASE = dict(vocab_size=30522, hidden_size=768, num_layers=12, num_heads=12,
               intermediate_size=3072, max_position_embeddings=512)


def _time_embed(fn, params, tokens, mask, steps: int):
  fn(params, tokens, mask).block_until_ready()            # compile
  t0 = time.perf_counter()
  for _ in range(steps):
    e = fn(params, tokens, mask)
  e.block_until_ready()
  return (time.perf_counter() - t0) / steps, np.asarray(e, np.float32)


def bench_encode(batch: int, seq_len: int, steps: int) -> dict:
  """E5-base-shaped encoding throughput on all local devices: fp32, bf16, and bf16 with cuDNN
  fused attention where it can run. Random weights; right-padded rows of T/2..T tokens."""
  import functools
  import jax
  import jax.numpy as jnp
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
  from models import bert
  from retrieval.encoders import pick_attn_impl
  cfg = bert.BertConfig(**E5_BASE)
  devices = jax.devices()
  mesh = Mesh(np.asarray(devices), ("data",))
  params = jax.device_put(bert.init_params(cfg, jax.random.key(0)), NamedSharding(mesh, P()))
  rows = NamedSharding(mesh, P("data"))
  rng = np.random.default_rng(0)
  tokens = jax.device_put(rng.integers(1000, 30000, (batch, seq_len), dtype=np.int32), rows)
  lengths = rng.integers(seq_len // 2, seq_len + 1, batch)
  mask = jax.device_put((np.arange(seq_len)[None] < lengths[:, None]).astype(np.int32), rows)
  out = {"devices": [str(d) for d in devices], "batch": batch, "seq_len": seq_len,
         "shape": "e5-base (BERT-base: 12 x 768, 110M params), random weights"}
  runs = [("float32", jnp.float32, "xla"), ("bfloat16", jnp.bfloat16, "xla")]
  if pick_attn_impl(devices[0], jnp.bfloat16) != "xla":
    runs.append(("bfloat16_cudnn_attention", jnp.bfloat16, "cudnn"))
  flops = 2 * 85e6 * batch * seq_len + 4 * 12 * batch * seq_len ** 2 * 768
  embs = {}
  for name, dtype, impl in runs:
    fn = jax.jit(functools.partial(bert.embed, cfg, dtype=dtype, attn_impl=impl))
    try:
      dt, embs[name] = _time_embed(fn, params, tokens, mask, steps)
    except Exception as e:  # noqa: BLE001 - report a kernel that cannot run, keep the others
      out[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
      continue
    out[name] = {"passages_per_s": round(batch / dt, 1), "ms_per_batch": round(dt * 1e3, 2),
                 "approx_tflops": round(flops / dt / 1e12, 1),
                 "wiki18_21M_hours": round(21e6 / (batch / dt) / 3600, 2),
                 # worst-row cosine to the fp32 embedding: what half precision costs
                 "min_cosine_vs_float32": round(float(np.min(np.sum(
                     embs[name] * embs["float32"], axis=1))), 5)}
  return out


# --------------------------------------------------------------------------------------------
# CPU part: in-process and server queries/s
# --------------------------------------------------------------------------------------------
def make_random_index(out: str, n: int, spec, dim: int) -> None:
  """An index directory with n random unit vectors and synthetic docs, in the real layout."""
  import faiss
  from retrieval.corpus import write_doc_store
  from retrieval.index import FAISS_FILE, META_FILE, write_json
  corpus = os.path.join(out, "corpus.jsonl")
  with open(corpus, "w") as f:
    for i in range(n):
      f.write(json.dumps({"id": str(i), "contents": f'"Doc {i}"\nSynthetic passage number {i}.'})
              + "\n")
  write_doc_store(corpus, out)
  index = faiss.IndexFlatIP(dim)
  rng = np.random.default_rng(0)
  for start in range(0, n, 100_000):
    v = rng.standard_normal((min(100_000, n - start), dim), dtype=np.float32)
    index.add(v / np.linalg.norm(v, axis=1, keepdims=True))
  faiss.write_index(index, os.path.join(out, FAISS_FILE))
  write_json(os.path.join(out, META_FILE), {
      "format": 1, "encoder": "dense", "index_type": "flat", "num_passages": n, "dim": dim,
      "corpus": corpus, "spec": spec.to_meta(), "dtype": "float32", "search_params": {}})


def sample_queries(n: int) -> list[str]:
  from retrieval.corpus import default_corpus_path, iter_corpus
  sents = []
  for rec in iter_corpus(default_corpus_path()):
    sents.extend(s for s in rec["contents"].split("\n", 1)[1].split(". ") if len(s.split()) > 6)
  rng = np.random.default_rng(0)
  return [sents[i] for i in rng.choice(len(sents), n, replace=False)]


def median_timings(fn, reps: int) -> dict:
  walls, enc, srch = [], [], []
  for _ in range(reps):
    t0 = time.perf_counter()
    timing = fn()
    walls.append(time.perf_counter() - t0)
    enc.append(timing["encode_s"])
    srch.append(timing["search_s"])
  return {"s_per_batch": round(statistics.median(walls), 4),
          "encode_s": round(statistics.median(enc), 4),
          "search_s": round(statistics.median(srch), 4)}


def bench_cpu(n: int, batch: int, reps: int, encoder_path) -> dict:
  import jax
  from retrieval.client import HttpRetriever
  from retrieval.encoders import detect_spec
  from retrieval.search import load_retriever
  from retrieval.server import make_server
  spec = detect_spec(encoder_path)
  with tempfile.TemporaryDirectory() as d:
    from models.bert import BertConfig
    dim = BertConfig.from_hf_dir(spec.path).hidden_size
    t0 = time.perf_counter()
    make_random_index(d, n, spec, dim)
    build_s = time.perf_counter() - t0
    r = load_retriever(d, batch_size=batch)
    queries = sample_queries(batch * (reps + 1))
    batches = [queries[i * batch:(i + 1) * batch] for i in range(reps + 1)]
    for b in batches:          # warm-up: compiles every (batch, length) bucket the reps will use
      r.search(b, 3)
    it = iter(batches[:-1])

    def in_process():
      r.search(next(it), 3)
      return r.last_timing

    local = median_timings(in_process, reps)
    srv = make_server(r, "127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    client = HttpRetriever("http://127.0.0.1:%d" % srv.server_address[1], timeout=600)
    it = iter(batches[:-1])

    def over_http():
      client.search(next(it), 3)
      return r.last_timing

    served = median_timings(over_http, reps)
    srv.shutdown()
    srv.server_close()
  for res in (local, served):
    res["queries_per_s"] = round(batch / res["s_per_batch"], 1)
  return {"num_passages": n, "dim": dim, "batch": batch, "topk": 3, "encoder": spec.path,
          "cpu_devices": len(jax.devices("cpu")), "host_cores": os.cpu_count(),
          "load_avg_1m": round(os.getloadavg()[0], 1),
          "index_setup_s": round(build_s, 1), "in_process": local, "server": served}


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--device-only-encode", action="store_true",
                  help="run only the accelerator encoding part (passages/s)")
  ap.add_argument("--skip-encode", action="store_true", help="run only the CPU query part")
  ap.add_argument("--num-passages", type=int, default=1_000_000)
  ap.add_argument("--batch", type=int, default=256, help="queries per batch")
  ap.add_argument("--reps", type=int, default=5)
  ap.add_argument("--encoder-path", default=None, help="query encoder (default: MiniLM)")
  ap.add_argument("--encode-batch", type=int, default=512)
  ap.add_argument("--seq-len", type=int, default=192, help="wiki-18 passages: ~150-190 tokens")
  ap.add_argument("--encode-steps", type=int, default=20)
  args = ap.parse_args(argv)
  out = {}
  if not args.device_only_encode:
    out["query"] = bench_cpu(args.num_passages, args.batch, args.reps, args.encoder_path)
  if not args.skip_encode:
    out["encode"] = bench_encode(args.encode_batch, args.seq_len, args.encode_steps)
  print(json.dumps(out, indent=2))
  return 0


if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  sys.exit(main())
