"""`HttpRetriever`: the `Retriever` interface over a `ssp-jax retrieve serve` endpoint (or any
server speaking the Search-R1 /retrieve API), with timeouts and retries with back-off."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Sequence

from retrieval.base import RetrieverError, split_contents


class HttpRetriever:
  """POSTs {"queries", "topk", "return_scores": true} to `url` (a base URL or the /retrieve URL).

  Connection errors, timeouts and 5xx answers are retried `retries` times, sleeping
  backoff * 2**attempt seconds between tries; then `RetrieverError` is raised. A 4xx answer
  (a bad request) raises `RetrieverError` at once.
  """

  def __init__(self, url: str = "http://127.0.0.1:8000", timeout: float = 30.0, retries: int = 3,
               backoff: float = 0.5):
    url = url.rstrip("/")
    self.url = url if url.endswith("/retrieve") else url + "/retrieve"
    self.timeout, self.retries, self.backoff = timeout, retries, backoff

  def search(self, queries: Sequence[str], topk: int = 3) -> list[list[dict]]:
    if not queries:
      return []
    body = json.dumps({"queries": list(queries), "topk": topk, "return_scores": True}).encode()
    answer = self._post(body)
    try:
      result = answer["result"]
      if len(result) != len(queries):
        raise ValueError(f"{len(result)} result lists for {len(queries)} queries")
      return [[_to_doc(hit) for hit in hits] for hits in result]
    except (KeyError, TypeError, ValueError) as e:
      raise RetrieverError(f"malformed answer from {self.url}: {e}") from None

  def _post(self, body: bytes) -> dict:
    last = None
    for attempt in range(self.retries + 1):
      if attempt:
        time.sleep(self.backoff * 2 ** (attempt - 1))
      req = urllib.request.Request(self.url, data=body, method="POST",
                                   headers={"Content-Type": "application/json"})
      try:
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
          return json.loads(resp.read().decode("utf-8"))
      except urllib.error.HTTPError as e:
        detail = e.read().decode("utf-8", "replace")[:500]
        if 400 <= e.code < 500:
          raise RetrieverError(f"{self.url} rejected the request ({e.code}): {detail}") from None
        last = f"HTTP {e.code}: {detail}"
      except (urllib.error.URLError, TimeoutError, ConnectionError, OSError,
              json.JSONDecodeError) as e:
        last = f"{type(e).__name__}: {e}"
    raise RetrieverError(f"search at {self.url} failed after {self.retries + 1} tries: {last}")


def _to_doc(hit: dict) -> dict:
  doc, score = (hit["document"], hit.get("score")) if "document" in hit else (hit, None)
  title, text = split_contents(doc["contents"])
  return {"id": str(doc["id"]), "title": title, "text": text, "contents": doc["contents"],
          "score": float(score) if score is not None else 0.0}
