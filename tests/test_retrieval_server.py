"""The HTTP server end to end on localhost with a real HTTP client, and the CLI."""
import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from retrieval import index as index_lib
from retrieval.client import HttpRetriever
from retrieval.corpus import default_corpus_path
from retrieval.search import load_retriever
from retrieval.server import Limits, make_server

LIMITS = Limits(max_queries=8, max_query_chars=200, max_topk=10, max_body_bytes=20000)


@pytest.fixture(scope="module")
def bm25_dir(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("bm25"))
  index_lib.build_bm25(default_corpus_path(), out, progress=False)
  return out


class CountingRetriever:
  """The real retriever, slowed on its first call so concurrent requests queue up behind it."""

  def __init__(self, inner):
    self.inner, self.meta, self.calls = inner, inner.meta, 0

  def search(self, queries, topk):
    self.calls += 1
    if self.calls == 1:
      time.sleep(0.5)
    return self.inner.search(queries, topk)


@pytest.fixture(scope="module")
def server(bm25_dir):
  retriever = CountingRetriever(load_retriever(bm25_dir))
  srv = make_server(retriever, "127.0.0.1", 0, LIMITS)
  thread = threading.Thread(target=srv.serve_forever, daemon=True)
  thread.start()
  yield srv, retriever
  srv.shutdown()
  srv.server_close()


def request(srv, method, path, body=None, headers=None):
  conn = http.client.HTTPConnection(*srv[0].server_address[:2], timeout=30)
  data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
  conn.request(method, path, body=data, headers=headers or {"Content-Type": "application/json"})
  resp = conn.getresponse()
  out = resp.status, json.loads(resp.read().decode())
  conn.close()
  return out


def test_response_format_with_scores(server):
  status, ans = request(server, "POST", "/retrieve",
                        {"queries": ["Apollo 11 lunar module Eagle", "aardvark burrow"],
                         "topk": 3, "return_scores": True})
  assert status == 200 and list(ans) == ["result"] and len(ans["result"]) == 2
  for hits in ans["result"]:
    assert len(hits) == 3
    for hit in hits:
      assert set(hit) == {"document", "score"} and isinstance(hit["score"], float)
      assert set(hit["document"]) == {"id", "contents"}
      assert hit["document"]["contents"].startswith('"') and '"\n' in hit["document"]["contents"]
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
  assert ans["result"][0][0]["document"]["contents"].startswith('"Apollo 11"\n')
  assert ans["result"][1][0]["document"]["contents"].startswith('"Aardvark"\n')


def test_response_format_without_scores(server):
  status, ans = request(server, "POST", "/retrieve", {"queries": ["aardwolf"], "topk": 2,
                                                      "return_scores": False})
  assert status == 200
  assert [set(d) for d in ans["result"][0]] == [{"id", "contents"}] * 2


@pytest.mark.parametrize("body,status,needle", [
    (b"{not json", 400, "JSON"),
    ([1, 2], 400, "object"),
    ({"queries": "one string"}, 400, "queries"),
    ({"queries": ["ok", 3]}, 400, "queries"),
    ({"queries": ["ok"], "topk": "3"}, 400, "topk"),
    ({"queries": ["ok"], "topk": 0}, 400, "topk"),
    ({"queries": ["ok"], "topk": 11}, 400, "topk"),
    ({"queries": ["ok"], "return_scores": "yes"}, 400, "return_scores"),
    ({"queries": ["q"] * 9}, 413, "too many queries"),
    ({"queries": ["x" * 201]}, 413, "longer than"),
    ({"queries": ["x " * 12000]}, 413, "exceeds"),
])
def test_bad_requests_get_4xx_and_server_stays_up(server, body, status, needle):
  got, ans = request(server, "POST", "/retrieve", body)
  assert got == status and needle in ans["error"]
  assert request(server, "GET", "/health")[0] == 200


def test_unknown_paths_and_health(server):
  assert request(server, "GET", "/nope")[0] == 404
  assert request(server, "POST", "/nope", {"queries": []})[0] == 404
  status, health = request(server, "GET", "/health")
  assert status == 200 and health["status"] == "ok" and health["num_passages"] > 3000
  assert request(server, "POST", "/retrieve", {"queries": []}) == (200, {"result": []})


def test_concurrent_requests_are_batched(server, bm25_dir):
  srv, counting = server
  want = load_retriever(bm25_dir)
  queries = ["Alabama state capital", "Aristotle Lyceum", "albedo of snow", "Algeria Sahara",
             "Andorra Pyrenees", "Achilles heel", "autism diagnosis", "Alaska purchase"]
  results = [None] * len(queries)

  def worker(i):
    results[i] = request(server, "POST", "/retrieve", {"queries": [queries[i]], "topk": 2,
                                                       "return_scores": True})

  counting.calls = 0   # the next search sleeps, so the others queue behind it
  threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(queries))]
  for t in threads:
    t.start()
    time.sleep(0.01)
  for t in threads:
    t.join()
  assert counting.calls < len(queries)   # merged into fewer searches than requests
  for q, (status, ans) in zip(queries, results):
    assert status == 200
    assert [h["document"]["id"] for h in ans["result"][0]] == [
        d["id"] for d in want.search([q], 2)[0]]


def test_http_retriever_matches_in_process(server, bm25_dir):
  host, port = server[0].server_address[:2]
  client = HttpRetriever(f"http://{host}:{port}", timeout=10, retries=1, backoff=0.01)
  queries = ["Amphibian metamorphosis", "Ayn Rand novel"]
  got, want = client.search(queries, 3), load_retriever(bm25_dir).search(queries, 3)
  assert [[d["id"] for d in r] for r in got] == [[d["id"] for d in r] for r in want]
  assert got[0][0]["title"] == want[0][0]["title"] and got[0][0]["text"] == want[0][0]["text"]
  assert abs(got[0][0]["score"] - want[0][0]["score"]) < 1e-5


def test_cli_serve_subprocess(bm25_dir):
  import socket
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  cmd = [sys.executable, "-m", "ssp_jax.cli", "retrieve", "serve", "--index", bm25_dir,
         "--port", str(port)]
  proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
  try:
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
      try:
        with urllib.request.urlopen(url + "/health", timeout=1) as r:
          assert json.loads(r.read())["status"] == "ok"
          break
      except OSError:
        assert proc.poll() is None, proc.stdout.read().decode()
        time.sleep(0.1)
    docs = HttpRetriever(url, timeout=10, retries=0).search(["Apollo 8 Christmas Eve"], 1)
    assert docs[0][0]["title"] == "Apollo 8"
  finally:
    proc.terminate()
    proc.wait(10)


def test_closed_server_ends_its_connection_threads():
  """A closed server's connection threads end (they used to block on its queue for the life of
  the process: ~100 of them by the end of the test suite)."""
  import threading
  import time
  import urllib.request
  from http.server import BaseHTTPRequestHandler

  from retrieval.server import PooledHTTPServer

  class Ok(BaseHTTPRequestHandler):
    def do_GET(self):
      self.send_response(200)
      self.end_headers()
      self.wfile.write(b"ok")

    def log_message(self, *args):
      pass

  srv = PooledHTTPServer(("127.0.0.1", 0), Ok)
  t = threading.Thread(target=srv.serve_forever, daemon=True)
  t.start()
  url = f"http://127.0.0.1:{srv.server_address[1]}/"
  for _ in range(4):
    assert urllib.request.urlopen(url, timeout=5).read() == b"ok"
  assert srv._threads >= 1
  srv.shutdown()
  srv.server_close()
  deadline = time.time() + 5
  while srv._threads and time.time() < deadline:
    time.sleep(0.05)
  assert srv._threads == 0


def test_server_close_ends_the_search_worker(bm25_dir):
  """The worker thread holds the retriever (index and encoder): a closed server must let it go,
  after finishing the searches already queued."""
  before = {t.ident for t in threading.enumerate() if t.name == "retrieval-worker"}
  srv = make_server(load_retriever(bm25_dir), "127.0.0.1", 0, LIMITS)
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  status, out = request((srv,), "POST", "/retrieve", {"queries": ["capital"], "topk": 1})
  assert status == 200 and len(out["result"]) == 1
  worker = [t for t in threading.enumerate()
            if t.name == "retrieval-worker" and t.ident not in before]
  assert len(worker) == 1
  srv.shutdown()
  srv.server_close()
  worker[0].join(timeout=5)
  assert not worker[0].is_alive()
