"""Retrieval quality of an index over the embedded corpus: the table of docs/retrieval.md
("Quality on the embedded corpus"), printed as one JSON line.

  python bench/index_quality.py                  # the default index (built on first use)
  python bench/index_quality.py --index DIR      # any index over the embedded corpus

Keys:
  sentence_first, sentence_top3   every passage queried with its most distinctive (longest)
                                  sentence: the share found first / in the top 3
  eval_first                      the 141 hand-written evaluation questions
                                  (ssp_jax/data/eval_wiki_sample.jsonl): the share whose first
                                  hit is one of their supporting passages
  eval_recall3                    their supporting passages' recall in the top 3 (mean over
                                  questions of the share of their supporting ids returned)
  passages, questions, index, search_s
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def distinctive_sentence(contents: str) -> str:
  """The longest sentence (in words) of a passage's text: a query only this passage answers
  verbatim (the same rule as tests/retrieval_helpers.distinctive_span)."""
  from retrieval.windows import split_sentences
  sents = split_sentences(contents.split("\n", 1)[1] if "\n" in contents else contents)
  return max(sents, key=lambda s: len(s.split())) if sents else contents


def quality(retriever, records: list[dict], questions: list[dict]) -> dict:
  import numpy as np
  t0 = time.perf_counter()
  res = retriever.search([distinctive_sentence(r["contents"]) for r in records], 3)
  ranks = np.array([[d["id"] for d in hits].index(r["id"]) if r["id"] in {d["id"] for d in hits}
                    else 3 for r, hits in zip(records, res)])
  ev = retriever.search([q["question"] for q in questions], 3)
  first = [bool(hits) and hits[0]["id"] in set(q["supporting_ids"]) for q, hits in zip(questions, ev)]
  rec3 = [np.mean([s in {d["id"] for d in hits} for s in q["supporting_ids"]])
          for q, hits in zip(questions, ev)]
  return {"sentence_first": round(float(np.mean(ranks < 1)), 4),
          "sentence_top3": round(float(np.mean(ranks < 3)), 4),
          "eval_first": round(float(np.mean(first)), 4),
          "eval_recall3": round(float(np.mean(rec3)), 4),
          "passages": len(records), "questions": len(questions),
          "search_s": round(time.perf_counter() - t0, 1)}


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--index", default=None, help="index directory (default: the default index)")
  args = ap.parse_args(argv)
  from ssp_jax.quiet import quiet_libraries
  quiet_libraries()
  from retrieval.corpus import iter_corpus, iter_jsonl, default_corpus_path
  from retrieval.search import default_index_dir, load_retriever
  from ssp_jax.eval.data import builtin_path
  index = args.index or default_index_dir()
  records = list(iter_corpus(default_corpus_path()))
  questions = [e for _, e in iter_jsonl(builtin_path("wiki_sample"))]
  r = load_retriever(index)
  if r.meta["num_passages"] != len(records):
    print(f"--index {index} has {r.meta['num_passages']} passages, not the embedded corpus's "
          f"{len(records)}; build it over the embedded corpus", file=sys.stderr)
    return 2
  out = {"bench": "index_quality", "index": index, **quality(r, records, questions)}
  win = r.meta.get("windows") or {}
  out["windows"] = win.get("sentences", 0)
  out["window_encoding"] = win.get("encoding", "separate" if win else None)
  print(json.dumps(out))
  return 0


if __name__ == "__main__":
  sys.exit(main())
