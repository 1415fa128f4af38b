"""Corpora in the wiki-18 layout: JSONL (optionally gzipped) lines `{"id", "contents"}` with
contents `"Title"\\ntext`.

Corpora are read streaming (`iter_corpus`); nothing holds all passages as Python objects. For
lookup by row at search time an index directory keeps a `DocStore`: the passages as one JSON line
each in `docs.jsonl` plus `docs_offsets.npy` (int64 [N + 1] byte offsets), read through a memmap.
"""
from __future__ import annotations

import gzip
import io
import json
import os
from typing import Iterator, Sequence

import numpy as np

from retrieval.base import split_contents

DOCS_FILE = "docs.jsonl"
OFFSETS_FILE = "docs_offsets.npy"


def default_corpus_path() -> str:
  """The embedded default corpus: ~3.9k passages of ~100 words from 99 Wikipedia articles
  (see retrieval/data/ATTRIBUTION.md)."""
  return os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "wiki_sample.jsonl.gz")


def open_text(path: str) -> io.TextIOBase:
  """A UTF-8 text stream over a plain or gzip-compressed (`.gz`) file."""
  if path.endswith(".gz"):
    return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
  return open(path, encoding="utf-8")


def iter_jsonl(path: str) -> Iterator[tuple[int, dict]]:
  """(1-based line number, record) for each non-empty line of a JSONL / JSONL.gz file, streaming;
  a line that is not JSON raises ValueError naming the file and line."""
  with open_text(path) as f:
    for lineno, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        yield lineno, json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{lineno}: not a JSON line ({e})") from None


def iter_corpus(path: str) -> Iterator[dict]:
  """Yields `{"id": str, "contents": str}` for each line of a JSONL / JSONL.gz corpus.

  Raises ValueError naming the line when a record lacks `contents` or is not JSON. Records with
  `title` + `text` instead of `contents` (other public layouts) are converted.
  """
  if not os.path.exists(path):
    raise FileNotFoundError(f"corpus file {path!r} does not exist; pass --corpus PATH to a JSONL "
                            "file of {\"id\", \"contents\"} lines")
  for lineno, rec in iter_jsonl(path):
    yield {"id": str(rec.get("id", lineno - 1)), "contents": _contents(rec, path, lineno)}


def _contents(rec: dict, path: str, lineno: int) -> str:
  if "contents" in rec:
    return rec["contents"]
  if "text" in rec:
    return f"\"{rec.get('title', '')}\"\n{rec['text']}"
  raise ValueError(f"{path}:{lineno}: record has no 'contents' (or 'title'/'text') field; corpus "
                   "lines must look like {\"id\": \"0\", \"contents\": \"\\\"Title\\\"\\ntext\"}")


def count_passages(path: str) -> int:
  """Number of non-empty lines (one streaming pass, no JSON parsing)."""
  with open_text(path) as f:
    return sum(1 for line in f if line.strip())


def to_doc(rec: dict, score: float | None = None) -> dict:
  """A search result: id, title, text, contents (+ score)."""
  title, text = split_contents(rec["contents"])
  doc = {"id": rec["id"], "title": title, "text": text, "contents": rec["contents"]}
  if score is not None:
    doc["score"] = float(score)
  return doc


def write_doc_store(corpus_path: str, out_dir: str) -> int:
  """Streams the corpus into `out_dir/docs.jsonl` + offsets; returns the passage count."""
  os.makedirs(out_dir, exist_ok=True)
  offsets = [0]
  tmp = os.path.join(out_dir, DOCS_FILE + ".tmp")
  with open(tmp, "wb") as f:
    for rec in iter_corpus(corpus_path):
      f.write(json.dumps(rec, ensure_ascii=False).encode("utf-8") + b"\n")
      offsets.append(f.tell())
  np.save(os.path.join(out_dir, OFFSETS_FILE), np.asarray(offsets, dtype=np.int64))
  os.replace(tmp, os.path.join(out_dir, DOCS_FILE))
  return len(offsets) - 1


class DocStore:
  """Row -> passage lookup over `docs.jsonl` through a memmap; cheap to open, thread-safe."""

  def __init__(self, index_dir: str):
    path = os.path.join(index_dir, DOCS_FILE)
    if not os.path.exists(path):
      raise FileNotFoundError(f"{path} is missing; rebuild the index with `ssp-jax index build`")
    self.offsets = np.load(os.path.join(index_dir, OFFSETS_FILE), mmap_mode="r")
    self.data = np.memmap(path, dtype=np.uint8, mode="r") if os.path.getsize(path) else b""

  def __len__(self) -> int:
    return len(self.offsets) - 1

  def get(self, row: int) -> dict:
    lo, hi = int(self.offsets[row]), int(self.offsets[row + 1])
    return json.loads(bytes(self.data[lo:hi]).decode("utf-8"))

  def docs(self, rows: Sequence[int], scores: Sequence[float]) -> list[dict]:
    """Result dicts for valid rows (faiss pads missing hits with -1)."""
    return [to_doc(self.get(int(r)), s) for r, s in zip(rows, scores) if 0 <= int(r) < len(self)]
