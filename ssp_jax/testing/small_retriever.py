"""A small in-memory BM25 retriever implementing `retrieval.base.Retriever` (real scoring over
real text), for tests and the multi-turn benchmark. Not a replacement for `retrieval/`."""
from __future__ import annotations

import math
import re
import time
from collections import Counter
from typing import Optional, Sequence

from retrieval.base import RetrieverError, split_contents

WIKI_SNIPPETS = [
    '"Moby-Dick"\nMoby-Dick is an 1851 novel by American writer Herman Melville about the '
    'obsessive quest of Ahab, captain of the whaling ship Pequod, for the white whale.',
    '"Herman Melville"\nHerman Melville (1819-1891) was an American novelist, short story writer '
    'and poet of the American Renaissance period, born in New York City.',
    '"Paris"\nParis is the capital and largest city of France. The Seine river flows through '
    'the city, which has been a major centre of finance, diplomacy and the arts.',
    '"Alexander Graham Bell"\nAlexander Graham Bell was a Scottish-born inventor credited with '
    'patenting the first practical telephone. He was born in Edinburgh, Scotland, in 1847.',
    '"Edinburgh"\nEdinburgh is the capital city of Scotland. The Water of Leith is the main '
    'river that flows through the city to the port of Leith.',
    '"Marie Curie"\nMarie Curie was a Polish and naturalised-French physicist and chemist who '
    'conducted pioneering research on radioactivity; she was born in Warsaw in 1867.',
    '"Warsaw"\nWarsaw is the capital and largest city of Poland. It stands on the River '
    'Vistula in east-central Poland.',
    '"Ernest Hemingway"\nErnest Hemingway was an American novelist who wrote The Old Man and '
    'the Sea, published in 1952. He did not attend university.',
]

_TOKEN = re.compile(r"\w+")


def _terms(text: str) -> list[str]:
  return [t.lower() for t in _TOKEN.findall(text)]


class SmallBM25Retriever:
  """BM25 (k1=0.9, b=0.4, the pyserini defaults) over wiki-style `"Title"\\ntext` contents."""

  def __init__(self, contents: Sequence[str] = tuple(WIKI_SNIPPETS), k1: float = 0.9,
               b: float = 0.4, fail: Optional[Exception] = None, delay_s: float = 0.0):
    self.docs = []
    for i, c in enumerate(contents):
      title, text = split_contents(c)
      self.docs.append({"id": str(i), "title": title, "text": text, "contents": c})
    self.tf = [Counter(_terms(c)) for c in contents]
    self.len = [sum(t.values()) for t in self.tf]
    self.avg = sum(self.len) / max(len(self.len), 1)
    df = Counter(w for t in self.tf for w in t)
    n = len(self.tf)
    self.idf = {w: math.log(1 + (n - d + 0.5) / (d + 0.5)) for w, d in df.items()}
    self.k1, self.b = k1, b
    self.fail, self.delay_s = fail, delay_s
    self.calls: list[list[str]] = []

  def score(self, query: str) -> list[float]:
    q = _terms(query)
    out = []
    for tf, n in zip(self.tf, self.len):
      s = 0.0
      for w in q:
        f = tf.get(w, 0)
        if f:
          s += self.idf[w] * f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * n / self.avg))
      out.append(s)
    return out

  def search(self, queries: list[str], topk: int) -> list[list[dict]]:
    self.calls.append(list(queries))
    if self.delay_s:
      time.sleep(self.delay_s)
    if self.fail is not None:
      raise self.fail
    out = []
    for q in queries:
      scores = self.score(q)
      order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:topk]
      out.append([dict(self.docs[i], score=scores[i]) for i in order])
    return out


__all__ = ["SmallBM25Retriever", "RetrieverError", "WIKI_SNIPPETS"]
