"""HttpRetriever: retries with back-off, then RetrieverError; 4xx fails at once."""
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from retrieval.base import RetrieverError
from retrieval.client import HttpRetriever

GOOD = {"result": [[{"document": {"id": "7", "contents": '"Aardvark"\nAn aardvark digs.'},
                     "score": 0.5}]]}


class Flaky:
  """A real local HTTP server answering with a scripted list of (status, body, delay)."""

  def __init__(self, script):
    self.script, self.hits = list(script), 0
    owner = self

    class H(BaseHTTPRequestHandler):
      def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        status, body, delay = owner.script[min(owner.hits, len(owner.script) - 1)]
        owner.hits += 1
        time.sleep(delay)
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
          self.send_response(status)
          self.send_header("Content-Length", str(len(data)))
          self.end_headers()
          self.wfile.write(data)
        except OSError:
          pass

      def log_message(self, *a):
        pass

    self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    self.srv.daemon_threads = True
    threading.Thread(target=self.srv.serve_forever, daemon=True).start()
    self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]

  def close(self):
    self.srv.shutdown()
    self.srv.server_close()


def test_retries_5xx_then_succeeds():
  srv = Flaky([(500, {"error": "boom"}, 0), (503, b"down", 0), (200, GOOD, 0)])
  try:
    docs = HttpRetriever(srv.url, timeout=5, retries=2, backoff=0.01).search(["aardvark"], 1)
    assert srv.hits == 3
    assert docs == [[{"id": "7", "title": "Aardvark", "text": "An aardvark digs.",
                      "contents": '"Aardvark"\nAn aardvark digs.', "score": 0.5}]]
  finally:
    srv.close()


def test_gives_up_after_last_retry_with_backoff():
  srv = Flaky([(500, {"error": "boom"}, 0)])
  try:
    t0 = time.perf_counter()
    with pytest.raises(RetrieverError, match="after 3 tries.*500"):
      HttpRetriever(srv.url, timeout=5, retries=2, backoff=0.1).search(["q"], 1)
    assert srv.hits == 3
    assert time.perf_counter() - t0 >= 0.1 + 0.2   # backoff * (1 + 2)
  finally:
    srv.close()


def test_timeout_is_retried_then_fails():
  srv = Flaky([(200, GOOD, 1.0)])
  try:
    with pytest.raises(RetrieverError, match="after 2 tries"):
      HttpRetriever(srv.url, timeout=0.2, retries=1, backoff=0.01).search(["q"], 1)
    assert srv.hits == 2
  finally:
    srv.close()


def test_4xx_is_not_retried():
  srv = Flaky([(400, {"error": "'topk' must be an integer"}, 0)])
  try:
    with pytest.raises(RetrieverError, match="rejected.*400.*topk"):
      HttpRetriever(srv.url, timeout=5, retries=3, backoff=0.01).search(["q"], 1)
    assert srv.hits == 1
  finally:
    srv.close()


def test_connection_refused_and_malformed_answers():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]   # closed again: nothing listens here
  with pytest.raises(RetrieverError, match="failed after 2 tries"):
    HttpRetriever(f"http://127.0.0.1:{port}", timeout=1, retries=1, backoff=0.01).search(["q"], 1)
  srv = Flaky([(200, {"result": []}, 0)])
  try:
    with pytest.raises(RetrieverError, match="malformed"):
      HttpRetriever(srv.url + "/retrieve", timeout=5, retries=0).search(["q"], 1)
  finally:
    srv.close()
