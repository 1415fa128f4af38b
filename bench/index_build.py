"""First-run benchmark: build the default index (MiniLM dense Flat + 1-sentence windows over the
embedded corpus, contextual window encoding, bf16 matmuls) from scratch into a temporary
directory and print one JSON line.

  python bench/index_build.py                    # the whole default index (what a first run builds)
  python bench/index_build.py --passages 300     # a quick subset
  python bench/index_build.py --window-encoding separate --matmul-dtype float32   # the old layout

Keys: build_s (wall seconds of `build_dense`), cpu_s (CPU seconds of this process over the
build: on a shared machine wall time depends on the other load, CPU time much less),
compile_s (seconds XLA spent compiling, part of build_s), passages, windows, texts_encoded
(token sequences run through the encoder), real_tokens, padded_tokens (what the planned shapes
encode), shapes (distinct [B, T] compiled), passages_per_s, cores (os.cpu_count), load_before /
load_after (1-min load average), platform, dtype, matmul_dtype, window_encoding. Run on an
otherwise idle machine for a clean wall time.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--passages", type=int, default=0, help="first N passages only (0: all)")
  ap.add_argument("--sentence-windows", type=int, default=None,
                  help="default: the default index's setting (1)")
  ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
  ap.add_argument("--matmul-dtype", default=None, choices=("float32", "bfloat16"),
                  help="default: the default index's setting (bfloat16)")
  ap.add_argument("--window-encoding", default=None, choices=("contextual", "separate"),
                  help="default: the default index's setting (contextual)")
  args = ap.parse_args(argv)

  from ssp_jax.quiet import quiet_libraries
  quiet_libraries()
  import jax
  import numpy as np
  from retrieval import index as index_lib
  from retrieval import windows
  from retrieval.corpus import default_corpus_path, iter_corpus
  from retrieval.encoders import detect_spec, plan_batches, plan_lengths
  from retrieval.search import (DEFAULT_MATMUL_DTYPE, DEFAULT_SENTENCE_WINDOWS,
                                DEFAULT_WINDOW_ENCODING)

  n_win = DEFAULT_SENTENCE_WINDOWS if args.sentence_windows is None else args.sentence_windows
  mm_dtype = args.matmul_dtype or DEFAULT_MATMUL_DTYPE
  win_enc = args.window_encoding or DEFAULT_WINDOW_ENCODING
  compile_s = [0.0]
  jax.monitoring.register_event_duration_secs_listener(
      lambda event, secs, **_: compile_s.__setitem__(0, compile_s[0] + secs)
      if event == "/jax/core/compile/backend_compile_duration" else None)
  spec = detect_spec()
  with tempfile.TemporaryDirectory() as tmp:
    corpus = default_corpus_path()
    recs = list(iter_corpus(corpus))
    if args.passages:
      recs = recs[:args.passages]
      corpus = os.path.join(tmp, "corpus.jsonl")
      with open(corpus, "w") as f:
        for r in recs:
          f.write(json.dumps(r) + "\n")
    load_before = os.getloadavg()[0]
    w0, c0 = time.perf_counter(), time.process_time()
    meta = index_lib.build_dense(corpus, os.path.join(tmp, "idx"), spec, index_type="flat",
                                 sentence_windows=n_win, window_encoding=win_enc,
                                 dtype=args.dtype, matmul_dtype=mm_dtype, progress=False)
    build_s, cpu_s = time.perf_counter() - w0, time.process_time() - c0
    load_after = os.getloadavg()[0]

  # What the planner encoded (recomputed: tokenizing is a second or two).
  from retrieval.encoders import load_tokenizer
  tok = load_tokenizer(spec.path, spec.max_length)
  texts = [r["contents"] for r in recs]
  if n_win and win_enc == "separate":
    texts += [w for r in recs for w in windows.passage_windows(r["contents"], n_win)]
  elif n_win:     # windows cut by truncation are encoded on their own
    for r, e in zip(recs, tok.encode_batch(texts)):
      offs = np.asarray(e.offsets)
      starts = np.where(np.asarray(e.special_tokens_mask) == 0, offs[:, 0], -1)
      _, plan = windows.contextual_windows(r["contents"], n_win, starts, int(offs[:, 1].max()))
      texts += [x for x in plan if isinstance(x, str)]
  ids = list(dict.fromkeys(tuple(e.ids) for e in tok.encode_batch(texts)))
  lengths = [len(x) for x in ids]
  plan = plan_batches(lengths, plan_lengths(lengths, spec.max_length), 1)
  out = {
      "bench": "index_build", "build_s": round(build_s, 1), "cpu_s": round(cpu_s, 1),
      "passages": meta["num_passages"],
      "windows": meta.get("windows", {}).get("num_windows", 0),
      "compile_s": round(compile_s[0], 1),
      "texts_encoded": len(ids), "real_tokens": int(np.sum(lengths)),
      "padded_tokens": int(sum(B * T for _, B, T in plan)),
      "shapes": len({(B, T) for _, B, T in plan}),
      "passages_per_s": round(meta["num_passages"] / build_s, 1),
      "cores": os.cpu_count(), "load_before": round(load_before, 1),
      "load_after": round(load_after, 1), "platform": jax.devices()[0].platform,
      "dtype": args.dtype, "matmul_dtype": mm_dtype, "window_encoding": win_enc,
  }
  print(json.dumps(out))
  return 0


if __name__ == "__main__":
  sys.exit(main())
