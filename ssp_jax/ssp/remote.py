"""`OpenAIChat`: a judge or RAG verifier served beside the job by an OpenAI-compatible
chat-completions endpoint (vLLM, SGLang, JetStream; the original SSP code serves its
Qwen2.5-32B-Instruct judge with vLLM and calls it through the OpenAI client).

  chat = OpenAIChat("http://judge-host:8000/v1", "Qwen/Qwen2.5-32B-Instruct",
                    api_key=os.environ["OPENAI_API_KEY"])
  texts = chat.generate_text([messages_a, messages_b], max_new_tokens=10, temperature=0.1)

One `POST {url}/chat/completions` per message list with `{"model", "messages", "max_tokens",
"temperature"}` (and `Authorization: Bearer <api_key>` when a key is given), at most
`max_concurrency` in flight; the replies' `choices[0].message.content` come back in the order of
the inputs.

Nothing can hold a call forever (`http_deadline.post`): each call (connect, send, every read,
all its retries) ends by `call_deadline_s`, even against a server that drips bytes; and the
calls of one training step (`set_step`) share `step_deadline_s` of endpoint time, after which
the step's remaining calls are not made (`counts["deadline_skipped"]`). A reply longer than
`max_reply_bytes` is a failure, read no further.

Connection errors, timeouts and 5xx answers are retried `retries` times with exponential
back-off; 429 and 503 with a `Retry-After` header (seconds or an HTTP date) are retried after
that delay (at most `max_retry_after_s`, and only when the deadline leaves time for it). Any
other 4xx (unknown model, bad key, bad request), an oversized or malformed reply, a spent
deadline, or an endpoint that stays down raises `RemoteError`, and `generate_text` raises it for
the whole batch. The callers decide what a failure means: RAG verification rejects the batch's
questions (fails closed), the judge counts the answers as not judged correct (`judge/failed`)
and the step goes on.

On a multi-host run only process 0 calls the endpoint and broadcasts the texts (and any error),
so every process sees the same answers (`ssp_jax.rollout.multihost.broadcast_from_first`).
Sampling on the server is not seeded: a resumed run may draw different judge replies.
"""
from __future__ import annotations

import concurrent.futures
import http.client
import json
import math
import os
import re
import threading
import time
from typing import Optional, Sequence

from ssp_jax.rollout import multihost
from ssp_jax.ssp import http_deadline

Messages = list[dict]
# per-step counters (`counts`), logged as judge/<name> next to the judge's asked/correct/failed
COUNT_KEYS = ("http_retries", "rate_limited", "call_deadline", "deadline_skipped",
              "reply_too_large")


class RemoteError(RuntimeError):
  """The chat endpoint failed (down after the retries, a 4xx, a deadline, a bad reply)."""

  def __init__(self, message: str, status: Optional[int] = None):
    super().__init__(message)
    self.status = status          # the HTTP status of a rejected request, else None


class StepDeadlineError(RemoteError):
  """The step's endpoint time (`step_deadline_s`) is spent; the call was cut or not made."""


def is_url(source: str) -> bool:
  """True for an `http://` / `https://` endpoint (a judge or verifier `source`)."""
  return source.startswith(("http://", "https://"))


def check_key_env_name(env_name: str) -> None:
  """ValueError unless `env_name` can name an environment variable (a key pasted into
  `ssp.judge.api_key_env` would be saved in config.json; the message does not echo it)."""
  if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env_name):
    raise ValueError("config.ssp.judge.api_key_env must be the NAME of an environment variable "
                     "(e.g. OPENAI_API_KEY), not the key itself")


def api_key(env_name: str, environ=os.environ) -> str:
  """The API key in the environment variable `env_name` ("" for no name = no key); ValueError
  naming the config field when the variable is unset or the name is not a variable's name (the
  key itself pasted in: then nothing of it is echoed)."""
  if not env_name:
    return ""
  check_key_env_name(env_name)
  key = environ.get(env_name, "")
  if not key:
    shown = env_name if re.fullmatch(r"[A-Z_][A-Z0-9_]*", env_name) else "the variable it names"
    raise ValueError(f"config.ssp.judge.api_key_env: {shown} is not set in the environment; "
                     "export it (the key) before starting, or set "
                     "--config.ssp.judge.api_key_env= for no key")
  return key


def _one_line(raw: bytes, n: int = 300) -> str:
  return " ".join(raw.decode("utf-8", "replace").split())[:n]


class OpenAIChat:
  """A `rag.TextGenerator` over an OpenAI-compatible `/chat/completions` endpoint.

  Args:
    url: the API base, e.g. `http://host:8000/v1` (`/chat/completions` is appended; a URL that
      already ends with it is used as is). Credentials in it are refused: use `api_key`.
    model: the served model's name (the request's `model` field).
    timeout_s: seconds any one socket operation may wait (connect, a read).
    retries: extra tries after a connection error, timeout, 5xx, or 429.
    max_concurrency: requests in flight at once.
    backoff_s: sleep before retry k is backoff_s * 2**(k - 1) (without a Retry-After).
    call_deadline_s: total seconds per call, retries and their waits included.
    step_deadline_s: endpoint seconds per step (since `set_step`; without it, per
      `generate_text`); 0 = no limit.
    max_reply_bytes: longest reply body accepted.
    max_retry_after_s: longest `Retry-After` wait honoured (a longer one waits this long).
    api_key: sent as `Authorization: Bearer ...` when not empty; never logged or in errors.
  """

  def __init__(self, url: str, model: str, *, timeout_s: float = 30.0, retries: int = 3,
               max_concurrency: int = 32, backoff_s: float = 0.5, call_deadline_s: float = 120.0,
               step_deadline_s: float = 0.0, max_reply_bytes: int = 1 << 20,
               max_retry_after_s: float = 60.0, api_key: str = ""):
    if not is_url(url):
      raise ValueError(f"OpenAIChat url {url!r} must start with http:// or https://")
    bad = http_deadline.credentials_in(url)
    if bad:   # the URL is not echoed: it holds a secret
      raise ValueError(f"the OpenAIChat url has credentials in it ({bad}); remove them and pass "
                       "the key as api_key (config: ssp.judge.api_key_env)")
    if not model:
      raise ValueError("OpenAIChat needs the served model's name (config.ssp.judge.model)")
    if max_concurrency < 1:
      raise ValueError(f"OpenAIChat max_concurrency={max_concurrency} must be >= 1")
    if call_deadline_s <= 0 or max_reply_bytes < 1:
      raise ValueError("OpenAIChat call_deadline_s and max_reply_bytes must be > 0")
    url = url.rstrip("/")
    self.url = url if url.endswith("/chat/completions") else url + "/chat/completions"
    self.model = model
    self.timeout_s, self.retries = float(timeout_s), int(retries)
    self.max_concurrency, self.backoff_s = int(max_concurrency), float(backoff_s)
    self.call_deadline_s, self.step_deadline_s = float(call_deadline_s), float(step_deadline_s)
    self.max_reply_bytes, self.max_retry_after_s = int(max_reply_bytes), float(max_retry_after_s)
    self._headers = {"Content-Type": "application/json"}
    if api_key:
      self._headers["Authorization"] = f"Bearer {api_key}"
    self._lock = threading.Lock()
    self._step: Optional[int] = None   # set by the game at each step (`set_step`)
    self._step_spent_s = 0.0           # endpoint time of this step's calls so far
    self.requests = 0        # HTTP requests sent (tries included), for tests and logs
    self.reset_counts()

  def __repr__(self) -> str:          # never the headers (the key)
    return f"OpenAIChat({self.url!r}, {self.model!r})"

  def set_step(self, step: int) -> None:
    """A new training step: its calls share a fresh `step_deadline_s`."""
    self._step, self._step_spent_s = int(step), 0.0

  def reset_counts(self) -> None:
    """Zeroes `counts` (per-step counters, `COUNT_KEYS`); `rewards.Judge` calls it each step."""
    self.counts = dict.fromkeys(COUNT_KEYS, 0)

  def _count(self, key: str, n: int = 1) -> None:
    with self._lock:
      self.counts[key] += n

  def generate_text(self, messages_list: Sequence[Messages], *, max_new_tokens: int,
                    temperature: float) -> list[str]:
    """One completion per message list, in order; raises `RemoteError` when any one fails."""
    msgs = [list(m) for m in messages_list]
    return multihost.broadcast_from_first(
        lambda: self._generate_all(msgs, int(max_new_tokens), float(temperature)))

  def _generate_all(self, msgs: list[Messages], max_new_tokens: int,
                    temperature: float) -> list[str]:
    if not msgs:
      return []
    bodies = [json.dumps({"model": self.model, "messages": m, "max_tokens": max_new_tokens,
                          "temperature": temperature}).encode("utf-8") for m in msgs]
    t0 = time.monotonic()
    spent = self._step_spent_s if self._step is not None else 0.0
    step_end = t0 + self.step_deadline_s - spent if self.step_deadline_s > 0 else math.inf
    try:
      if len(bodies) == 1 or self.max_concurrency == 1:
        return self._serial(bodies, step_end)
      return self._parallel(bodies, step_end)
    finally:
      self._step_spent_s += time.monotonic() - t0

  def _serial(self, bodies: list[bytes], step_end: float) -> list[str]:
    out = []
    for i, body in enumerate(bodies):
      try:
        out.append(self._complete(body, step_end))
      except StepDeadlineError:
        self._count("deadline_skipped", len(bodies) - i - 1)
        raise
    return out

  def _parallel(self, bodies: list[bytes], step_end: float) -> list[str]:
    pool = concurrent.futures.ThreadPoolExecutor(min(self.max_concurrency, len(bodies)))
    try:
      futs = [pool.submit(self._complete, b, step_end) for b in bodies]
      done, _ = concurrent.futures.wait(futs, return_when=concurrent.futures.FIRST_EXCEPTION)
      failed = [f for f in futs if f in done and f.exception() is not None]
      if failed:     # send no more; the calls in flight end by their own deadlines
        not_made = sum(f.cancel() for f in futs)
        err = failed[0].exception()
        if isinstance(err, StepDeadlineError):
          self._count("deadline_skipped", not_made)
        raise err
      return [f.result() for f in futs]
    finally:
      pool.shutdown(wait=False, cancel_futures=True)

  def _complete(self, body: bytes, step_end: float) -> str:
    now = time.monotonic()
    if now >= step_end:
      self._count("deadline_skipped")
      raise StepDeadlineError(f"chat endpoint {self.url}: the step's {self.step_deadline_s:g} s "
                              "of endpoint time (ssp.judge.step_deadline_s) is spent; call not "
                              "made")
    return _content(self._post(body, min(now + self.call_deadline_s, step_end), step_end),
                    self.url)

  def _post(self, body: bytes, deadline: float, step_end: float) -> dict:
    last, wait, tries, limited = "", 0.0, 0, False
    for attempt in range(self.retries + 1):
      if attempt:
        if time.monotonic() + wait >= deadline:
          raise self._out_of_time(deadline, step_end, tries,
                                  f"{last}; no time left to retry after {wait:g} s")
        time.sleep(wait)
        self._count("http_retries")
        self._count("rate_limited", int(limited))
      with self._lock:
        self.requests += 1
      tries += 1
      try:
        reply = http_deadline.post(self.url, body, self._headers, deadline=deadline,
                                   read_timeout_s=self.timeout_s,
                                   max_bytes=self.max_reply_bytes)
      except http_deadline.DeadlineExceeded:
        raise self._out_of_time(deadline, step_end, tries,
                                "no complete reply by the deadline") from None
      except http_deadline.ReplyTooLarge as e:
        self._count("reply_too_large")
        raise RemoteError(f"chat endpoint {self.url}: {e}; raise ssp.judge.max_reply_bytes if "
                          "replies this long are expected") from None
      except (OSError, http.client.HTTPException) as e:
        last = f"{type(e).__name__}: {getattr(e, 'reason', None) or e}"
        wait, limited = self.backoff_s * 2 ** attempt, False
        continue
      if 200 <= reply.status < 300:
        try:
          return json.loads(reply.body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
          raise RemoteError(f"malformed reply from {self.url} (not JSON): "
                            f"{reply.body[:200]!r}") from None
      detail = _one_line(reply.body)
      last = f"HTTP {reply.status}: {detail}"
      after = http_deadline.retry_after_s(reply.headers.get("Retry-After"))
      if reply.status in (429, 503) and after is not None:   # the server says when
        wait, limited = min(after, self.max_retry_after_s), True
        continue
      if reply.status == 429 or reply.status >= 500:
        wait, limited = self.backoff_s * 2 ** attempt, False
        continue
      hint = ("check the API key (ssp.judge.api_key_env)" if reply.status in (401, 403) else
              f"check the model name ({self.model!r}) against the server's")
      raise RemoteError(f"{self.url} rejected the request ({reply.status}): {detail}; {hint}",
                        status=reply.status)
    raise RemoteError(f"chat endpoint {self.url} failed after {tries} tries "
                      f"(timeout {self.timeout_s:g}s each): {last}; is the server up and "
                      f"serving {self.model!r}?")

  def _out_of_time(self, deadline: float, step_end: float, tries: int,
                   last: str) -> RemoteError:
    """The error of a call that its deadline (the call's, or the step's if sooner) ended."""
    self._count("call_deadline")
    if deadline >= step_end:
      return StepDeadlineError(f"chat endpoint {self.url}: the step's {self.step_deadline_s:g} s "
                               f"of endpoint time (ssp.judge.step_deadline_s) ran out after "
                               f"{tries} tries: {last}")
    return RemoteError(f"chat endpoint {self.url} gave no answer within the call's deadline "
                       f"(ssp.judge.call_deadline_s={self.call_deadline_s:g}s, {tries} tries, "
                       f"timeout {self.timeout_s:g}s each): {last}")


def probe(chat: OpenAIChat) -> None:
  """One tiny request (one token) to check, before a run loads its model, that the endpoint
  answers, accepts the key and serves the model; raises `RemoteError` otherwise."""
  chat._generate_all([[{"role": "user", "content": "Say OK."}]], 1, 0.0)


def _content(reply: dict, url: str) -> str:
  """`choices[0].message.content` of a chat-completions reply."""
  try:
    content = reply["choices"][0]["message"]["content"]
  except (KeyError, IndexError, TypeError):
    raise RemoteError(f"malformed reply from {url}: no choices[0].message.content in "
                      f"{json.dumps(reply)[:200]}") from None
  if not isinstance(content, str):
    raise RemoteError(f"malformed reply from {url}: content is {type(content).__name__}, "
                      "not a string")
  return content
