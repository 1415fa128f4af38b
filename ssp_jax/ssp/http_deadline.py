"""One HTTP POST that cannot outlive its deadline, for the judge client (`remote.OpenAIChat`).

`urllib`'s `timeout` bounds each socket operation, not the call: a server that drips one byte a
second restarts it with every byte and holds the caller (and the training step) forever.
`post()` bounds the whole exchange (connect, send, status line and headers, every body read) by
an absolute `time.monotonic()` deadline:
  * the socket timeout is the time left (at most `read_timeout_s`) when connecting and before
    each body read; the body is read in chunks (`read1`, at most 64 KiB each) with the clock
    checked between them;
  * a watchdog timer shuts the socket down at the deadline, which also ends a read blocked
    inside http.client's status-line/header parsing (a drip there never trips the timeout);
  * a reply body is read no further than `max_bytes` (a larger `Content-Length` is refused
    before any of the body is read): `ReplyTooLarge`. Error bodies are cut at `ERROR_BYTES`.

  reply = post(url, body, headers, deadline=time.monotonic() + 120, read_timeout_s=30,
               max_bytes=1 << 20)
"""
from __future__ import annotations

import dataclasses
import datetime
import email.utils
import http.client
import socket
import threading
import time
import urllib.parse
from typing import Optional

CHUNK = 64 << 10         # bytes per body read
ERROR_BYTES = 4096       # an error answer's body is only read this far (for the message)
# query parameters that carry a secret: a URL with one is refused (the key would be logged and
# saved in config.json); the key goes in a header instead (remote.OpenAIChat(api_key=...))
CREDENTIAL_PARAMS = ("key", "api_key", "apikey", "api-key", "access_token", "token", "password",
                     "secret")


class DeadlineExceeded(TimeoutError):
  """The deadline passed before the reply was complete."""


class ReplyTooLarge(ValueError):
  """The reply body is longer than `max_bytes`."""


@dataclasses.dataclass
class Reply:
  status: int
  headers: http.client.HTTPMessage
  body: bytes                       # at most max_bytes (2xx) or ERROR_BYTES (other statuses)


def post(url: str, body: bytes, headers: dict, *, deadline: float, read_timeout_s: float,
         max_bytes: int) -> Reply:
  """POSTs `body` to `url` and reads the reply, all before `deadline` (`time.monotonic()`).

  Raises DeadlineExceeded, ReplyTooLarge, or the OSError / http.client.HTTPException of a
  connection that failed for another reason (refused, reset, closed early)."""
  parts = urllib.parse.urlsplit(url)
  left = deadline - time.monotonic()
  if left <= 0:
    raise DeadlineExceeded("no time left before the request was sent")
  cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
  conn = cls(parts.hostname, parts.port, timeout=min(read_timeout_s, left))
  held: list[socket.socket] = []      # the socket, kept after http.client lets go of it
  fired = threading.Event()

  def abort() -> None:
    fired.set()
    for sock in held:
      try:
        sock.shutdown(socket.SHUT_RDWR)   # wakes a recv blocked in another thread
      except OSError:
        pass

  watchdog = threading.Timer(left, abort)
  watchdog.daemon = True
  watchdog.start()
  resp = None
  try:
    conn.connect()
    held.append(conn.sock)
    if fired.is_set():                   # the deadline passed while connecting
      abort()
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn.request("POST", path, body=body, headers=headers)
    resp = conn.getresponse()
    data = _read_body(resp, held[0], deadline, read_timeout_s, max_bytes)
    if fired.is_set():                   # a read cut short by the watchdog looks like EOF
      raise DeadlineExceeded("the reply was not complete at the deadline")
    return Reply(resp.status, resp.headers, data)
  except (OSError, http.client.HTTPException):
    if fired.is_set() or time.monotonic() >= deadline:
      raise DeadlineExceeded("the reply was not complete at the deadline") from None
    raise
  finally:
    watchdog.cancel()
    if resp is not None:
      resp.close()
    conn.close()


def _read_body(resp: http.client.HTTPResponse, sock: socket.socket, deadline: float,
               read_timeout_s: float, max_bytes: int) -> bytes:
  ok = 200 <= resp.status < 300
  limit = max_bytes if ok else min(max_bytes, ERROR_BYTES)
  if ok and resp.length is not None and resp.length > limit:
    raise ReplyTooLarge(f"reply of {resp.length} bytes (Content-Length) is over the limit of "
                        f"{limit} bytes; none of it was read")
  buf = bytearray()
  while True:
    left = deadline - time.monotonic()
    if left <= 0:
      raise DeadlineExceeded("the reply was not complete at the deadline")
    sock.settimeout(min(read_timeout_s, left))
    chunk = resp.read1(min(CHUNK, limit + 1 - len(buf)))
    if not chunk:
      return bytes(buf)
    buf += chunk
    if len(buf) > limit:
      if not ok:                      # only a message is wanted from an error answer
        return bytes(buf[:limit])
      raise ReplyTooLarge(f"reply is over the limit of {limit} bytes; read no further")


def retry_after_s(value: Optional[str]) -> Optional[float]:
  """Seconds to wait from a `Retry-After` header: delta-seconds or an HTTP date (a date in the
  past is 0); None when absent or unparsable."""
  v = (value or "").strip()
  if not v:
    return None
  if v.isdigit():
    return float(int(v))
  try:
    when = email.utils.parsedate_to_datetime(v)
  except (TypeError, ValueError, IndexError):
    return None
  if when.tzinfo is None:
    when = when.replace(tzinfo=datetime.timezone.utc)
  return max(0.0, (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds())


def credentials_in(url: str) -> str:
  """What in `url` carries credentials ("a user:password@ part", "a 'key=' query parameter"),
  or "" for none. Never the secret itself, so the caller can print it."""
  parts = urllib.parse.urlsplit(url)
  if "@" in parts.netloc:
    return "a user:password@ part"
  for name, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
    if name.lower() in CREDENTIAL_PARAMS:
      return f"a {name.lower()!r} query parameter"
  return ""
