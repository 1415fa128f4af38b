"""In-process retrievers over an index directory, and the cached default index.

  load_retriever(index_dir) -> DenseRetriever | BM25Retriever   (both implement `Retriever`)
  default_index_dir() -> str   MiniLM dense index over the embedded corpus, built on first use
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import time
from typing import Optional, Sequence

import numpy as np

from models.cache import cache_root, ensure_writable
from retrieval import windows as windows_lib
from retrieval.corpus import DocStore, default_corpus_path
from retrieval.index import FAISS_FILE, META_FILE, build_dense, read_meta


def check_request(queries, topk) -> None:
  """Raises ValueError naming the bad field (shared by in-process search and the server)."""
  if not isinstance(queries, (list, tuple)) or not all(isinstance(q, str) for q in queries):
    raise ValueError("queries must be a list of strings")
  for i, q in enumerate(queries):
    try:
      q.encode("utf-8")
    except UnicodeEncodeError:
      raise ValueError(f"queries[{i}] is not valid Unicode text (a lone surrogate such as "
                       "\\ud800); pass UTF-8 text") from None
  if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
    raise ValueError(f"topk must be a positive integer, got {topk!r}")


def open_faiss(path: str, params: Optional[dict]):
  """Reads a faiss index and applies the search parameters its build recorded."""
  import faiss
  index = faiss.read_index(path)
  params = params or {}
  if "nprobe" in params:
    faiss.extract_index_ivf(index).nprobe = params["nprobe"]
  if "efSearch" in params:
    index.hnsw.efSearch = params["efSearch"]
  return index


def _same_encoder_here(meta: dict) -> Optional[str]:
  """The installed default encoder when it is byte-identical to the one an index was built with
  (recorded as `encoder_digest`): an index built from another checkout or virtualenv."""
  from retrieval.encoders import default_encoder_path, encoder_digest
  want = meta.get("encoder_digest")
  try:
    here = default_encoder_path()
  except FileNotFoundError:
    return None
  return here if want and os.path.isdir(here) and encoder_digest(here) == want else None


class DenseRetriever:
  """Encodes queries with the index's own encoder spec (host CPU by default), then faiss."""

  def __init__(self, index_dir: str, *, batch_size: int = 256, devices=None,
               encoder_path: Optional[str] = None):
    import jax
    from retrieval.encoders import DenseEncoder, EncoderSpec
    self.meta = read_meta(index_dir)
    spec_meta = dict(self.meta["spec"])
    if encoder_path:
      spec_meta["path"] = os.path.abspath(encoder_path)
    elif not os.path.isdir(spec_meta["path"]):
      spec_meta["path"] = _same_encoder_here(self.meta) or spec_meta["path"]
    if not os.path.isdir(spec_meta["path"]):
      raise FileNotFoundError(f"the index was built with the encoder {spec_meta['path']}, which is "
                              "not here; pass encoder_path= (--encoder-path) to its local copy")
    self.spec = EncoderSpec.from_meta(spec_meta)
    self.encoder = DenseEncoder(self.spec, batch_size=batch_size,
                                devices=devices or [jax.devices("cpu")[0]])
    if self.encoder.dim != self.meta["dim"]:
      raise ValueError(f"encoder dim {self.encoder.dim} != index dim {self.meta['dim']}")
    self.index = open_faiss(os.path.join(index_dir, FAISS_FILE), self.meta.get("search_params"))
    self.docs = DocStore(index_dir)
    self.windows = self.meta.get("windows")
    if self.windows:
      self._open_windows(index_dir)
    self.last_timing = {"encode_s": 0.0, "search_s": 0.0}

  def _open_windows(self, index_dir: str) -> None:
    from retrieval import index as index_lib
    n, shard_size = self.meta["num_passages"], self.windows["shard_size"]
    n_shards = -(-n // shard_size)
    self.w_index = open_faiss(os.path.join(index_dir, windows_lib.WINDOWS_FAISS),
                              self.windows.get("search_params"))
    self.w_offsets = np.load(os.path.join(index_dir, windows_lib.OFFSETS_FILE))
    self.w_parent = np.repeat(np.arange(n), np.diff(self.w_offsets))
    self.p_rows = windows_lib.ShardedRows([index_lib.shard_path(index_dir, k)
                                           for k in range(n_shards)])
    self.w_rows = windows_lib.ShardedRows([windows_lib.shard_path(index_dir, k)
                                           for k in range(n_shards)])

  def _search_windows(self, q_QD: np.ndarray, topk: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores [Q, k], rows [Q, k]) by the window-aware score of `retrieval.windows`."""
    c = min(windows_lib.candidates_per_query(topk), len(self.docs))
    _, p_rows = self.index.search(q_QD, c)
    _, w_rows = self.w_index.search(q_QD, min(c, len(self.w_parent)))
    k = min(topk, len(self.docs))
    scores_QK = np.zeros((len(q_QD), k), np.float32)
    rows_QK = np.full((len(q_QD), k), -1, np.int64)   # -1: no hit (dropped by DocStore.docs)
    for i, q_D in enumerate(q_QD):
      cands = np.union1d(p_rows[i][p_rows[i] >= 0], self.w_parent[w_rows[i][w_rows[i] >= 0]])
      sc = windows_lib.rescore(q_D, cands, self.p_rows, self.w_rows, self.w_offsets,
                               self.windows["passage_weight"])
      best = np.argsort(-sc, kind="stable")[:k]
      scores_QK[i, :len(best)], rows_QK[i, :len(best)] = sc[best], cands[best]
    return scores_QK, rows_QK

  def search(self, queries: Sequence[str], topk: int = 3) -> list[list[dict]]:
    check_request(list(queries), topk)
    if not queries:
      return []
    t0 = time.perf_counter()
    q_QD = self.encoder.encode(list(queries), "query")
    t1 = time.perf_counter()
    if self.windows:
      scores_QK, rows_QK = self._search_windows(q_QD, topk)
    else:
      scores_QK, rows_QK = self.index.search(q_QD, min(topk, len(self.docs)))
    t2 = time.perf_counter()
    self.last_timing = {"encode_s": t1 - t0, "search_s": t2 - t1}
    return [self.docs.docs(r, s) for r, s in zip(rows_QK, scores_QK)]


class BM25Retriever:
  """BM25 (`bm25s`) over the index's own tokenizer vocabulary."""

  def __init__(self, index_dir: str):
    import bm25s
    from bm25s.tokenization import Tokenizer
    self.meta = read_meta(index_dir)
    d = os.path.join(index_dir, "bm25")
    self.model = bm25s.BM25.load(d, mmap=True, show_progress=False)
    self.tokenizer = Tokenizer(stopwords="en")
    self.tokenizer.load_vocab(d)
    self.tokenizer.load_stopwords(d)
    self.docs = DocStore(index_dir)
    self.last_timing = {"encode_s": 0.0, "search_s": 0.0}

  def search(self, queries: Sequence[str], topk: int = 3) -> list[list[dict]]:
    check_request(list(queries), topk)
    if not queries:
      return []
    t0 = time.perf_counter()
    ids = self.tokenizer.tokenize(list(queries), update_vocab=False, return_as="ids",
                                  show_progress=False)
    t1 = time.perf_counter()
    res = self.model.retrieve(ids, k=min(topk, len(self.docs)), show_progress=False, n_threads=0)
    self.last_timing = {"encode_s": t1 - t0, "search_s": time.perf_counter() - t1}
    return [self.docs.docs(r, s) for r, s in zip(res.documents, res.scores)]


def load_retriever(index_dir: str, **kwargs):
  """Opens an index directory built by `ssp-jax index build`. Dense kwargs: batch_size, devices
  (JAX devices for query encoding; default the host CPU), encoder_path (a moved encoder)."""
  meta = read_meta(index_dir)
  if meta["encoder"] == "dense":
    return DenseRetriever(index_dir, **kwargs)
  if meta["encoder"] == "bm25":
    return BM25Retriever(index_dir)
  raise ValueError(f"{index_dir}/{META_FILE}: unknown encoder {meta['encoder']!r}")


# --------------------------------------------------------------------------------------------
# Default index (cached)
# --------------------------------------------------------------------------------------------
def _file_digest(path: str) -> str:
  h = hashlib.sha1()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      h.update(chunk)
  return h.hexdigest()


@contextlib.contextmanager
def _file_lock(path: str):
  import fcntl
  with open(path, "w") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


# The embedded default indexes single sentences too: MiniLM places a sentence-sized fact far
# better than a 100-word passage (retrieval/windows.py, docs/retrieval.md).
DEFAULT_SENTENCE_WINDOWS = 1
# One encoding pass for passages and windows, and bf16 matmuls (fp32 accumulation): the first
# run's build takes 68 s on 2 idle CPU cores instead of 340 s with separately encoded fp32
# windows (docs/retrieval.md, "Build time"), at a measured cost in sharpness (ibid., "Quality
# on the embedded corpus").
DEFAULT_WINDOW_ENCODING = "contextual"
DEFAULT_MATMUL_DTYPE = "bfloat16"


def default_index_key(corpus: str, spec) -> str:
  """What decides the default index: the corpus bytes, the encoder's bytes, the encoding
  settings and the layout. Not where they are installed, so every checkout and virtualenv with
  the same files shares one cached index."""
  from retrieval.encoders import encoder_digest
  from retrieval.index import FORMAT_VERSION
  settings = {k: v for k, v in spec.to_meta().items() if k != "path"}
  return repr((("corpus", _file_digest(corpus)), ("encoder", encoder_digest(spec.path)),
               ("settings", sorted(settings.items())), ("index_type", "flat"),
               ("sentence_windows", DEFAULT_SENTENCE_WINDOWS),
               ("window_encoding", DEFAULT_WINDOW_ENCODING),
               ("matmul_dtype", DEFAULT_MATMUL_DTYPE), ("format", FORMAT_VERSION)))


def default_index_dir() -> str:
  """The MiniLM dense Flat index over the embedded corpus, with 1-sentence windows pooled from
  one passage pass and bf16 matmuls: built on first use into `$SSP_JAX_CACHE` (default
  ~/.cache/ssp-jax), loaded afterwards."""
  from retrieval.encoders import detect_spec
  corpus, spec = default_corpus_path(), detect_spec()
  key = hashlib.sha1(default_index_key(corpus, spec).encode())
  out = os.path.join(cache_root(), "index", f"minilm-wiki_sample-{key.hexdigest()[:12]}")
  if os.path.exists(os.path.join(out, META_FILE)):
    return out
  ensure_writable(os.path.dirname(out), 64 << 20, "the default retrieval index")
  with _file_lock(out + ".lock"):
    if not os.path.exists(os.path.join(out, META_FILE)):  # another process may have built it
      print(f"building the default retrieval index in {out} (first use only)", file=sys.stderr)
      build_dense(corpus, out, spec, index_type="flat",
                  sentence_windows=DEFAULT_SENTENCE_WINDOWS,
                  window_encoding=DEFAULT_WINDOW_ENCODING, matmul_dtype=DEFAULT_MATMUL_DTYPE)
  return out
