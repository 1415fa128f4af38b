"""The `Retriever` interface that the rollout engine calls, and its error type."""
from __future__ import annotations

from typing import Protocol


class RetrieverError(RuntimeError):
  """A search that failed for good (after retries). The rollout turns it into an observation
  saying the search failed, and counts it; it never crashes a rollout."""


class Retriever(Protocol):
  def search(self, queries: list[str], topk: int) -> list[list[dict]]:
    """One list of documents per query, best first. Each document is a dict with at least
    `id`, `title`, `text`, `contents` ("\\"Title\\"\\ntext") and `score`."""
    ...


def split_contents(contents: str) -> tuple[str, str]:
  """Splits wiki-18 `contents` ("\\"Title\\"\\ntext") into (title, text)."""
  head, _, text = contents.partition("\n")
  return head.strip().strip('"'), text
