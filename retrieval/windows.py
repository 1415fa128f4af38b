"""Sentence windows: sub-passage vectors that sharpen a dense index built with a small encoder.

With `--sentence-windows N` an index also holds one vector per window of N consecutive
sentences of every passage, and a passage scores

    score(q, p) = w * cos(q, p) + (1 - w) * max over p's windows of cos(q, window)

with w = `passage_weight(encoding)`. A window's vector comes from one of two encodings:
  contextual (the default): the mean of its sentences' token states in the passage's own
    encoding pass (`contextual_windows`, `pool_spans`): one pass for passages and windows; w 0.3
  separate: its own text (the title line, then the sentences) encoded on its own; w 0.5
On the embedded corpus with MiniLM, windows lift the share of the 141 evaluation questions whose
supporting passage comes first from 0.48 to 0.55 (contextual) or 0.62 (separate), and their
top-3 recall from 0.75 to 0.84 / 0.83 (docs/retrieval.md): a 384-d encoder trained on sentences
places a sentence-sized fact better than a 100-word passage that mixes several. The paper's
setting (E5 passage vectors over wiki-18) is N = 0: no windows, the score is the passage cosine.

Search is exact over a candidate set: the top candidates of the passage index and the parents of
the top windows of the window index, each rescored with its stored passage vector and all of its
window vectors.

Layout inside an index directory (beside emb/ and index.faiss):
  win/state.json                 {"sentences": N, "encoding": ...}; a different one clears win/
  win/shard_00000.npy            float32 [windows of passage shard k, D], written per shard
  win/offsets_00000.npy          int64 [rows of shard k + 1]: window rows of each passage, local
  windows.faiss                  the faiss index over all windows (same type as index.faiss)
  win_offsets.npy                int64 [num_passages + 1]: global window rows of each passage
"""
from __future__ import annotations

import bisect
import json
import os
import re
from typing import Optional, Sequence

import numpy as np

WINDOWS_FAISS = "windows.faiss"
OFFSETS_FILE = "win_offsets.npy"
PASSAGE_WEIGHT = 0.5               # separate window encoding
CONTEXTUAL_PASSAGE_WEIGHT = 0.3    # contextual window encoding (docs/retrieval.md)
WINDOW_ENCODINGS = ("contextual", "separate")


def passage_weight(encoding: str) -> float:
  return CONTEXTUAL_PASSAGE_WEIGHT if encoding == "contextual" else PASSAGE_WEIGHT
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentence_spans(text: str) -> list[tuple[int, int]]:
  """(start, end) character spans of the sentences of a passage's text (split after . ! ?
  followed by whitespace; surrounding whitespace stripped, empty pieces dropped)."""
  spans, pos = [], 0
  for piece_end, nxt in [(m.start(), m.end()) for m in _SENTENCE_END.finditer(text)] + [
      (len(text), len(text))]:
    piece = text[pos:piece_end]
    if piece.strip():
      lead = len(piece) - len(piece.lstrip())
      spans.append((pos + lead, pos + lead + len(piece.strip())))
    pos = nxt
  return spans


def split_sentences(text: str) -> list[str]:
  """Sentences of a passage's text (split after . ! ? followed by whitespace)."""
  return [text[a:b] for a, b in sentence_spans(text)]


def passage_windows(contents: str, n_sentences: int) -> list[str]:
  """Windows of n consecutive sentences (stride 1) of a wiki-18 `contents`, each prefixed with
  the title line; a passage shorter than n sentences (or without text) is one window."""
  head, _, text = contents.partition("\n")
  sents = split_sentences(text)
  if len(sents) <= n_sentences:
    return [contents]
  return [head + "\n" + " ".join(sents[i:i + n_sentences])
          for i in range(len(sents) - n_sentences + 1)]


# --------------------------------------------------------------------------------------------
# Contextual windows: pooled from the passage's own encoding pass
# --------------------------------------------------------------------------------------------
def contextual_windows(contents: str, n_sentences: int, starts_T: np.ndarray, kept_end: int
                       ) -> tuple[Optional[np.ndarray], list]:
  """How the windows of `passage_windows(contents, n_sentences)` come out of the passage's own
  encoding pass instead of one pass each.

  starts_T: each token's start character in `contents` (-1: special and prefix tokens);
  kept_end: the end character of the last token kept (a longer passage is truncated).
  Returns (segments, plan):
    segments  int32 [T]: 0 for the tokens outside every sentence (special and prefix tokens, the
              title line), k + 1 for the tokens of sentence k; None when no window needs them
    plan      per window, in `passage_windows` order: None (the passage itself: it has at most
              n_sentences sentences), (lo, hi) (pool segments lo..hi-1: the window's sentence
              tokens, in the passage's context; `pool_spans`), or the window's text (a
              sentence was cut by truncation: encode it on its own, as the separate layout does)
  """
  head, sep, text = contents.partition("\n")
  base = len(head) + len(sep)
  spans = [(a + base, b + base) for a, b in sentence_spans(text)]
  if len(spans) <= n_sentences:
    return None, [None]
  lo_S = np.array([a for a, _ in spans])
  hi_S = np.array([b for _, b in spans])
  starts_T = np.asarray(starts_T)
  k_T = np.searchsorted(lo_S, starts_T, side="right") - 1
  inside = (starts_T >= 0) & (k_T >= 0) & (starts_T < hi_S[np.maximum(k_T, 0)])
  segments = np.where(inside, k_T + 1, 0).astype(np.int32)
  plan: list = []
  for i in range(len(spans) - n_sentences + 1):
    if hi_S[i + n_sentences - 1] <= kept_end:
      plan.append((i + 1, i + 1 + n_sentences))
    else:
      plan.append(head + "\n" + " ".join(contents[a:b] for a, b in spans[i:i + n_sentences]))
  return segments, plan


def pool_spans(sums_SD: np.ndarray, counts_S: np.ndarray, spans: Sequence[tuple[int, int]],
               normalize: bool) -> np.ndarray:
  """float32 [len(spans), D]: for each (lo, hi) the mean of the token states of segments
  lo..hi-1 (the window's sentences; not the title line or special tokens, whose states in the
  passage pass carry the whole passage), L2-normalised when the encoder normalises."""
  csum_SD = np.concatenate([np.zeros_like(sums_SD[:1]), np.cumsum(sums_SD, axis=0)])
  ccnt_S = np.concatenate([[0.0], np.cumsum(counts_S)])
  lo = np.array([a for a, _ in spans])
  hi = np.array([b for _, b in spans])
  v_WD = (csum_SD[hi] - csum_SD[lo]) / np.maximum(ccnt_S[hi] - ccnt_S[lo], 1e-9)[:, None]
  if normalize:
    v_WD = v_WD / np.maximum(np.linalg.norm(v_WD, axis=1, keepdims=True), 1e-12)
  return v_WD.astype(np.float32)


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------
def win_dir(out: str) -> str:
  return os.path.join(out, "win")


def shard_path(out: str, k: int) -> str:
  return os.path.join(win_dir(out), f"shard_{k:05d}.npy")


def offsets_path(out: str, k: int) -> str:
  return os.path.join(win_dir(out), f"offsets_{k:05d}.npy")


def prepare_dir(out: str, n_sentences: int, encoding: str = "contextual") -> None:
  """Keeps win/ when it was made for the same N and window encoding (a resumed build), clears
  it otherwise."""
  import shutil
  d = win_dir(out)
  state_file = os.path.join(d, "state.json")
  state = {"sentences": n_sentences, "encoding": encoding}
  if os.path.exists(state_file):
    with open(state_file) as f:
      if json.load(f) == state:
        return
  if os.path.isdir(d):
    shutil.rmtree(d)
  os.makedirs(d)
  with open(state_file, "w") as f:
    json.dump(state, f)


def save_shard(out: str, k: int, emb_WD: np.ndarray, offsets: np.ndarray) -> None:
  """Writes the offsets, then the vectors: a shard counts as done only when its vectors exist."""
  np.save(offsets_path(out, k), offsets)
  tmp = shard_path(out, k) + ".tmp.npy"
  np.save(tmp, emb_WD)
  os.replace(tmp, shard_path(out, k))


def global_offsets(out: str, n_shards: int) -> np.ndarray:
  """[num_passages + 1] global window rows of each passage, from the per-shard offsets."""
  parts, base = [np.zeros(1, np.int64)], 0
  for k in range(n_shards):
    local = np.load(offsets_path(out, k))
    parts.append(base + local[1:])
    base += int(local[-1])
  return np.concatenate(parts)


class ShardedRows:
  """Row lookup over a list of .npy shards (memory-mapped), as if they were one [R, D] array."""

  def __init__(self, paths: Sequence[str]):
    self.arrays = [np.load(p, mmap_mode="r") for p in paths]
    self.starts = np.cumsum([0] + [len(a) for a in self.arrays])
    self._starts = self.starts.tolist()

  def __len__(self) -> int:
    return int(self.starts[-1])

  def rows(self, idx: np.ndarray) -> np.ndarray:
    """float32 [len(idx), D] rows, in the order of idx."""
    idx = np.asarray(idx, np.int64)
    out = np.empty((len(idx), self.arrays[0].shape[1]), np.float32)
    shard = np.searchsorted(self.starts, idx, side="right") - 1
    for s in np.unique(shard):
      sel = np.nonzero(shard == s)[0]
      out[sel] = self.arrays[s][idx[sel] - self.starts[s]]
    return out

  def span(self, lo: int, hi: int) -> np.ndarray:
    """Rows lo..hi-1 of one shard (a passage's windows never straddle shards: they are
    written per passage shard)."""
    s = bisect.bisect_right(self._starts, lo) - 1
    return np.asarray(self.arrays[s][lo - self.starts[s]:hi - self.starts[s]], np.float32)


# --------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------
def rescore(q_D: np.ndarray, cands: np.ndarray, passages: ShardedRows, windows: ShardedRows,
            offsets: np.ndarray, passage_weight: float = PASSAGE_WEIGHT) -> np.ndarray:
  """Exact window-aware scores of candidate passage rows for one query vector."""
  sp = passages.rows(cands) @ q_D
  best = np.array([float(np.max(windows.span(int(offsets[c]), int(offsets[c + 1])) @ q_D))
                   for c in cands], np.float32)
  return passage_weight * sp + (1.0 - passage_weight) * best


def candidates_per_query(topk: int) -> int:
  """How many hits to take from each faiss index before the exact rescoring."""
  return max(10, 2 * topk)
