"""A real HTTP server on localhost that speaks the OpenAI `/v1/chat/completions` API, for tests
of `ssp_jax.ssp.remote.OpenAIChat` and of an external judge / RAG verifier.

  with ChatStub(reply=lambda messages: "Correct") as stub:
    chat = OpenAIChat(stub.url, "judge-model")
    ...
    stub.requests        # the JSON bodies received, in arrival order

Knobs (attributes, changeable while it runs): `reply(messages) -> str`, `fail_next` (answer the
next N requests with HTTP 503), `delay_s` (sleep before answering), `malformed` (answer 200 with
a body that has no `choices`), `status` (answer every request with this HTTP code when set).
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional


class ChatStub:
  def __init__(self, reply: Callable[[list], str] = lambda messages: "Correct"):
    self.reply = reply
    self.fail_next, self.delay_s, self.malformed = 0, 0.0, False
    self.status: Optional[int] = None
    self.requests: list[dict] = []
    self.lock = threading.Lock()
    stub = self

    class Handler(BaseHTTPRequestHandler):
      def log_message(self, *args):
        pass

      def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with stub.lock:
          stub.requests.append(dict(body, _path=self.path))
          fail = stub.fail_next > 0
          stub.fail_next -= int(fail)
        if stub.delay_s:
          time.sleep(stub.delay_s)
        if fail or stub.status:
          return self._send(stub.status or 503, {"error": "unavailable"})
        if stub.malformed:
          return self._send(200, {"object": "chat.completion", "choices": []})
        text = stub.reply(body["messages"])
        self._send(200, {"object": "chat.completion", "model": body["model"],
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": text}}]})

      def _send(self, code: int, obj: dict):
        data = json.dumps(obj).encode()
        try:
          self.send_response(code)
          self.send_header("Content-Type", "application/json")
          self.send_header("Content-Length", str(len(data)))
          self.end_headers()
          self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):   # the client timed out and left
          pass

    self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.server.daemon_threads = True
    self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
    self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

  def __enter__(self) -> "ChatStub":
    self.thread.start()
    return self

  def __exit__(self, *exc) -> None:
    self.server.shutdown()
    self.server.server_close()
