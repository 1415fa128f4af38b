"""Search tool: corpus, encoders (BERT/E5 via models/, BM25), faiss indexes, HTTP server and client.

Public API (imported lazily, so `import retrieval` stays cheap):
  load_retriever(index_dir) -> Retriever        default_index_dir() -> str
  HttpRetriever(url, timeout, retries, backoff)  default_corpus_path() -> str
  Retriever, RetrieverError, iter_corpus
"""
from __future__ import annotations

import importlib

from retrieval.base import Retriever, RetrieverError, split_contents

_LAZY = {
    "default_corpus_path": "retrieval.corpus",
    "iter_corpus": "retrieval.corpus",
    "load_retriever": "retrieval.search",
    "default_index_dir": "retrieval.search",
    "HttpRetriever": "retrieval.client",
}


def __getattr__(name):
  if name in _LAZY:
    return getattr(importlib.import_module(_LAZY[name]), name)
  raise AttributeError(f"module 'retrieval' has no attribute {name!r}")


__all__ = ["Retriever", "RetrieverError", "split_contents", *_LAZY]
