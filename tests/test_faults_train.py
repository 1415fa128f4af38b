"""Issue 16 drills on `ssp-jax train`: each fault ends in one line and a clear exit code, never a
traceback, and never costs the completed steps. Real parts: the CLI on a tiny random HF
checkpoint with a BM25 index (the fixtures of test_ssp_train_cli), real tmpfs mounts for a
read-only or full disk (skipped where mounting is not allowed), real signals to a subprocess,
a real closed port for a dead retrieval server."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from ssp_jax import cli, train_cli
from test_ssp_train_cli import REPO, TINY, assets, fast_args, read_metrics  # noqa: F401

def _one_line_exit_2(rc, err):
  lines = [l for l in err.strip().splitlines() if l.strip()]
  assert rc == 2, err
  assert len(lines) == 1 and "Traceback" not in err, err
  return lines[0]


@pytest.fixture
def tmpfs(tmp_path):
  """mount(options) -> a fresh tmpfs directory; unmounted afterwards."""
  mounted = []

  def mount(options):
    d = tmp_path / f"mnt{len(mounted)}"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(d)],
                       capture_output=True)
    if r.returncode:
      pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    mounted.append(d)
    return d
  yield mount
  for d in mounted:
    subprocess.run(["umount", "-l", str(d)], capture_output=True)


# -- bad configs: before any compute --------------------------------------------------------
def test_config_file_with_syntax_error(tmp_path, capsys):
  bad = tmp_path / "bad.py"
  bad.write_text("def get_config(:\n  pass\n")
  line = _one_line_exit_2(cli.main(["train", "--config", str(bad)]), capsys.readouterr().err)
  assert "bad.py:1" in line and "syntax error" in line


def test_config_file_that_raises(tmp_path, capsys):
  bad = tmp_path / "raises.py"
  bad.write_text("import ml_collections\n\ndef get_config():\n  return {}['missing']\n")
  line = _one_line_exit_2(cli.main(["train", "--config", str(bad)]), capsys.readouterr().err)
  assert "raises.py" in line and "line 4" in line and "KeyError" in line


@pytest.mark.parametrize("override,key", [
    ("--config.rollout.max_response_tokens=0", "rollout.max_response_tokens"),
    ("--config.ssp.solver_max_new_tokens=-1", "ssp.solver_max_new_tokens"),
    ("--config.rl.max_len=1024", "rl.max_len"),
    ("--config.ssp.rag.max_new_tokens=0", "ssp.rag.max_new_tokens"),
])
def test_budgets_that_leave_nothing_to_train(tmp_path, capsys, override, key):
  workdir = tmp_path / "never"
  rc = cli.main(["train", "--config", TINY, f"--config.workdir={workdir}", override])
  line = _one_line_exit_2(rc, capsys.readouterr().err)
  assert key in line and not workdir.exists()


def test_svs_budget_of_zero_rejected(tmp_path, capsys):
  rc = cli.main(["train", "--config", os.path.join(REPO, "configs", "svs_tiny.py"),
                 f"--config.workdir={tmp_path / 'never'}",
                 "--config.rollout.max_response_tokens=0"])
  assert "rollout.max_response_tokens" in _one_line_exit_2(rc, capsys.readouterr().err)


# -- disks ----------------------------------------------------------------------------------
def test_read_only_workdir(tmpfs, capsys):
  ro = tmpfs("ro,size=1m")
  rc = cli.main(["train", "--config", TINY, f"--config.workdir={ro}/run"])
  line = _one_line_exit_2(rc, capsys.readouterr().err)
  assert f"{ro}/run" in line and "Read-only file system" in line


def test_full_disk_at_start(tmpfs, capsys):
  small = tmpfs("size=1m")
  rc = cli.main(["train", "--config", TINY, f"--config.workdir={small}/run"])
  line = _one_line_exit_2(rc, capsys.readouterr().err)
  assert "MiB free" in line and str(small) in line


def test_full_disk_during_training(assets, tmpfs, capsys, monkeypatch):
  """The disk fills while the first checkpoint is written: one line, exit 2."""
  small = tmpfs("size=384k")          # config.json and metrics fit, a checkpoint does not
  monkeypatch.setattr(train_cli, "MIN_FREE_BYTES", 0)
  rc = cli.main(fast_args(assets, f"{small}/run", 1))
  line = _one_line_exit_2(rc, capsys.readouterr().err)
  assert "No space left on device" in line and "resume" in line


# -- a dead retrieval server -----------------------------------------------------------------
def _closed_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]     # nothing listens once the socket is closed


def test_dead_retrieval_url_is_probed_before_the_model_loads(tmp_path, capsys):
  url = f"http://127.0.0.1:{_closed_port()}"
  rc = cli.main(["train", "--config", TINY, f"--config.workdir={tmp_path / 'run'}",
                 f"--config.retrieval.url={url}"])
  line = _one_line_exit_2(rc, capsys.readouterr().err)
  assert url in line and "does not answer" in line


@pytest.mark.slow
def test_dead_retrieval_url_with_warn_runs_and_counts(assets, tmp_path, caplog):
  url = f"http://127.0.0.1:{_closed_port()}"
  workdir = str(tmp_path / "run")
  rc = cli.main(fast_args(assets, workdir, 1) + [f"--config.retrieval.url={url}",
                                                 "--config.retrieval.on_unreachable=warn",
                                                 "--config.retrieval.retries=0"])
  assert rc == 0
  assert any("does not answer" in r.getMessage() and r.levelname == "WARNING"
             for r in caplog.records)
  row = read_metrics(workdir)[0]
  assert "search/failed_rate" in row
  if row.get("solver/searches_mean", 0) + row.get("proposer/searches_mean", 0) > 0:
    assert row["search/failed_rate"] > 0    # every search of the run failed, and is counted


# -- a damaged latest checkpoint ---------------------------------------------------------------
def test_truncated_latest_checkpoint_resumes_from_previous(assets, tmp_path, caplog):
  workdir = str(tmp_path / "run")
  assert cli.main(fast_args(assets, workdir, 2)) == 0
  params2 = os.path.join(workdir, "checkpoints", "2", "params")
  files = sorted((os.path.join(d, f) for d, _, fs in os.walk(params2) for f in fs),
                 key=os.path.getsize)
  with open(files[-1], "r+b") as f:          # the largest data file, cut to a third
    f.truncate(os.path.getsize(files[-1]) // 3)
  caplog.clear()
  assert cli.main(fast_args(assets, workdir, 3)) == 0
  warn = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
  assert any("checkpoint 2" in w and "unreadable" in w for w in warn), warn
  assert [r["step"] for r in read_metrics(workdir)] == [1, 2, 3]   # step 2 redone once
  names = os.listdir(os.path.join(workdir, "checkpoints"))
  assert "3" in names and any(n.startswith("2.corrupt-") for n in names)


# -- signals -----------------------------------------------------------------------------------
def _wait_for(pred, timeout, proc):
  t0 = time.time()
  while time.time() - t0 < timeout:
    if pred():
      return True
    if proc.poll() is not None:
      return False
    time.sleep(0.2)
  return False


@pytest.mark.parametrize("sig", [signal.SIGTERM,
                                 pytest.param(signal.SIGINT, marks=pytest.mark.slow)])
def test_signal_stops_at_a_step_boundary_and_resumes(assets, tmp_path, sig):
  workdir = str(tmp_path / "run")
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env["PYTHONPATH"] = REPO
  args = fast_args(assets, workdir, 4) + ["--config.checkpoint.every=100"]
  proc = subprocess.Popen([sys.executable, "-m", "ssp_jax"] + args, cwd=REPO, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  metrics = os.path.join(workdir, "metrics.jsonl")
  try:
    assert _wait_for(lambda: os.path.exists(metrics) and os.path.getsize(metrics) > 0, 300,
                     proc), proc.communicate()[1][-3000:]
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == 128 + sig, err[-3000:]
  assert "Traceback" not in err
  done = [r["step"] for r in read_metrics(workdir)][-1]
  assert 1 <= done < 4
  name = signal.Signals(sig).name
  assert f"stopped by {name} after step {done}" in err and "run the same command again" in err
  assert str(done) in os.listdir(os.path.join(workdir, "checkpoints"))  # written on the stop
  if sig == signal.SIGTERM:     # the same command resumes and finishes (no step twice)
    assert cli.main(args) == 0
    assert [r["step"] for r in read_metrics(workdir)] == [1, 2, 3, 4]


# -- export: a directory that generate and transformers load ----------------------------------
def test_export_loads_in_generate_and_transformers(assets, tmp_path, capsys):
  import numpy as np
  import torch
  import transformers
  workdir = str(tmp_path / "run")
  assert cli.main(fast_args(assets, workdir, 1)) == 0
  out = tmp_path / "hf"
  assert cli.main(["export", "--checkpoint", os.path.join(workdir, "checkpoints"),
                   "--out", str(out)]) == 0
  names = sorted(os.listdir(out))
  assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} \
      <= set(names)
  assert {oct(os.stat(out / n).st_mode & 0o777) for n in names} == {"0o644"}
  capsys.readouterr()
  assert cli.main(["generate", "--checkpoint", str(out), "--prompt", "Who wrote Moby-Dick?",
                   "--raw", "--max-new-tokens", "1"]) == 0
  ours = json.loads(capsys.readouterr().out)
  tok = transformers.AutoTokenizer.from_pretrained(out)
  model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
  ids = tok("Who wrote Moby-Dick?", return_tensors="pt").input_ids
  assert ids.shape[1] == ours["num_prompt_tokens"]
  with torch.no_grad():
    logits = model(ids).logits[0, -1].numpy()
  assert int(np.argmax(logits)) == ours["token_ids"][0]     # the trained weights, both ways
  # a checkpoint with no run config next to it and no --tokenizer is one line, exit 2
  capsys.readouterr()
  rc = cli.main(["export", "--checkpoint", str(tmp_path / "missing"), "--out", str(tmp_path / "x")])
  assert _one_line_exit_2(rc, capsys.readouterr().err)


def test_signal_before_the_first_step_stops_at_once():
  """During the build (index, warm start, restore) there is no step to finish: the first
  signal stops at once; once the loop runs it only asks for a stop at the next step."""
  from ssp_jax.run.trainer import StopOnSignal
  with StopOnSignal() as stop:
    with pytest.raises(KeyboardInterrupt, match="before the first step"):
      os.kill(os.getpid(), signal.SIGTERM)
      time.sleep(1)
    stop.signum, stop.deferring = None, True
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.2)
    assert stop.signum == signal.SIGTERM
