"""HTTP search server speaking the API of existing search-agent stacks (Search-R1, FlashRAG):

  POST /retrieve  {"queries": ["..."], "topk": 3, "return_scores": true}
    -> {"result": [[{"document": {"id": "..", "contents": "\\"Title\\"\\ntext"}, "score": 0.8}, ..]]}
       (with "return_scores": false, each inner list holds the documents themselves)
  GET /health     -> {"status": "ok", "encoder": .., "num_passages": ..}

Bad requests get a 4xx with {"error": "..."}; the server stays up. Connections are served by a
pool of daemon threads (`Limits.max_threads`) behind a listen backlog of `Limits.backlog`, so
hundreds of clients can connect at once. Requests from concurrent connections are merged into
one batched search by a single worker thread (`BatchWorker`); when a merged search fails, each
request is searched again on its own, so a bad query fails only its own request.

Every error answer leaves the connection in a known state: the request body is read (drained)
before a keep-alive answer, or the answer says `Connection: close` and the server closes after
draining what the client is still sending (so a client blocked sending a too-large body reads
the 413 instead of a reset connection).
"""
from __future__ import annotations

import dataclasses
import json
import queue
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Optional

_CONTENT_LENGTH = re.compile(r"[0-9]{1,18}")


@dataclasses.dataclass(frozen=True)
class Limits:
  max_queries: int = 1024       # queries per request
  max_query_chars: int = 4096   # characters per query
  max_topk: int = 100
  max_body_bytes: int = 8 << 20
  max_batch: int = 1024         # queries per merged search
  max_threads: int = 512        # connections served at once (more wait in the backlog)
  backlog: int = 1024           # listen backlog (the kernel may cap it at net.core.somaxconn)
  idle_timeout: float = 60.0    # seconds a connection may stall (idle keep-alive, short body)
  drain_seconds: float = 5.0    # how long an error answer keeps reading an unwanted body


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
  """Runs every search on one thread; jobs waiting in the queue are searched together. When a
  merged search raises, each of its jobs is searched again alone, so one bad request cannot
  fail the others merged with it."""

  def __init__(self, retriever, max_batch: int = 1024):
    self.retriever, self.max_batch = retriever, max_batch
    self.jobs: "queue.Queue[_Job]" = queue.Queue()
    threading.Thread(target=self._loop, daemon=True, name="retrieval-worker").start()

  def close(self) -> None:
    """Ends the worker thread (which holds the retriever, its index and encoder) once the jobs
    already queued are done."""
    self.jobs.put(None)

  def search(self, queries: list[str], topk: int) -> list[list[dict]]:
    job = _Job(queries, topk)
    self.jobs.put(job)
    job.done.wait()
    if job.error is not None:
      raise job.error
    return job.result

  def _take_batch(self) -> list[_Job]:
    """The next batch of jobs; empty when `close` was called."""
    first = self.jobs.get()
    if first is None:
      return []
    batch, n = [first], len(first.queries)
    while n < self.max_batch:
      try:
        job = self.jobs.get_nowait()
      except queue.Empty:
        break
      if job is None:             # close: finish this batch, then stop
        self.jobs.put(None)
        break
      batch.append(job)
      n += len(job.queries)
    return batch

  def _run(self, batch: list[_Job]) -> None:
    queries = [q for job in batch for q in job.queries]
    results = self.retriever.search(queries, max(job.topk for job in batch)) if queries else []
    start = 0
    for job in batch:
      job.result = [docs[:job.topk] for docs in results[start:start + len(job.queries)]]
      start += len(job.queries)

  def _loop(self) -> None:
    while True:
      batch = self._take_batch()
      if not batch:
        return
      try:
        self._run(batch)
      except BaseException as e:  # noqa: BLE001 - handed to the waiting request(s)
        if len(batch) == 1:
          batch[0].error = e
        else:
          for job in batch:       # retried alone: only the bad request fails
            try:
              self._run([job])
            except BaseException as e1:  # noqa: BLE001
              job.error = e1
      for job in batch:
        job.done.set()


def parse_request(body: bytes, limits: Limits) -> tuple[list[str], int, bool]:
  """Validates a /retrieve body; raises RequestError(4xx) naming the bad field."""
  try:
    req = json.loads(body.decode("utf-8"))
  except UnicodeDecodeError as e:
    raise RequestError(400, f"body is not valid UTF-8: {e}") from None
  except RecursionError:
    raise RequestError(400, "body is not valid JSON: nested too deeply") from None
  except ValueError as e:   # JSONDecodeError, and integers longer than Python converts
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
  for i, q in enumerate(queries):
    try:
      q.encode("utf-8")
    except UnicodeEncodeError:
      raise RequestError(400, f"'queries'[{i}] is not valid Unicode text (a lone surrogate such "
                              "as \\ud800); send UTF-8 text") from None
  topk = req.get("topk", 3)
  if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= limits.max_topk:
    shown = repr(topk) if len(repr(topk)) <= 40 else repr(topk)[:40] + "..."
    raise RequestError(400, f"'topk' must be an integer in [1, {limits.max_topk}], got {shown}")
  return_scores = req.get("return_scores", False)
  if not isinstance(return_scores, bool):
    raise RequestError(400, f"'return_scores' must be true or false, got {return_scores!r:.40}")
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
    timeout = limits.idle_timeout

    def _body_length(self) -> Optional[int]:
      """The request's Content-Length (None: absent). A malformed one answers 400 and a
      chunked body 411, both closing the connection: where the body ends is unknown."""
      self._unread = 0
      if self.headers.get("Transfer-Encoding") is not None:
        self.close_connection = True
        raise RequestError(411, "chunked bodies are not supported; send a Content-Length header")
      values = self.headers.get_all("Content-Length") or []
      if not values:
        return None
      if len(set(v.strip() for v in values)) > 1 or not _CONTENT_LENGTH.fullmatch(values[0].strip()):
        self.close_connection = True
        raise RequestError(400, f"bad Content-Length header {values[0][:40]!r}; send the body's "
                                "size in bytes as one decimal number")
      self._unread = int(values[0])
      return self._unread

    def _read_body(self, n: int) -> bytes:
      data = self.rfile.read(n)
      self._unread = 0
      if len(data) < n:
        self.close_connection = True
        raise RequestError(400, f"body ended after {len(data)} of {n} bytes (Content-Length)")
      return data

    def _drain(self) -> None:
      """Reads an unread body so the connection can carry the next request; a body larger than
      max_body_bytes is not kept alive for (the answer closes the connection instead)."""
      if self._unread and self._unread <= limits.max_body_bytes and not self.close_connection:
        try:
          self._read_body(self._unread)
        except (RequestError, OSError):
          self.close_connection = True
      elif self._unread:
        self.close_connection = True

    def _send(self, status: int, obj: dict) -> None:
      if status >= 400:
        self._drain()
      body = json.dumps(obj, ensure_ascii=False).encode("utf-8")
      self.send_response(status)
      self.send_header("Content-Type", "application/json")
      self.send_header("Content-Length", str(len(body)))
      if self.close_connection:
        self.send_header("Connection", "close")
      self.end_headers()
      self.wfile.write(body)
      if self.close_connection and self._unread:
        self._linger()

    def _linger(self) -> None:
      """Closes gracefully: the answer is sent and the write side shut, then what the client is
      still sending is read and dropped for up to drain_seconds, so its send completes and it
      reads the answer (closing with unread data would reset the connection first)."""
      try:
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + limits.drain_seconds
        while self._unread > 0 and time.monotonic() < deadline:
          self.connection.settimeout(max(0.05, deadline - time.monotonic()))
          chunk = self.rfile.read1(min(1 << 16, self._unread))
          if not chunk:
            break
          self._unread -= len(chunk)
      except OSError:
        pass

    def _guarded(self, fn) -> None:
      self._unread = 0
      try:
        fn()
      except RequestError as e:
        self._send(e.status, {"error": str(e)})
      except (TimeoutError, ConnectionError):
        self.close_connection = True   # the client stalled or left: nothing to answer
      except Exception as e:  # noqa: BLE001 - a failed search must not kill the server
        self._send(500, {"error": f"search failed: {type(e).__name__}: {e}"})

    def do_GET(self):
      self._guarded(self._get)

    def do_POST(self):
      self._guarded(self._post)

    def _get(self):
      n = self._body_length()
      if n:
        raise RequestError(400, "a GET request must not have a body")
      if self.path.rstrip("/") != "/health":
        raise RequestError(404, f"unknown path {self.path}; use POST /retrieve or GET /health")
      self._send(200, {"status": "ok", **health})

    def _post(self):
      n = self._body_length()
      if self.path.rstrip("/") != "/retrieve":
        raise RequestError(404, f"unknown path {self.path}; use POST /retrieve")
      if n is None:
        self.close_connection = True
        raise RequestError(411, "a Content-Length header is required")
      if n > limits.max_body_bytes:
        raise RequestError(413, f"body of {n} bytes exceeds {limits.max_body_bytes}")
      queries, topk, return_scores = parse_request(self._read_body(n), limits)
      self._send(200, format_result(worker.search(queries, topk), return_scores))

    def log_message(self, fmt, *args):
      if verbose:
        super().log_message(fmt, *args)

  return Handler


class PooledHTTPServer(HTTPServer):
  """An HTTPServer whose connections are handled by up to `max_threads` daemon threads (started
  as needed, then reused), with a listen backlog of `backlog`."""

  def __init__(self, address, handler, *, max_threads: int = 512, backlog: int = 1024,
               worker: Optional[BatchWorker] = None):
    self.worker = worker              # closed with the server
    self.request_queue_size = backlog   # read by server_activate's listen()
    self.max_threads = max_threads
    self._conns: "queue.Queue" = queue.Queue()
    self._lock = threading.Lock()
    self._threads, self._idle = 0, 0
    super().__init__(address, handler)

  def process_request(self, request, client_address):
    self._conns.put((request, client_address))
    with self._lock:
      if self._idle < self._conns.qsize() and self._threads < self.max_threads:
        self._threads += 1
        threading.Thread(target=self._serve_connections, daemon=True,
                         name=f"retrieval-http-{self._threads}").start()

  def server_close(self):
    """Closes the socket and ends the connection threads (each blocks on the queue, so a closed
    server used to keep them for the life of the process)."""
    super().server_close()
    with self._lock:
      n = self._threads
    for _ in range(n):
      self._conns.put(None)
    if self.worker is not None:
      self.worker.close()

  def _serve_connections(self):
    while True:
      with self._lock:
        self._idle += 1
      item = self._conns.get()
      with self._lock:
        self._idle -= 1
        if item is None:            # server_close: this thread ends
          self._threads -= 1
          return
      request, client_address = item
      try:
        self.finish_request(request, client_address)
      except Exception:  # noqa: BLE001
        self.handle_error(request, client_address)
      finally:
        self.shutdown_request(request)

  def handle_error(self, request, client_address):
    import sys
    if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):  # a client that left
      super().handle_error(request, client_address)


def make_server(retriever, host: str = "127.0.0.1", port: int = 8000,
                limits: Limits = Limits(), verbose: bool = False) -> PooledHTTPServer:
  """A ready server (port 0 picks a free port: see `server.server_address`); call
  `serve_forever()` (or run it in a thread) and `shutdown()`."""
  meta = getattr(retriever, "meta", {})
  health = {"encoder": meta.get("encoder"), "index_type": meta.get("index_type"),
            "num_passages": meta.get("num_passages")}
  worker = BatchWorker(retriever, limits.max_batch)
  return PooledHTTPServer((host, port), make_handler(worker, limits, health, verbose),
                          max_threads=limits.max_threads, backlog=limits.backlog, worker=worker)
