"""HTTP search server speaking the API of existing search-agent stacks (Search-R1, FlashRAG):

  POST /retrieve  {"queries": ["..."], "topk": 3, "return_scores": true}
    -> {"result": [[{"document": {"id": "..", "contents": "\\"Title\\"\\ntext"}, "score": 0.8}, ..]]}
       (with "return_scores": false, each inner list holds the documents themselves)
  GET /health     -> {"status": "ok", "encoder": .., "num_passages": ..}

Bad requests get a 4xx with {"error": "..."}; the server stays up. Requests from concurrent
connections are merged into one batched search by a single worker thread (`BatchWorker`).
"""
from __future__ import annotations

import dataclasses
import json
import queue
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional


@dataclasses.dataclass(frozen=True)
class Limits:
  max_queries: int = 1024       # queries per request
  max_query_chars: int = 4096   # characters per query
  max_topk: int = 100
  max_body_bytes: int = 8 << 20
  max_batch: int = 1024         # queries per merged search


class RequestError(ValueError):
  def __init__(self, status: int, message: str):
    super().__init__(message)
    self.status = status


class _Job:
  def __init__(self, queries: list[str], topk: int):
    self.queries, self.topk = queries, topk
    self.done = threading.Event()
    self.result: Optional[list] = None
    self.error: Optional[BaseException] = None


class BatchWorker:
  """Runs every search on one thread; jobs waiting in the queue are searched together."""

  def __init__(self, retriever, max_batch: int = 1024):
    self.retriever, self.max_batch = retriever, max_batch
    self.jobs: "queue.Queue[_Job]" = queue.Queue()
    threading.Thread(target=self._loop, daemon=True, name="retrieval-worker").start()

  def search(self, queries: list[str], topk: int) -> list[list[dict]]:
    job = _Job(queries, topk)
    self.jobs.put(job)
    job.done.wait()
    if job.error is not None:
      raise job.error
    return job.result

  def _take_batch(self) -> list[_Job]:
    batch = [self.jobs.get()]
    n = len(batch[0].queries)
    while n < self.max_batch:
      try:
        job = self.jobs.get_nowait()
      except queue.Empty:
        break
      batch.append(job)
      n += len(job.queries)
    return batch

  def _loop(self) -> None:
    while True:
      batch = self._take_batch()
      try:
        queries = [q for job in batch for q in job.queries]
        results = self.retriever.search(queries, max(job.topk for job in batch)) if queries else []
        start = 0
        for job in batch:
          job.result = [docs[:job.topk] for docs in results[start:start + len(job.queries)]]
          start += len(job.queries)
      except BaseException as e:  # noqa: BLE001 - handed to the waiting request
        for job in batch:
          job.error = e
      for job in batch:
        job.done.set()


def parse_request(body: bytes, limits: Limits) -> tuple[list[str], int, bool]:
  """Validates a /retrieve body; raises RequestError(4xx) naming the bad field."""
  try:
    req = json.loads(body.decode("utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise RequestError(400, f"body is not valid JSON: {e}") from None
  if not isinstance(req, dict):
    raise RequestError(400, "body must be a JSON object with a 'queries' list")
  queries = req.get("queries")
  if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
    raise RequestError(400, "'queries' must be a list of strings")
  if len(queries) > limits.max_queries:
    raise RequestError(413, f"too many queries: {len(queries)} > {limits.max_queries}")
  long = [i for i, q in enumerate(queries) if len(q) > limits.max_query_chars]
  if long:
    raise RequestError(413, f"query {long[0]} is longer than {limits.max_query_chars} characters")
  topk = req.get("topk", 3)
  if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= limits.max_topk:
    raise RequestError(400, f"'topk' must be an integer in [1, {limits.max_topk}], got {topk!r}")
  return_scores = req.get("return_scores", False)
  if not isinstance(return_scores, bool):
    raise RequestError(400, f"'return_scores' must be true or false, got {return_scores!r}")
  return queries, topk, return_scores


def format_result(results: list[list[dict]], return_scores: bool) -> dict:
  out = []
  for docs in results:
    plain = [{"id": d["id"], "contents": d["contents"]} for d in docs]
    out.append([{"document": p, "score": d["score"]} for p, d in zip(plain, docs)]
               if return_scores else plain)
  return {"result": out}


def make_handler(worker: BatchWorker, limits: Limits, health: dict, verbose: bool = False):
  class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60  # seconds a connection may stall (e.g. a body shorter than its Content-Length)

    def _send(self, status: int, obj: dict) -> None:
      body = json.dumps(obj, ensure_ascii=False).encode("utf-8")
      self.send_response(status)
      self.send_header("Content-Type", "application/json")
      self.send_header("Content-Length", str(len(body)))
      self.end_headers()
      self.wfile.write(body)

    def do_GET(self):
      if self.path.rstrip("/") == "/health":
        self._send(200, {"status": "ok", **health})
      else:
        self._send(404, {"error": f"unknown path {self.path}; use POST /retrieve or GET /health"})

    def do_POST(self):
      try:
        if self.path.rstrip("/") != "/retrieve":
          raise RequestError(404, f"unknown path {self.path}; use POST /retrieve")
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
          raise RequestError(411, "a Content-Length header is required")
        if int(length) > limits.max_body_bytes:
          self.close_connection = True  # the unread body must not be parsed as a request
          raise RequestError(413, f"body of {length} bytes exceeds {limits.max_body_bytes}")
        queries, topk, return_scores = parse_request(self.rfile.read(int(length)), limits)
        self._send(200, format_result(worker.search(queries, topk), return_scores))
      except RequestError as e:
        self._send(e.status, {"error": str(e)})
      except Exception as e:  # noqa: BLE001 - a failed search must not kill the server
        self._send(500, {"error": f"search failed: {type(e).__name__}: {e}"})

    def log_message(self, fmt, *args):
      if verbose:
        super().log_message(fmt, *args)

  return Handler


def make_server(retriever, host: str = "127.0.0.1", port: int = 8000,
                limits: Limits = Limits(), verbose: bool = False) -> ThreadingHTTPServer:
  """A ready server (port 0 picks a free port: see `server.server_address`); call
  `serve_forever()` (or run it in a thread) and `shutdown()`."""
  meta = getattr(retriever, "meta", {})
  health = {"encoder": meta.get("encoder"), "index_type": meta.get("index_type"),
            "num_passages": meta.get("num_passages")}
  worker = BatchWorker(retriever, limits.max_batch)
  server = ThreadingHTTPServer((host, port), make_handler(worker, limits, health, verbose))
  server.daemon_threads = True
  return server
