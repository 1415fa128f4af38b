"""Building index directories (dense faiss or BM25) from a wiki-18 style corpus.

Index directory layout (the same for both encoders):

  meta.json            written last: its presence means the index is complete
  build_state.json     what the build is for (corpus, encoder spec, shard size); a rerun with the
                       same state resumes, a different one starts over
  docs.jsonl, docs_offsets.npy   the passages, looked up by row at search time (`DocStore`)
  emb/shard_00000.npy  dense: float32 [shard_size, D] embeddings, written as each shard completes
  index.faiss          dense: the faiss index (Flat IP, IVF-SQ8 or HNSW-SQ8)
  win/, windows.faiss, win_offsets.npy   dense with --sentence-windows N: sentence-window
                       vectors and their index (`retrieval.windows`)
  bm25/                bm25: the `bm25s` index and its tokenizer vocabulary
"""
from __future__ import annotations

import concurrent.futures
import glob
import json
import math
import os
import shutil
import sys
from typing import Optional

import numpy as np

from retrieval import windows
from retrieval.corpus import DocStore, write_doc_store

META_FILE = "meta.json"
STATE_FILE = "build_state.json"
FAISS_FILE = "index.faiss"
INDEX_TYPES = ("flat", "ivf", "hnsw")
FORMAT_VERSION = 1


def read_json(path: str) -> Optional[dict]:
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def write_json(path: str, obj: dict) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=2)
  os.replace(tmp, path)


def read_meta(index_dir: str) -> dict:
  meta = read_json(os.path.join(index_dir, META_FILE))
  if meta is None:
    raise FileNotFoundError(f"{index_dir} is not a complete index (no {META_FILE}); build it with "
                            "`ssp-jax index build --corpus FILE --encoder dense --out DIR`")
  return meta


def _prepare(corpus: str, out: str, state: dict, log) -> int:
  """Starts or resumes a build in `out`; returns the passage count. Writes the doc store."""
  if not os.path.isfile(corpus):
    raise FileNotFoundError(f"corpus file {corpus!r} does not exist; pass --corpus PATH to a JSONL "
                            "file of {\"id\", \"contents\"} lines")
  os.makedirs(out, exist_ok=True)
  st = os.stat(corpus)
  state = {**state, "corpus": os.path.abspath(corpus), "corpus_bytes": st.st_size,
           "corpus_mtime_ns": st.st_mtime_ns}
  old = read_json(os.path.join(out, STATE_FILE))
  if old is not None and {k: v for k, v in old.items() if k != "num_passages"} == state:
    if os.path.exists(os.path.join(out, "docs_offsets.npy")):
      log(f"resuming the build in {out}")
      return int(old["num_passages"])
  elif old is not None:
    log(f"{out} holds a build for other inputs; starting over")
  for name in (META_FILE, FAISS_FILE, "emb", "bm25", "win", windows.WINDOWS_FAISS,
               windows.OFFSETS_FILE):
    path = os.path.join(out, name)
    if os.path.isdir(path):
      shutil.rmtree(path)
    elif os.path.exists(path):
      os.remove(path)
  n = write_doc_store(corpus, out)
  if n == 0:
    raise ValueError(f"corpus {corpus} has no passages")
  write_json(os.path.join(out, STATE_FILE), {**state, "num_passages": n})
  return n


# --------------------------------------------------------------------------------------------
# Dense
# --------------------------------------------------------------------------------------------
def shard_path(out: str, k: int) -> str:
  return os.path.join(out, "emb", f"shard_{k:05d}.npy")


def _shard_texts(contents: list[str], need_passages: bool,
                 n_sentences: int) -> tuple[list[str], Optional[np.ndarray]]:
  """The texts to encode for one passage shard: its passages (if needed), then the sentence
  windows of each passage (if n_sentences); and the window offsets [len(rows) + 1]."""
  texts = list(contents) if need_passages else []
  offsets = None
  if n_sentences:
    per = [windows.passage_windows(c, n_sentences) for c in contents]
    offsets = np.cumsum([0] + [len(w) for w in per]).astype(np.int64)
    texts += [w for ws in per for w in ws]
  return texts, offsets


class _ShardWork:
  """One passage shard's encoding: the distinct token sequences to encode (with their segments
  when windows are pooled from the passage pass), and the assembly of passage and window
  vectors from the results.

  separate windows: the shard's passages (if needed), then every window text, each encoded on
    its own; identical token sequences once (a passage of at most N sentences is its window).
  contextual windows: every passage once, its windows pooled from that pass's token states
    (`windows.contextual_windows`); only windows cut by truncation are encoded on their own.
  """

  def __init__(self, encoder, contents: list[str], need_passages: bool, n_sentences: int,
               contextual: bool):
    self.n_rows, self.plans = len(contents), None
    if n_sentences and contextual:
      items, segs, self.plans = [], [], []
      for c, (ids, starts, end) in zip(contents,
                                       encoder.tokenize_with_offsets(contents, "passage")):
        seg, plan = windows.contextual_windows(c, n_sentences, starts, end)
        items.append(ids)
        segs.append(seg)
        self.plans.append(plan)
      extra = [x for plan in self.plans for x in plan if isinstance(x, str)]
      items += encoder.tokenize(extra, "passage")
      segs += [None] * len(extra)
      self.offsets = np.cumsum([0] + [len(p) for p in self.plans]).astype(np.int64)
      self.passages_first = True
    else:
      texts, self.offsets = _shard_texts(contents, need_passages, n_sentences)
      items, segs = encoder.tokenize(texts, "passage"), [None] * len(texts)
      self.passages_first = need_passages
    uniq: dict = {}
    self.index = np.array([uniq.setdefault((tuple(x), None if s is None else s.tobytes()),
                                           len(uniq)) for x, s in zip(items, segs)], np.int64)
    self.ids = [list(x) for x, _ in uniq]
    self.segments, self.spans = [None] * len(uniq), [None] * len(uniq)
    for j, (s, u) in enumerate(zip(segs, self.index)):
      if s is not None:
        self.segments[u] = s
        self.spans[u] = [x for x in self.plans[j] if isinstance(x, tuple)]
    self.pooled: dict[int, np.ndarray] = {}

  def encode(self, encoder, progress) -> tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """(passage vectors [rows, D] or None, window vectors [windows, D] or None)."""
    has_segments = any(s is not None for s in self.segments)
    normalize = encoder.spec.normalize

    def pool(u, sums_SD, counts_S):
      self.pooled[u] = windows.pool_spans(sums_SD, counts_S, self.spans[u], normalize)

    emb = encoder.encode_many(self.ids, progress=progress,
                              **(dict(segments=self.segments, on_segments=pool)
                                 if has_segments else {}))[self.index]
    n_p = self.n_rows if self.passages_first else 0
    passages = emb[:n_p] if n_p else None
    if self.offsets is None or self.plans is None:
      return passages, (emb[n_p:] if self.offsets is not None else None)
    wins, extra = [], iter(emb[n_p:])
    for j, plan in enumerate(self.plans):
      pooled = iter(self.pooled.get(int(self.index[j]), ()))
      for x in plan:
        wins.append(passages[j] if x is None else next(pooled) if isinstance(x, tuple)
                    else next(extra))
    return passages, np.stack(wins).astype(np.float32)


def encode_shards(encoder, out: str, n: int, shard_size: int, sentence_windows: int = 0,
                  progress: bool = True, window_encoding: str = "contextual") -> None:
  """Encodes the passages (and, with sentence_windows N > 0, the N-sentence windows) of every
  passage shard, skipping what is already on disk (`emb/`, `win/`).

  One pass per shard (`_ShardWork`): with window_encoding "contextual" each passage is encoded
  once and its windows pooled from that pass; with "separate" its passages and window texts
  are tokenized together and identical token sequences encoded once. The encoder batches all
  of them by length (`DenseEncoder.encode_many`). Tokenization of the next shard runs on a host
  thread while the current one encodes."""
  from tqdm import tqdm
  if window_encoding not in windows.WINDOW_ENCODINGS:
    raise ValueError(f"window_encoding {window_encoding!r} is unknown; use one of "
                     f"{windows.WINDOW_ENCODINGS}")
  contextual = window_encoding == "contextual"
  os.makedirs(os.path.join(out, "emb"), exist_ok=True)
  if sentence_windows:
    windows.prepare_dir(out, sentence_windows, window_encoding)
  store = DocStore(out)
  n_shards = math.ceil(n / shard_size)
  rows_of = lambda k: range(k * shard_size, min(n, (k + 1) * shard_size))  # noqa: E731
  need = {}
  for k in range(n_shards):
    p = not os.path.exists(shard_path(out, k))
    w = bool(sentence_windows) and not os.path.exists(windows.shard_path(out, k))
    if p or w:
      need[k] = (p, w)
  todo = sorted(need)

  def prepare(k):
    p, w = need[k]
    contents = [store.get(r)["contents"] for r in rows_of(k)]
    return _ShardWork(encoder, contents, p, sentence_windows if w else 0, contextual)

  done = n - sum(len(rows_of(k)) for k in todo)
  bar = tqdm(total=n, initial=done, unit="passage",
             desc="encoding" + (f" (+ {sentence_windows}-sentence windows)"
                                if sentence_windows else ""),
             disable=not progress, smoothing=0.05, dynamic_ncols=True, file=sys.stderr)
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    nxt = pool.submit(prepare, todo[0]) if todo else None
    for i, k in enumerate(todo):
      work = nxt.result()
      nxt = pool.submit(prepare, todo[i + 1]) if i + 1 < len(todo) else None
      base, texts_done = bar.n, [0]

      def advance(m, k=k, base=base, n_texts=max(1, len(work.ids))):   # texts -> passages of k
        texts_done[0] += m
        bar.update(base + len(rows_of(k)) * texts_done[0] // n_texts - bar.n)

      passages, wins = work.encode(encoder, advance)
      if need[k][0]:
        tmp = shard_path(out, k) + ".tmp.npy"
        np.save(tmp, passages)
        os.replace(tmp, shard_path(out, k))   # a shard exists only when it is complete
      if wins is not None:
        windows.save_shard(out, k, wins, work.offsets)
  bar.close()


def iter_shards(out: str, n: int, shard_size: int):
  for k in range(math.ceil(n / shard_size)):
    yield np.load(shard_path(out, k), mmap_mode="r")


def _train_sample(paths: list[str], size: int) -> np.ndarray:
  """Up to `size` vectors spread evenly over all shards."""
  per = max(1, size // len(paths))
  parts = []
  for p in paths:
    s = np.load(p, mmap_mode="r")
    parts.append(np.asarray(s[::max(1, len(s) // per)][:per]))
  return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)


def make_faiss_index(paths: list[str], n: int, dim: int, index_type: str):
  """(faiss index over the vectors of the .npy shards `paths` (n rows in all), search params)."""
  import faiss
  if index_type == "flat":
    index, params = faiss.IndexFlatIP(dim), {}
  elif index_type == "ivf":
    nlist = max(1, min(int(4 * math.sqrt(n)), n // 39))
    index = faiss.IndexIVFScalarQuantizer(faiss.IndexFlatIP(dim), dim, nlist,
                                          faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
    params = {"nlist": nlist, "nprobe": min(nlist, 64)}
  elif index_type == "hnsw":
    index = faiss.IndexHNSWSQ(dim, faiss.ScalarQuantizer.QT_8bit, 32, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = 200
    params = {"efSearch": 256}
  else:
    raise ValueError(f"index type {index_type!r} is unknown; use one of {INDEX_TYPES}")
  if not index.is_trained:
    index.train(_train_sample(paths, 256 * max(params.get("nlist", 1), 256)))
  for p in paths:
    index.add(np.ascontiguousarray(np.load(p, mmap_mode="r"), dtype=np.float32))
  return index, params


def _write_index(index, path: str) -> None:
  import faiss
  faiss.write_index(index, path + ".tmp")
  os.replace(path + ".tmp", path)


def _digest(path: str) -> Optional[str]:
  from retrieval.encoders import encoder_digest
  return encoder_digest(path) if os.path.isdir(path) else None


def build_dense(corpus: str, out: str, spec, *, index_type: str = "flat", batch_size: int = 256,
                shard_size: int = 16384, dtype: str = "float32", attn_impl: str = "xla",
                sentence_windows: int = 0, window_encoding: str = "contextual",
                matmul_dtype: Optional[str] = None, devices=None, encoder=None,
                progress: bool = True) -> dict:
  """Builds (or resumes) a dense index; returns its meta.

  sentence_windows: N > 0 also indexes windows of N sentences of each passage and scores a
    passage by its own and its best window's cosine (`retrieval.windows`); 0 (the paper's
    setting) indexes passage vectors only.
  window_encoding: "contextual" (the default: each window's vector is pooled from its
    passage's own encoding pass, one pass for both) or "separate" (each window encoded on its
    own, as its own text); `retrieval.windows.contextual_windows`, docs/retrieval.md.
  matmul_dtype: None (matmuls in `dtype`) or "bfloat16": bf16 matmul operands accumulated in
    `dtype` (with float32: ~1.7x less CPU time, vectors within cosine 0.9999 of fp32's).
  devices: JAX devices to encode on (default: all local devices, batches split over them).
  encoder: overrides the encoder made from `spec` (tests wrap it to interrupt a build).
  """
  if index_type not in INDEX_TYPES:
    raise ValueError(f"index type {index_type!r} is unknown; use one of {INDEX_TYPES}")
  if sentence_windows < 0:
    raise ValueError(f"sentence_windows must be >= 0 (0: passage vectors only), got "
                     f"{sentence_windows}")
  if sentence_windows and window_encoding == "contextual" and spec.pooling != "mean":
    raise ValueError(f"contextual window encoding pools a sentence's token states and needs "
                     f"mean pooling; this encoder pools by {spec.pooling!r}: pass "
                     "--window-encoding separate")
  if window_encoding not in windows.WINDOW_ENCODINGS:
    raise ValueError(f"window_encoding {window_encoding!r} is unknown; use one of "
                     f"{windows.WINDOW_ENCODINGS}")
  log = (lambda m: print(m, file=sys.stderr)) if progress else (lambda m: None)
  n = _prepare(corpus, out, {"encoder": "dense", "spec": spec.to_meta(), "shard_size": shard_size},
               log)
  if os.path.exists(os.path.join(out, META_FILE)):   # incomplete again until this build ends
    os.remove(os.path.join(out, META_FILE))
  if encoder is None:
    import jax
    import jax.numpy as jnp
    from retrieval.encoders import DenseEncoder
    encoder = DenseEncoder(spec, batch_size=batch_size, dtype=jnp.dtype(dtype),
                           devices=devices or jax.devices(), attn_impl=attn_impl,
                           matmul_dtype=jnp.dtype(matmul_dtype) if matmul_dtype else None)
  encode_shards(encoder, out, n, shard_size, sentence_windows, progress, window_encoding)
  n_shards = math.ceil(n / shard_size)
  index, params = make_faiss_index([shard_path(out, k) for k in range(n_shards)], n, encoder.dim,
                                   index_type)
  _write_index(index, os.path.join(out, FAISS_FILE))
  meta = {"format": FORMAT_VERSION, "encoder": "dense", "index_type": index_type,
          "num_passages": n, "dim": encoder.dim, "corpus": os.path.abspath(corpus),
          "spec": spec.to_meta(), "encoder_digest": _digest(spec.path), "dtype": dtype,
          "matmul_dtype": matmul_dtype or dtype,
          "search_params": params}
  if sentence_windows:
    offsets = windows.global_offsets(out, n_shards)
    np.save(os.path.join(out, windows.OFFSETS_FILE), offsets)
    m = int(offsets[-1])
    w_index, w_params = make_faiss_index([windows.shard_path(out, k) for k in range(n_shards)],
                                         m, encoder.dim, index_type)
    _write_index(w_index, os.path.join(out, windows.WINDOWS_FAISS))
    meta["windows"] = {"sentences": sentence_windows, "encoding": window_encoding,
                       "num_windows": m,
                       "passage_weight": windows.passage_weight(window_encoding),
                       "shard_size": shard_size,
                       "search_params": w_params}
  write_json(os.path.join(out, META_FILE), meta)
  return meta


# --------------------------------------------------------------------------------------------
# BM25
# --------------------------------------------------------------------------------------------
def build_bm25(corpus: str, out: str, *, progress: bool = True) -> dict:
  """Builds a BM25 index with `bm25s` (English stopwords, no stemming); returns its meta."""
  import bm25s
  from bm25s.tokenization import Tokenizer
  log = (lambda m: print(m, file=sys.stderr)) if progress else (lambda m: None)
  n = _prepare(corpus, out, {"encoder": "bm25"}, log)
  store = DocStore(out)
  tok = Tokenizer(stopwords="en")
  ids = tok.tokenize((store.get(r)["contents"] for r in range(n)), length=n, return_as="ids",
                     show_progress=progress)
  model = bm25s.BM25()
  model.index(tok.to_tokenized_tuple(ids), show_progress=progress)
  d = os.path.join(out, "bm25")
  model.save(d, show_progress=False)
  tok.save_vocab(d)
  tok.save_stopwords(d)
  meta = {"format": FORMAT_VERSION, "encoder": "bm25", "index_type": "bm25", "num_passages": n,
          "corpus": os.path.abspath(corpus)}
  write_json(os.path.join(out, META_FILE), meta)
  return meta


def shard_files(out: str) -> list[str]:
  return sorted(glob.glob(os.path.join(out, "emb", "shard_*.npy")))
