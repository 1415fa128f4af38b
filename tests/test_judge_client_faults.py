"""Fault drills on the judge / verifier endpoint client (`ssp_jax.ssp.remote.OpenAIChat`), each
against a REAL misbehaving HTTP server on 127.0.0.1 (`ssp_jax.testing.chat_stub.ChatStub`):
a server that drips one byte a second, 429/503 with Retry-After, a 50 MB reply, a bearer key
(never logged, never in config.json), a key in the URL, the start-up probe (`ssp-jax train`
exits 2 with one line) and the per-step deadline. Every test takes a few seconds at most."""
import datetime
import email.utils
import json
import logging
import os
import socket
import time
import tracemalloc

import pytest

from ssp_jax import cli
from ssp_jax.ssp import build, rag, remote, rewards
from ssp_jax.ssp.config import base_run_config
from ssp_jax.ssp.http_deadline import credentials_in, retry_after_s
from ssp_jax.ssp.remote import OpenAIChat, RemoteError, StepDeadlineError
from ssp_jax.ssp.validate import ConfigError, validate_config
from ssp_jax.testing.chat_stub import ChatStub

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(REPO, "configs", "tiny.py")
SECRET = "sk-test-0123456789abcdef-SECRET"
KEY_ENV = "SSP_JAX_TEST_JUDGE_KEY"


def chats(n):
  return [[{"role": "user", "content": f"q{i}"}] for i in range(n)]


def closed_port() -> int:
  s = socket.socket()
  s.bind(("127.0.0.1", 0))
  port = s.getsockname()[1]
  s.close()                       # nothing listens there now
  return port


def one_line_exit_2(rc, err):
  lines = [l for l in err.strip().splitlines() if l.strip()]
  assert rc == 2, err
  assert len(lines) == 1 and "Traceback" not in err, err
  return lines[0]


# -- a total deadline per call -------------------------------------------------------------------
@pytest.mark.parametrize("drip_from", ["status", "body"])
def test_dripping_server_ends_within_the_call_deadline(drip_from):
  """One byte a second never trips a 30 s socket timeout; the 2 s call deadline still ends the
  call (the old client waited for the whole reply, ~150 s here, or forever)."""
  with ChatStub() as stub:
    stub.drip_s, stub.drip_from = 1.0, drip_from
    chat = OpenAIChat(stub.url, "m", timeout_s=30.0, retries=3, call_deadline_s=2.0)
    t0 = time.monotonic()
    with pytest.raises(RemoteError, match=r"call_deadline_s=2s"):
      chat.generate_text(chats(1), max_new_tokens=4, temperature=0.0)
    took = time.monotonic() - t0
    assert 1.9 < took < 2.6, took
    assert chat.counts["call_deadline"] == 1 and len(stub.requests) == 1
    # the RAG check keeps failing closed, in the same bounded time
    t0 = time.monotonic()
    verdicts = rag.verify(chat, ["q"], ["Doc 1 (Title: a) a"], ["a"], max_new_tokens=8,
                          temperature=0.1)
    assert [v.reason for v in verdicts] == [rag.VERIFIER_ERROR]
    assert time.monotonic() - t0 < 2.6


# -- 429 / 503 with Retry-After ------------------------------------------------------------------
@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_waited_then_succeeds_and_is_counted(status):
  with ChatStub(lambda m: "Correct") as stub:
    stub.fail_next, stub.fail_status, stub.retry_after = 1, status, "1"
    chat = OpenAIChat(stub.url, "m", retries=3, backoff_s=0.01, call_deadline_s=10.0)
    assert chat.generate_text(chats(1), max_new_tokens=4, temperature=0.0) == ["Correct"]
    gap = stub.times[1] - stub.times[0]
    assert 0.95 < gap < 1.6, gap          # waited the server's 1 s, not the 0.01 s back-off
    assert chat.counts["rate_limited"] == 1 and chat.counts["http_retries"] == 1


def test_retry_after_beyond_the_deadline_fails_at_once_and_other_4xx_are_not_retried():
  with ChatStub() as stub:
    stub.fail_next, stub.fail_status, stub.retry_after = 1, 429, "30"
    chat = OpenAIChat(stub.url, "m", retries=3, backoff_s=0.01, call_deadline_s=3.0)
    t0 = time.monotonic()
    with pytest.raises(RemoteError, match="no time left to retry after 30 s"):
      chat.generate_text(chats(1), max_new_tokens=4, temperature=0.0)
    assert time.monotonic() - t0 < 1.0 and len(stub.requests) == 1
    for code in (400, 401, 404, 422):
      stub.status, n = code, len(stub.requests)
      with pytest.raises(RemoteError, match=rf"rejected the request \({code}\)") as e:
        chat.generate_text(chats(1), max_new_tokens=4, temperature=0.0)
      assert e.value.status == code and len(stub.requests) == n + 1
    stub.status, stub.retry_after = 429, None     # 429 without Retry-After: back-off, retried
    with pytest.raises(RemoteError, match=r"failed after 4 tries.*HTTP 429"):
      chat.generate_text(chats(1), max_new_tokens=4, temperature=0.0)


def test_retry_after_values():
  assert retry_after_s("7") == 7.0
  later = email.utils.format_datetime(
      datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=30), usegmt=True)
  assert 28.0 < retry_after_s(later) <= 30.0
  assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0     # in the past
  assert retry_after_s("soon") is None and retry_after_s(None) is None
  assert retry_after_s("-1") is None


# -- reply size cap ------------------------------------------------------------------------------
@pytest.mark.parametrize("with_length", [True, False])
def test_50mb_reply_is_a_counted_failure_and_memory_stays_bounded(with_length):
  with ChatStub() as stub:
    stub.reply_bytes, stub.reply_length = 50 << 20, with_length
    chat = OpenAIChat(stub.url, "m", retries=3, max_reply_bytes=1 << 20)
    tracemalloc.start()
    try:
      with pytest.raises(RemoteError, match="Content-Length.* none of it was read" if with_length
                         else "over the limit of 1048576 bytes; read no further"):
        chat.generate_text(chats(1), max_new_tokens=4, temperature=0.0)
      peak = tracemalloc.get_traced_memory()[1]
    finally:
      tracemalloc.stop()
    assert peak < 6 << 20, peak          # the cap and a chunk, not 50 MB
    assert chat.counts["reply_too_large"] == 1 and len(stub.requests) == 1   # not retried


# -- API key ---------------------------------------------------------------------------------------
def judge_config(url, **judge):
  c = base_run_config()
  c.workdir = "/tmp/unused"
  c.ssp.judge.source, c.ssp.judge.model = url, "served"
  for k, v in judge.items():
    c.ssp.judge[k] = v
  return c


def test_bearer_key_is_sent_and_never_logged(monkeypatch, caplog):
  monkeypatch.setenv(KEY_ENV, SECRET)
  caplog.set_level(logging.DEBUG)
  with ChatStub(lambda m: "Correct") as stub:
    stub.api_key = SECRET
    config = judge_config(stub.url, api_key_env=KEY_ENV, retries=0)
    validate_config(config)
    chat = build.chat_client(stub.url, config.ssp.judge)
    assert chat.generate_text(chats(2), max_new_tokens=4, temperature=0.0) == ["Correct"] * 2
    assert stub.auth == [f"Bearer {SECRET}"] * 2
    judge = rewards.Judge(chat)
    for status in (500, 401):           # failures are logged as warnings: without the key
      stub.status = status
      r, _ = rewards.solver_rewards(["<answer> x </answer>"], ["y"], ["q"],
                                    mode="em_then_judge", judge=judge)
      assert r == [0.0]
    assert judge.counts["failed"] == 2
  assert "judge failed" in caplog.text and SECRET not in caplog.text
  assert SECRET not in repr(chat) and SECRET not in str(config)


def test_key_reaches_the_server_from_the_cli_and_stays_out_of_config_json(monkeypatch, tmp_path,
                                                                          capsys, caplog):
  """The probe sends the key; a wrong one (401) is one line naming the field, without the key;
  config.json holds the variable's name only."""
  monkeypatch.setenv(KEY_ENV, SECRET)
  workdir = tmp_path / "run"
  with ChatStub() as stub:
    stub.api_key = SECRET + "-other"                   # the server wants another key
    rc = cli.main(["train", "--config", TINY, f"--config.workdir={workdir}",
                   "--config.ssp.reward.solver=em_then_judge",
                   f"--config.ssp.judge.source={stub.url}", "--config.ssp.judge.model=served",
                   f"--config.ssp.judge.api_key_env={KEY_ENV}"])
  line = one_line_exit_2(rc, capsys.readouterr().err)
  assert "config.ssp.judge.source" in line and "(401)" in line and "api_key_env" in line
  assert stub.auth and set(stub.auth) == {f"Bearer {SECRET}"}
  saved = (workdir / "config.json").read_text()
  assert json.loads(saved)["ssp"]["judge"]["api_key_env"] == KEY_ENV
  assert SECRET not in saved and SECRET not in line and SECRET not in caplog.text


@pytest.mark.parametrize("url,secret", [
    ("http://judge:{SECRET}@127.0.0.1:8000/v1", SECRET),
    ("http://127.0.0.1:8000/v1?api_key={SECRET}", SECRET),
    ("https://host/v1/chat/completions?key={SECRET}&x=1", SECRET)])
def test_url_with_credentials_is_refused_without_echoing_them(url, secret, tmp_path, capsys):
  url = url.format(SECRET=secret)
  assert credentials_in(url)
  with pytest.raises(ConfigError, match="api_key_env") as e:
    validate_config(judge_config(url))
  assert secret not in str(e.value)
  with pytest.raises(ValueError) as e:
    OpenAIChat(url, "m")
  assert secret not in str(e.value)
  workdir = tmp_path / "run"
  rc = cli.main(["train", "--config", TINY, f"--config.workdir={workdir}",
                 f"--config.ssp.rag.verifier={url}", "--config.ssp.judge.model=m"])
  line = one_line_exit_2(rc, capsys.readouterr().err)
  assert "config.ssp.rag.verifier" in line and secret not in line
  assert not (workdir / "config.json").exists()      # refused before anything is written
  assert not credentials_in("http://127.0.0.1:8000/v1?temperature=1")


def test_unset_key_variable_and_a_pasted_key_are_one_line(monkeypatch, tmp_path, capsys):
  monkeypatch.delenv(KEY_ENV, raising=False)
  base = ["train", "--config", TINY, f"--config.workdir={tmp_path / 'run'}",
          "--config.ssp.judge.source=http://127.0.0.1:1/v1", "--config.ssp.judge.model=m"]
  line = one_line_exit_2(cli.main(base + [f"--config.ssp.judge.api_key_env={KEY_ENV}"]),
                         capsys.readouterr().err)
  assert f"api_key_env: {KEY_ENV} is not set" in line
  line = one_line_exit_2(cli.main(base + [f"--config.ssp.judge.api_key_env={SECRET}"]),
                         capsys.readouterr().err)
  assert "NAME of an environment variable" in line and SECRET not in line


# -- start-up probe --------------------------------------------------------------------------------
def test_probe_unreachable_port_exits_2_before_the_model_loads(tmp_path, capsys):
  url = f"http://127.0.0.1:{closed_port()}/v1"
  t0 = time.monotonic()
  rc = cli.main(["train", "--config", TINY, f"--config.workdir={tmp_path / 'run'}",
                 "--config.ssp.reward.solver=em_then_judge",
                 f"--config.ssp.judge.source={url}", "--config.ssp.judge.model=m"])
  line = one_line_exit_2(rc, capsys.readouterr().err)
  assert "config.ssp.judge.source" in line and "start the server" in line
  assert time.monotonic() - t0 < 10


def test_probe_unknown_model_names_the_verifier_field(tmp_path, capsys):
  with ChatStub() as stub:
    stub.status = 404
    rc = cli.main(["train", "--config", TINY, f"--config.workdir={tmp_path / 'run'}",
                   f"--config.ssp.rag.verifier={stub.url}", "--config.ssp.judge.model=nope"])
    line = one_line_exit_2(rc, capsys.readouterr().err)
    assert "config.ssp.rag.verifier" in line and "(404)" in line
    assert "--config.ssp.judge.model" in line
    stub.status = None               # a healthy endpoint passes with one tiny request
    n = len(stub.requests)
    config = judge_config(stub.url, source="policy")
    config.ssp.rag.verifier = stub.url
    build.probe_endpoints(config)
    assert len(stub.requests) == n + 1 and stub.requests[-1]["max_tokens"] == 1


# -- per-step deadline -----------------------------------------------------------------------------
@pytest.mark.parametrize("concurrency,n,made,skipped", [(1, 5, 2, 3), (2, 6, 4, 2)])
def test_step_deadline_skips_the_remaining_calls(concurrency, n, made, skipped):
  """0.6 s per reply and 1 s of endpoint time per step: the calls in flight at 1 s are cut and
  the rest are not made; the judge scores them wrong and counts them failed (as any failure)."""
  with ChatStub(lambda m: "Correct") as stub:
    stub.delay_s = 0.6
    chat = OpenAIChat(stub.url, "m", retries=0, max_concurrency=concurrency,
                      step_deadline_s=1.0, call_deadline_s=30.0)
    judge = rewards.Judge(chat)
    chat.set_step(0)
    judge.reset_counts()
    t0 = time.monotonic()
    r, _ = rewards.solver_rewards([f"<answer> x{i} </answer>" for i in range(n)], ["y"] * n,
                                  ["q"] * n, mode="em_then_judge", judge=judge)
    assert time.monotonic() - t0 < 1.5
    assert r == [0.0] * n and judge.counts["failed"] == n
    assert judge.counts["deadline_skipped"] == skipped and len(stub.requests) == made
    # the step's budget is spent: a later call of the same step is not made at all
    t0 = time.monotonic()
    with pytest.raises(StepDeadlineError, match="step_deadline_s"):
      chat.generate_text(chats(3), max_new_tokens=4, temperature=0.0)
    assert time.monotonic() - t0 < 0.1 and len(stub.requests) == made
    assert chat.counts["deadline_skipped"] == skipped + 3
    chat.set_step(1)                  # the next step has its own budget
    judge.reset_counts()
    stub.delay_s = 0.0
    assert chat.generate_text(chats(2), max_new_tokens=4, temperature=0.0) == ["Correct"] * 2
    assert judge.counts["deadline_skipped"] == 0
