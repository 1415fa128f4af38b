"""Fault drills against a real server on localhost (issue 16): many concurrent clients, a bad
query merged with good ones, keep-alive after error answers, 413 before the body, malformed
numbers / nesting / headers. Raw sockets where the HTTP client library would hide the bytes."""
import http.client
import json
import socket
import threading
import time

import pytest

from retrieval import index as index_lib
from retrieval.base import RetrieverError
from retrieval.client import HttpRetriever
from retrieval.corpus import default_corpus_path
from retrieval.search import load_retriever
from retrieval.server import Limits, make_server

LIMITS = Limits(max_queries=8, max_query_chars=200, max_topk=10, max_body_bytes=20000,
                drain_seconds=2.0)


@pytest.fixture(scope="module")
def bm25(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("bm25"))
  index_lib.build_bm25(default_corpus_path(), out, progress=False)
  return load_retriever(out)


class Slow:
  """The real retriever; each search waits `delay` s first (so concurrent requests merge) and
  raises when a query is `bad` (a query the encoder cannot take, as in a real failure)."""

  def __init__(self, inner, delay=0.0, bad=None):
    self.inner, self.meta, self.delay, self.bad = inner, inner.meta, delay, bad
    self.calls = []

  def search(self, queries, topk):
    self.calls.append(len(queries))
    time.sleep(self.delay)
    if self.bad is not None and self.bad in queries:
      raise RuntimeError(f"cannot encode {self.bad!r}")
    return self.inner.search(queries, topk)


def serve(retriever, limits=LIMITS):
  srv = make_server(retriever, "127.0.0.1", 0, limits)
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  return srv


@pytest.fixture()
def server(bm25):
  srv = serve(bm25)
  yield srv
  srv.shutdown()
  srv.server_close()


def post(srv, body, path="/retrieve", timeout=60):
  conn = http.client.HTTPConnection(*srv.server_address[:2], timeout=timeout)
  data = body if isinstance(body, bytes) else json.dumps(body).encode()
  conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
  resp = conn.getresponse()
  out = resp.status, json.loads(resp.read().decode())
  conn.close()
  return out


class Raw:
  """One keep-alive connection speaking bytes; `answer()` reads one HTTP answer off it."""

  def __init__(self, srv):
    self.sock = socket.create_connection(srv.server_address[:2], timeout=10)
    self.buf = b""

  def send(self, data: bytes):
    self.sock.sendall(data)

  def answer(self):
    """(status, headers dict, json body); (None, {}, None) when the server closed instead."""
    while b"\r\n\r\n" not in self.buf:
      chunk = self.sock.recv(65536)
      if not chunk:
        return None, {}, None
      self.buf += chunk
    head, self.buf = self.buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    n = int(headers.get("content-length", 0))
    while len(self.buf) < n:
      chunk = self.sock.recv(65536)
      if not chunk:
        break
      self.buf += chunk
    body, self.buf = self.buf[:n], self.buf[n:]
    return status, headers, json.loads(body) if body else None

  def closed(self) -> bool:
    try:
      return self.buf == b"" and self.sock.recv(1) == b""
    except OSError:
      return True

  def close(self):
    self.sock.close()


def retrieve_bytes(body: bytes, extra: str = "") -> bytes:
  return (f"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


GOOD = json.dumps({"queries": ["Apollo 11 lunar module Eagle"], "topk": 1}).encode()


# --------------------------------------------------------------------------------------------
# Many clients
# --------------------------------------------------------------------------------------------
def test_200_concurrent_requests_are_all_answered(bm25):
  slow = Slow(bm25, delay=0.3)   # the first search holds the worker while the others connect
  srv = serve(slow)
  try:
    n, start = 200, threading.Barrier(200)
    results = [None] * n

    def client(i):
      start.wait()
      try:
        results[i] = post(srv, {"queries": [f"Aristotle Lyceum {i}"], "topk": 1})
      except OSError as e:
        results[i] = (type(e).__name__, str(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
      t.start()
    for t in threads:
      t.join(120)
    failed = [r for r in results if r is None or r[0] != 200]
    assert not failed, f"{len(failed)} of {n} failed, e.g. {failed[:3]}"
    assert all(len(r[1]["result"]) == 1 and len(r[1]["result"][0]) == 1 for r in results)
    assert len(slow.calls) < n   # merged into batched searches
  finally:
    srv.shutdown()
    srv.server_close()


# --------------------------------------------------------------------------------------------
# A bad query fails only its own request
# --------------------------------------------------------------------------------------------
def test_lone_surrogate_gets_400_and_merged_requests_still_succeed(bm25):
  slow = Slow(bm25, delay=0.3)
  srv = serve(slow)
  try:
    bad = b'{"queries": ["\\ud800"], "topk": 1}'
    results = {}

    def client(name, body):
      results[name] = post(srv, body)

    threads = [threading.Thread(target=client, args=(f"good{i}", {"queries": ["Achilles heel"],
                                                                   "topk": 1})) for i in range(4)]
    threads.insert(2, threading.Thread(target=client, args=("bad", bad)))
    for t in threads:
      t.start()
      time.sleep(0.02)
    for t in threads:
      t.join(60)
    status, ans = results.pop("bad")
    assert status == 400 and "'queries'[0]" in ans["error"] and "surrogate" in ans["error"]
    for status, ans in results.values():
      assert status == 200 and ans["result"][0][0]["contents"].startswith('"Achilles')
  finally:
    srv.shutdown()
    srv.server_close()


def test_in_process_search_names_the_bad_query(bm25):
  with pytest.raises(ValueError, match=r"queries\[1\].*surrogate"):
    bm25.search(["fine", "\ud800"], 1)


def test_failed_merged_search_is_retried_per_request(bm25):
  slow = Slow(bm25, delay=0.3, bad="BOOM")
  srv = serve(slow)
  try:
    results = {}

    def client(name, q):
      results[name] = post(srv, {"queries": [q], "topk": 1})

    names = ["Alaska purchase", "Algeria Sahara", "BOOM", "Andorra Pyrenees", "albedo of snow"]
    threads = [threading.Thread(target=client, args=(q, q)) for q in names]
    for t in threads:
      t.start()
      time.sleep(0.02)
    for t in threads:
      t.join(60)
    assert max(slow.calls) > 1            # some requests were merged with the bad one ...
    status, ans = results.pop("BOOM")
    assert status == 500 and "cannot encode" in ans["error"]
    for q, (status, ans) in results.items():  # ... and only the bad one failed
      assert status == 200, (q, ans)
      assert ans["result"][0][0]["id"] == bm25.search([q], 1)[0][0]["id"]
  finally:
    srv.shutdown()
    srv.server_close()


# --------------------------------------------------------------------------------------------
# Keep-alive never desyncs after an error answer
# --------------------------------------------------------------------------------------------
def raw_request(method: str, path: str, body: bytes) -> bytes:
  return (f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
          .encode() + body)


SMUGGLED = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"   # a body that looks like a request


@pytest.mark.parametrize("first,status", [
    (raw_request("POST", "/nope", SMUGGLED), 404),     # 404 with a body: drained
    (raw_request("GET", "/health", SMUGGLED), 400),    # GET with a body: drained, 400
    (raw_request("GET", "/nope", SMUGGLED), 400),
    (retrieve_bytes(b"{not json"), 400),               # a 400 after the body was read
    (retrieve_bytes(b'{"queries": ["a"], "topk": 0}'), 400),
    (retrieve_bytes(json.dumps({"queries": ["a"] * 9}).encode()), 413),
])
def test_error_answers_keep_the_connection_in_sync(server, first, status):
  c = Raw(server)
  try:
    c.send(first)
    got, _, ans = c.answer()
    assert got == status and "error" in ans
    c.send(retrieve_bytes(GOOD))     # the next request on the same connection is itself
    got, _, ans = c.answer()
    assert got == 200 and ans["result"][0][0]["contents"].startswith('"Apollo 11"')
  finally:
    c.close()


@pytest.mark.parametrize("first,status", [
    # 411: no Content-Length, so where the body ends is unknown: answer and close
    (b"POST /retrieve HTTP/1.1\r\nHost: x\r\n\r\n"
     b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 411),
    (b"POST /retrieve HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"5\r\nhello\r\n0\r\n\r\n", 411),
    (b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}", 400),
    (b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 1e3\r\n\r\n{}", 400),
    (b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: \xc2\xb2\r\n\r\n{}", 400),
    (b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
     400),
    (b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"9" * 40 + b"\r\n\r\n{}", 400),
])
def test_unknown_body_length_answers_then_closes(server, first, status):
  c = Raw(server)
  try:
    c.send(first)
    got, headers, ans = c.answer()
    assert got == status and "error" in ans
    assert headers.get("connection", "").lower() == "close"
    assert c.closed()                 # nothing after it is parsed as a request
  finally:
    c.close()


def test_body_shorter_than_content_length_gets_400_and_close(bm25):
  srv = serve(bm25, Limits(max_body_bytes=20000, idle_timeout=0.5))
  c = Raw(srv)
  try:
    c.send(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"queries\"")
    c.sock.shutdown(socket.SHUT_WR)   # the client stops sending
    got, headers, ans = c.answer()
    assert got == 400 and "body ended after 10 of 100 bytes" in ans["error"]
    assert headers.get("connection", "").lower() == "close"
  finally:
    c.close()
    srv.shutdown()
    srv.server_close()


# --------------------------------------------------------------------------------------------
# 413 before the body is read reaches the client as 413, and the client does not retry it
# --------------------------------------------------------------------------------------------
def test_413_reaches_a_client_still_sending_its_body(server):
  big = json.dumps({"queries": ["x"], "pad": "y" * 3_000_000}).encode()
  c = Raw(server)
  try:
    c.send(retrieve_bytes(big))       # blocks until the server has read (drained) all of it
    got, headers, ans = c.answer()
    assert got == 413 and "exceeds 20000" in ans["error"]
    assert headers.get("connection", "").lower() == "close"
  finally:
    c.close()


def test_http_client_gets_413_once_without_retrying(server):
  hits = []
  orig = server.RequestHandlerClass.do_POST

  def counting(self):
    hits.append(self.path)
    orig(self)

  server.RequestHandlerClass.do_POST = counting
  try:
    client = HttpRetriever("http://%s:%d" % server.server_address[:2], timeout=20, retries=3,
                           backoff=0.01)
    with pytest.raises(RetrieverError, match=r"\(413\)"):
      client.search(["x"] * 9, 1)          # too many queries: 413 after the body is read ...
    with pytest.raises(RetrieverError, match=r"\(413\)"):
      client.search(["q " * 1_500_000], 1)  # ... and before a 3 MB body is read
    assert len(hits) == 2                  # one try each: 4xx is not retried
  finally:
    server.RequestHandlerClass.do_POST = orig


# --------------------------------------------------------------------------------------------
# Malformed numbers and nesting give 400, and the server stays up
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("body,needle", [
    (b'{"queries": ["a"], "topk": ' + b"7" * 5000 + b"}", "not valid JSON"),
    (b'{"queries": ["a"], "topk": 1' + b"0" * 400 + b"}", "topk"),
    (b'{"queries": ["a"], "topk": 1e999}', "topk"),
    (b'{"queries": ["a"], "topk": NaN}', "topk"),
    (b'{"queries": ["a"], "topk": 2.0}', "topk"),
    (b'{"queries": ["a"], "x": ' + b"[" * 100000 + b"]" * 100000 + b"}", "nested too deeply"),
    (b'{"queries": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested too deeply"),
    (b'\xff\xfe{"queries": []}', "UTF-8"),
])
def test_malformed_numbers_and_nesting_get_400(bm25, body, needle):
  srv = serve(bm25, Limits(max_body_bytes=1 << 20))
  try:
    status, ans = post(srv, body)
    assert status == 400 and needle in ans["error"], ans
    assert post(srv, GOOD)[0] == 200
  finally:
    srv.shutdown()
    srv.server_close()
