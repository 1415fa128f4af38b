"""`OpenAIChat`: a judge or RAG verifier served beside the job by an OpenAI-compatible
chat-completions endpoint (vLLM, SGLang, JetStream; the original SSP code serves its
Qwen2.5-32B-Instruct judge with vLLM and calls it through the OpenAI client).

  chat = OpenAIChat("http://judge-host:8000/v1", "Qwen/Qwen2.5-32B-Instruct")
  texts = chat.generate_text([messages_a, messages_b], max_new_tokens=10, temperature=0.1)

One `POST {url}/chat/completions` per message list with `{"model", "messages", "max_tokens",
"temperature"}`, at most `max_concurrency` in flight; the replies' `choices[0].message.content`
come back in the order of the inputs. Connection errors, timeouts and 5xx answers are retried
`retries` times with exponential back-off; a 4xx answer (unknown model, bad request) or a reply
without `choices[0].message.content` raises `RemoteError` at once, and so does an endpoint that
stays down. The callers decide what a failure means: RAG verification rejects the batch's
questions (fails closed), the judge counts the answers as not judged correct and the step goes on.

On a multi-host run only process 0 calls the endpoint and broadcasts the texts (and any error),
so every process sees the same answers (`ssp_jax.rollout.multihost.broadcast_from_first`).
Sampling on the server is not seeded: a resumed run may draw different judge replies.
"""
from __future__ import annotations

import concurrent.futures
import json
import time
import urllib.error
import urllib.request
from typing import Sequence

from ssp_jax.rollout import multihost

Messages = list[dict]


class RemoteError(RuntimeError):
  """The chat endpoint failed (down after the retries, a 4xx, or a malformed reply)."""


def is_url(source: str) -> bool:
  """True for an `http://` / `https://` endpoint (a judge or verifier `source`)."""
  return source.startswith(("http://", "https://"))


class OpenAIChat:
  """A `rag.TextGenerator` over an OpenAI-compatible `/chat/completions` endpoint.

  Args:
    url: the API base, e.g. `http://host:8000/v1` (`/chat/completions` is appended; a URL that
      already ends with it is used as is).
    model: the served model's name (the request's `model` field).
    timeout_s: seconds per HTTP request (a slower reply is a failed try).
    retries: extra tries after a connection error, timeout or 5xx answer.
    max_concurrency: requests in flight at once.
    backoff_s: sleep before retry k is backoff_s * 2**(k - 1).
  """

  def __init__(self, url: str, model: str, *, timeout_s: float = 30.0, retries: int = 3,
               max_concurrency: int = 32, backoff_s: float = 0.5):
    if not is_url(url):
      raise ValueError(f"OpenAIChat url {url!r} must start with http:// or https://")
    if not model:
      raise ValueError("OpenAIChat needs the served model's name (config.ssp.judge.model)")
    if max_concurrency < 1:
      raise ValueError(f"OpenAIChat max_concurrency={max_concurrency} must be >= 1")
    url = url.rstrip("/")
    self.url = url if url.endswith("/chat/completions") else url + "/chat/completions"
    self.model = model
    self.timeout_s, self.retries = float(timeout_s), int(retries)
    self.max_concurrency, self.backoff_s = int(max_concurrency), float(backoff_s)
    self.requests = 0        # HTTP requests sent (tries included), for tests and logs

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
    if len(bodies) == 1 or self.max_concurrency == 1:
      return [self._complete(b) for b in bodies]
    pool = concurrent.futures.ThreadPoolExecutor(min(self.max_concurrency, len(bodies)))
    try:
      return list(pool.map(self._complete, bodies))    # map keeps the input order
    finally:
      pool.shutdown(wait=False, cancel_futures=True)   # after a failure, send no more

  def _complete(self, body: bytes) -> str:
    return _content(self._post(body), self.url)

  def _post(self, body: bytes) -> dict:
    last = ""
    for attempt in range(self.retries + 1):
      if attempt:
        time.sleep(self.backoff_s * 2 ** (attempt - 1))
      req = urllib.request.Request(self.url, data=body, method="POST",
                                   headers={"Content-Type": "application/json"})
      self.requests += 1
      try:
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
          raw = resp.read()
      except urllib.error.HTTPError as e:
        detail = e.read().decode("utf-8", "replace")[:300]
        if 400 <= e.code < 500:
          raise RemoteError(f"{self.url} rejected the request ({e.code}): {detail}; check "
                            f"the model name ({self.model!r}) against the server's") from None
        last = f"HTTP {e.code}: {detail}"
        continue
      except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
        last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
        continue
      try:
        return json.loads(raw.decode("utf-8"))
      except (UnicodeDecodeError, json.JSONDecodeError):
        raise RemoteError(f"malformed reply from {self.url} (not JSON): "
                          f"{raw[:200]!r}") from None
    raise RemoteError(f"chat endpoint {self.url} failed after {self.retries + 1} tries "
                      f"(timeout {self.timeout_s:g}s each): {last}; is the server up and "
                      f"serving {self.model!r}?")


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
