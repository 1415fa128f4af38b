"""A real HTTP server on localhost that speaks the OpenAI `/v1/chat/completions` API, for tests
of `ssp_jax.ssp.remote.OpenAIChat` and of an external judge / RAG verifier.

  with ChatStub(reply=lambda messages: "Correct") as stub:
    chat = OpenAIChat(stub.url, "judge-model")
    ...
    stub.requests        # the JSON bodies received, in arrival order

Knobs (attributes, changeable while it runs): `reply(messages) -> str`, `fail_next` (answer the
next N requests with HTTP `fail_status`, 503 by default), `retry_after` (a `Retry-After` header
value sent with those failures and with `status` answers), `delay_s` (sleep before answering),
`malformed` (answer 200 with a body that has no `choices`), `status` (answer every request with
this HTTP code when set), `api_key` (when set, a request without `Authorization: Bearer
<api_key>` gets 401).

Misbehaviours: `drip_s` (send the answer one byte every drip_s seconds, from its status line on,
or from the body on with `drip_from="body"`), `reply_bytes` (answer 200 with a body of that
many bytes, streamed from a 64 KiB buffer so the stub itself stays small; with
`reply_length=False` without a Content-Length, ended by closing the connection).

Seen: `requests` (bodies), `auth` (Authorization headers, "" when absent), `times`
(`time.monotonic()` of each arrival).
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
    self.fail_next, self.fail_status, self.delay_s, self.malformed = 0, 503, 0.0, False
    self.status: Optional[int] = None
    self.retry_after: Optional[str] = None
    self.api_key: Optional[str] = None
    self.drip_s, self.drip_from = 0.0, "status"
    self.reply_bytes, self.reply_length = 0, True
    self.requests: list[dict] = []
    self.auth: list[str] = []
    self.times: list[float] = []
    self.lock = threading.Lock()
    stub = self

    class Handler(BaseHTTPRequestHandler):
      def log_message(self, *args):
        pass

      def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        auth = self.headers.get("Authorization", "")
        with stub.lock:
          stub.requests.append(dict(body, _path=self.path))
          stub.auth.append(auth)
          stub.times.append(time.monotonic())
          fail = stub.fail_next > 0
          stub.fail_next -= int(fail)
        if stub.delay_s:
          time.sleep(stub.delay_s)
        if stub.api_key is not None and auth != f"Bearer {stub.api_key}":
          return self._send(401, {"error": {"message": "Incorrect API key provided"}})
        if fail or stub.status:
          extra = {"Retry-After": stub.retry_after} if stub.retry_after is not None else {}
          return self._send(stub.fail_status if fail else stub.status,
                            {"error": "unavailable"}, extra)
        if stub.malformed:
          return self._send(200, {"object": "chat.completion", "choices": []})
        if stub.reply_bytes:
          return self._send_big(stub.reply_bytes, stub.reply_length)
        text = stub.reply(body["messages"])
        self._send(200, {"object": "chat.completion", "model": body["model"],
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": text}}]})

      def _send(self, code: int, obj: dict, extra: Optional[dict] = None):
        data = json.dumps(obj).encode()
        head = (f"HTTP/1.0 {code} X\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n"
                + "".join(f"{k}: {v}\r\n" for k, v in (extra or {}).items()) + "\r\n").encode()
        try:
          if stub.drip_s:
            if stub.drip_from == "body":
              self.wfile.write(head)
              self.wfile.flush()
              head = b""
            for i in range(len(head + data)):
              self.wfile.write((head + data)[i:i + 1])
              self.wfile.flush()
              time.sleep(stub.drip_s)
          else:
            self.wfile.write(head + data)
        except (BrokenPipeError, ConnectionResetError):   # the client timed out and left
          pass

      def _send_big(self, n: int, with_length: bool):
        chunk = b"x" * (64 << 10)
        head = "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
        head += f"Content-Length: {n}\r\n\r\n" if with_length else "\r\n"
        try:
          self.wfile.write(head.encode())
          while n > 0:
            self.wfile.write(chunk[:n])
            n -= len(chunk)
        except (BrokenPipeError, ConnectionResetError):   # the client stopped reading
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
