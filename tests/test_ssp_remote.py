"""`OpenAIChat` against a real HTTP server on localhost (`ssp_jax.testing.chat_stub`)."""
import socket
import time

import pytest

from ssp_jax.ssp import rag, rewards
from ssp_jax.ssp.remote import OpenAIChat, RemoteError
from ssp_jax.testing.chat_stub import ChatStub


def echo_last(messages):
  return "echo: " + messages[-1]["content"]


def chats(n):
  return [[{"role": "system", "content": "be brief"}, {"role": "user", "content": f"q{i}"}]
          for i in range(n)]


def test_request_shape_and_order():
  with ChatStub(echo_last) as stub:
    # slower answers for early items: replies arrive out of order, results must not
    stub.reply = lambda m: (time.sleep(0.05 * (5 - int(m[-1]["content"][1:]) % 5)),
                            echo_last(m))[1]
    chat = OpenAIChat(stub.url, "served-32b", max_concurrency=4)
    out = chat.generate_text(chats(10), max_new_tokens=10, temperature=0.1)
  assert out == [f"echo: q{i}" for i in range(10)]
  assert len(stub.requests) == 10
  req = min(stub.requests, key=lambda r: r["messages"][-1]["content"])
  assert req["_path"] == "/v1/chat/completions"
  assert set(req) == {"model", "messages", "max_tokens", "temperature", "_path"}
  assert (req["model"], req["max_tokens"], req["temperature"]) == ("served-32b", 10, 0.1)
  assert req["messages"] == chats(1)[0]
  assert chat.generate_text([], max_new_tokens=5, temperature=0.0) == []


def test_retries_5xx_then_succeeds():
  with ChatStub(echo_last) as stub:
    stub.fail_next = 2
    chat = OpenAIChat(stub.url, "m", retries=3, backoff_s=0.01, max_concurrency=1)
    assert chat.generate_text(chats(1), max_new_tokens=4, temperature=0.0) == ["echo: q0"]
    assert chat.requests == 3 and len(stub.requests) == 3
    stub.fail_next = 5          # more failures than tries: a clear error
    with pytest.raises(RemoteError, match=r"failed after 4 tries.*HTTP 503"):
      chat.generate_text(chats(1), max_new_tokens=4, temperature=0.0)


def test_down_endpoint_raises_clear_error():
  s = socket.socket()
  s.bind(("127.0.0.1", 0))
  port = s.getsockname()[1]
  s.close()                     # nothing listens on this port
  chat = OpenAIChat(f"http://127.0.0.1:{port}/v1", "m", retries=2, backoff_s=0.01)
  with pytest.raises(RemoteError, match=r"failed after 3 tries.*is the server up"):
    chat.generate_text(chats(2), max_new_tokens=4, temperature=0.0)
  assert chat.requests >= 3


def test_slow_endpoint_times_out():
  with ChatStub(echo_last) as stub:
    stub.delay_s = 1.0
    chat = OpenAIChat(stub.url, "m", timeout_s=0.2, retries=1, backoff_s=0.01)
    t0 = time.perf_counter()
    with pytest.raises(RemoteError, match="timeout 0.2s"):
      chat.generate_text(chats(1), max_new_tokens=4, temperature=0.0)
    assert time.perf_counter() - t0 < 1.5       # two 0.2 s tries, not two full 1 s replies
    assert len(stub.requests) == 2


def test_malformed_reply_and_4xx_are_not_retried():
  with ChatStub(echo_last) as stub:
    stub.malformed = True
    chat = OpenAIChat(stub.url, "m", retries=3, backoff_s=0.01)
    with pytest.raises(RemoteError, match=r"malformed reply.*choices\[0\]"):
      chat.generate_text(chats(1), max_new_tokens=4, temperature=0.0)
    assert len(stub.requests) == 1
    stub.malformed, stub.status = False, 404
    with pytest.raises(RemoteError, match=r"rejected the request \(404\).*model name"):
      chat.generate_text(chats(1), max_new_tokens=4, temperature=0.0)
    assert len(stub.requests) == 2


def test_bad_arguments():
  with pytest.raises(ValueError, match="http"):
    OpenAIChat("judge:8000", "m")
  with pytest.raises(ValueError, match="judge.model"):
    OpenAIChat("http://x/v1", "")


def test_rag_fails_closed_and_judge_failures_are_counted():
  with ChatStub(lambda m: "Correct") as stub:
    chat = OpenAIChat(stub.url, "m", retries=0, backoff_s=0.01)
    judge = rewards.Judge(chat)
    # the judge turns EM misses into rewards
    r, _ = rewards.solver_rewards(["<answer> the author of Moby-Dick </answer>"],
                                  ["Herman Melville"], ["Who?"], mode="em_then_judge",
                                  judge=judge)
    answers = lambda: {k: judge.counts[k] for k in ("asked", "correct", "failed")}
    assert r == [1.0] and answers() == {"asked": 1, "correct": 1, "failed": 0}
    assert judge.counts["deadline_skipped"] == judge.counts["http_retries"] == 0
    stub.status = 500             # endpoint down from here on
    r, _ = rewards.solver_rewards(["<answer> x </answer>", "<answer> y </answer>"],
                                  ["a", "b"], ["q1", "q2"], mode="em_then_judge", judge=judge)
    assert r == [0.0, 0.0] and answers() == {"asked": 3, "correct": 1, "failed": 2}
    verdicts = rag.verify(chat, ["q1"], ["Doc 1 (Title: a) a"], ["a"], max_new_tokens=8,
                          temperature=0.1)
    assert [v.reason for v in verdicts] == [rag.VERIFIER_ERROR]
