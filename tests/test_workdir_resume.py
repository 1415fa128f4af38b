"""A workdir remembers its starts, and a config mistake never costs its checkpoints (the fault
drill: another model used to rename every good checkpoint `N.corrupt-<time>`, and another lr or
seed silently overwrote config.json). Real parts: the CLI in process (and once in a
subprocess, as a user runs it) on tiny random HF checkpoints and a BM25 index, real orbax
checkpoints of a 1-step run, real files cut short."""
import json
import logging
import os
import shutil
import subprocess
import sys

import pytest

from ssp_jax import cli, workdir as workdir_lib
from ssp_jax.checkpointing import Checkpointer, CheckpointCorrupt, CheckpointMismatch
from ssp_jax.testing.tiny_checkpoint import make_tiny_checkpoint
from test_ssp_train_cli import REPO, TINY, assets, fast_args, read_metrics  # noqa: F401


@pytest.fixture(scope="module")
def other_model(tmp_path_factory):
  """A second tiny model whose hidden size (so every param shape) differs."""
  return make_tiny_checkpoint(str(tmp_path_factory.mktemp("other") / "ckpt"), hidden=32)


@pytest.fixture(scope="module")
def trained(assets, tmp_path_factory):
  """A workdir after `train` for 1 step (copied by each test that changes it)."""
  workdir = str(tmp_path_factory.mktemp("trained") / "run")
  assert cli.main(fast_args(assets, workdir, 1)) == 0
  return workdir


@pytest.fixture
def run(trained, tmp_path):
  dst = str(tmp_path / "run")
  shutil.copytree(trained, dst)
  return dst


def snapshot(root):
  """{relative path: bytes} of every file under root (listing and contents)."""
  out = {}
  for d, _, files in os.walk(root):
    for f in files:
      with open(os.path.join(d, f), "rb") as fh:
        out[os.path.relpath(os.path.join(d, f), root)] = fh.read()
  return out


def one_line_exit_2(rc, err):
  lines = [l for l in err.strip().splitlines() if l.strip()]
  assert rc == 2, err
  assert len(lines) == 1 and "Traceback" not in err, err
  return lines[0]


def with_model(args, path):
  return [a for a in args if not a.startswith("--config.model.path=")] + \
      [f"--config.model.path={path}"]


def starts(workdir):
  with open(os.path.join(workdir, workdir_lib.STARTS)) as f:
    return [json.loads(l) for l in f]


# -- a config mistake: refused before any model loads, nothing touched ------------------------
def test_another_model_is_refused_in_one_line_and_the_same_command_still_resumes(
    assets, other_model, run):
  """The drill, as a user runs it (subprocess, asynchronous checkpointing as real configs)."""
  before = snapshot(run)
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env["PYTHONPATH"] = REPO
  args = fast_args(assets, run, 2) + ["--config.checkpoint.async_save=true"]
  proc = subprocess.run([sys.executable, "-m", "ssp_jax"] + with_model(args, other_model),
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  line = one_line_exit_2(proc.returncode, proc.stderr)
  assert "model.path" in line and repr(assets["ckpt"]) in line and repr(other_model) in line
  assert "hidden_size 64 -> 32" in line and "--config.workdir" in line
  assert snapshot(run) == before           # checkpoints, config.json, records: byte for byte
  # the original command still finds its checkpoint (it used to start again from step 0)
  assert cli.main(fast_args(assets, run, 1)) == 0
  assert [r["step"] for r in read_metrics(run)] == [1]
  assert sorted(os.listdir(os.path.join(run, "checkpoints"))) == ["1"]


@pytest.mark.parametrize("legacy", [False, True], ids=["recorded", "config_json_only"])
def test_checkpoint_fields_refused(assets, other_model, run, capsys, legacy):
  """model.path and rl.param_dtype change what the checkpoints hold. A workdir from before
  the start records (config.json alone) is refused too: its checkpoint's own model config
  is read."""
  if legacy:
    shutil.rmtree(os.path.join(run, workdir_lib.CONFIGS))
    os.remove(os.path.join(run, workdir_lib.STARTS))
  before = snapshot(run)
  rc = cli.main(with_model(fast_args(assets, run, 2), other_model))
  line = one_line_exit_2(rc, capsys.readouterr().err)
  assert "model.path" in line and "hidden_size 64 -> 32" in line
  rc = cli.main(fast_args(assets, run, 2) + ["--config.rl.param_dtype=bfloat16"])
  line = one_line_exit_2(rc, capsys.readouterr().err)
  assert "rl.param_dtype" in line and "float32" in line and "bfloat16" in line
  assert snapshot(run) == before


def _repoint(workdir, old, new):
  """Rewrites the workdir's records as if its run had used model `new` instead of `old`."""
  paths = [os.path.join(workdir, "config.json"), os.path.join(workdir, workdir_lib.STARTS)]
  paths += [os.path.join(workdir, "configs", n) for n in os.listdir(os.path.join(workdir,
                                                                                 "configs"))]
  for path in paths:
    with open(path) as f:
      text = f.read()
    with open(path, "w") as f:
      f.write(text.replace(json.dumps(old), json.dumps(new)))


def test_model_files_changed_under_the_same_path(assets, other_model, run, tmp_path, capfd,
                                                 monkeypatch):
  """The same model.path now holding another model: caught from the metadata before the model
  loads, one line. Where the metadata cannot tell (as for a model given as a registry spec),
  the restore refuses it: one line, no orbax traceback, nothing renamed."""
  moving = str(tmp_path / "model")
  shutil.copytree(other_model, moving)     # the run "used" `moving`; now it holds another model
  os.utime(os.path.join(moving, "config.json"))   # replaced now (copytree kept the old time)
  _repoint(run, assets["ckpt"], moving)
  before = snapshot(run)
  args = with_model(fast_args(assets, run, 2) + ["--config.checkpoint.async_save=true"], moving)
  line = one_line_exit_2(cli.main(args), capfd.readouterr().err)
  assert "checkpoint 1" in line and "hidden_size 64 -> 32" in line and "model.path" in line
  assert "nothing was loaded" in line
  assert snapshot(run) == before
  monkeypatch.setattr(workdir_lib, "checkpoint_fit", lambda *a: [])
  line = one_line_exit_2(cli.main(args), capfd.readouterr().err)
  assert "CheckpointMismatch" in line and "checkpoint 1" in line and "hidden_size 64 -> 32" in line
  assert "params/embed saved [" in line and "left as it is" in line
  assert sorted(os.listdir(os.path.join(run, "checkpoints"))) == ["1"]
  assert {k: v for k, v in snapshot(run).items() if k.startswith("checkpoints")} == \
      {k: v for k, v in before.items() if k.startswith("checkpoints")}


def test_restore_mismatch_is_not_corruption(assets, other_model, run):
  """A saved tree that does not fit (what the start check cannot see, e.g. a model swapped in
  after it) is CheckpointMismatch naming the leaves and the model fields; nothing is moved
  aside and the checkpoint still restores with the right model."""
  from models.hf_io import read_hf_config
  from ssp_jax.rl import train_state as ts
  from ssp_jax.rl.config import get_rl_config
  sharder, tx = ts.single_device_sharder(), ts.make_optimizer(get_rl_config())
  root = os.path.join(run, "checkpoints")
  before = snapshot(root)
  wrong_cfg = read_hf_config(other_model)
  ck = Checkpointer(root, async_save=True, model_config=wrong_cfg)
  with pytest.raises(CheckpointMismatch) as e:
    ck.resume(*ts.state_shardings(wrong_cfg, tx, sharder))
  msg = str(e.value)
  assert "checkpoint 1" in msg and "params/embed saved [" in msg and ", 64] float32" in msg
  assert "hidden_size 64 -> 32" in msg and "\n" not in msg
  assert snapshot(root) == before          # nothing renamed (the manager was closed)
  ck = Checkpointer(root, async_save=False)
  step, state = ck.resume(*ts.state_shardings(read_hf_config(assets["ckpt"]), tx, sharder))
  ck.close()
  assert step == 1 and int(state["step"]) >= 1


# -- other changes: one warning, resumed, recorded -------------------------------------------
def test_other_lr_warns_once_resumes_and_records(assets, run, caplog):
  first = open(os.path.join(run, "config.json"), "rb").read()
  rows = read_metrics(run)
  caplog.clear()
  with caplog.at_level(logging.INFO):
    assert cli.main(fast_args(assets, run, 2) + ["--config.rl.lr=2e-6"]) == 0
  ours = [r for r in caplog.records if r.name == "ssp_jax.workdir"]
  warn = [r.getMessage() for r in ours if r.levelno == logging.WARNING]
  assert len(warn) == 1 and "rl.lr 1e-06 -> 2e-06" in warn[0], warn
  assert "total_steps" not in warn[0]        # raising it to train on is no warning
  assert any("total_steps 1 -> 2" in r.getMessage() for r in ours if r.levelno == logging.INFO)
  assert not any("unreadable" in r.getMessage() for r in caplog.records)
  # resumed from checkpoint 1: step 1 kept, step 2 trained on top of it
  after = read_metrics(run)
  assert [r["step"] for r in after] == [1, 2] and after[0] == rows[0]
  assert after[1]["learner/updates_total"] > rows[0]["learner/updates_total"]
  # the first config kept, both starts recorded
  assert open(os.path.join(run, "config.json"), "rb").read() == first
  recs = starts(run)
  assert [s["start"] for s in recs] == [1, 2] and recs[1]["latest_checkpoint"] == 1
  assert recs[1]["model_stamp"] == recs[0]["model_stamp"] is not None   # fit check skipped
  assert recs[1]["changed"] == {"rl.lr": [1e-6, 2e-6], "total_steps": [1, 2]}
  configs = sorted(os.listdir(os.path.join(run, "configs")))
  assert [c[:11] for c in configs] == ["start-0001-", "start-0002-"]
  assert json.load(open(os.path.join(run, "configs", configs[1])))["rl"]["lr"] == 2e-6
  assert json.load(open(os.path.join(run, "configs", configs[0])))["rl"]["lr"] == 1e-6


def test_records_without_checkpoints(tmp_path, caplog):
  """The layout on its own (no model, no checkpoint): a fresh workdir writes config.json and
  start 0001; a later start with another seed warns and is start 0002; with no checkpoint
  to protect, even another model.path is only a warning; nothing is rewritten."""
  from ssp_jax.config_loader import load_config_file
  config = load_config_file(TINY)
  config.workdir = str(tmp_path / "run")
  os.makedirs(config.workdir)
  check = workdir_lib.check_start(config)
  assert check.recorded_path is None and check.changes == {}
  workdir_lib.record_start(config, check)
  first = open(os.path.join(config.workdir, "config.json"), "rb").read()
  config.seed, config.model.path = 7, str(tmp_path / "elsewhere")
  with caplog.at_level(logging.WARNING, logger="ssp_jax.workdir"):
    check = workdir_lib.check_start(config)
    workdir_lib.record_start(config, check)
  warn = [r.getMessage() for r in caplog.records if r.name == "ssp_jax.workdir"]
  assert len(warn) == 1 and "seed 0 -> 7" in warn[0] and "model.path" in warn[0]
  assert "no checkpoint yet" in warn[0] and "start-0001-" in warn[0]
  assert open(os.path.join(config.workdir, "config.json"), "rb").read() == first
  assert [s["start"] for s in starts(config.workdir)] == [1, 2]
  path, latest = workdir_lib.latest_config(config.workdir)
  assert os.path.basename(path).startswith("start-0002-") and latest["seed"] == 7


# -- real damage is still moved aside --------------------------------------------------------
def _largest_params_file(step_dir):
  files = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(step_dir, "params"))
           for f in fs]
  return max(files, key=os.path.getsize)


def test_truncated_checkpoint_is_still_moved_aside(assets, run, capsys):
  victim = _largest_params_file(os.path.join(run, "checkpoints", "1"))
  with open(victim, "r+b") as f:
    f.truncate(os.path.getsize(victim) // 3)
  rc = cli.main(fast_args(assets, run, 2))
  line = one_line_exit_2(rc, capsys.readouterr().err)   # the only checkpoint: none restores
  assert "CheckpointCorrupt" in line and "1 (" in line
  names = os.listdir(os.path.join(run, "checkpoints"))
  assert "1" not in names and any(n.startswith("1.corrupt-") for n in names)


def test_unreadable_metadata_is_damage(assets, run):
  """A checkpoint whose params metadata is gone is damaged (moved aside), not a mismatch."""
  from models.hf_io import read_hf_config
  from ssp_jax.rl import train_state as ts
  from ssp_jax.rl.config import get_rl_config
  root = os.path.join(run, "checkpoints")
  os.remove(os.path.join(root, "1", "params", "_METADATA"))
  state = ts.state_shardings(read_hf_config(assets["ckpt"]), ts.make_optimizer(get_rl_config()),
                             ts.single_device_sharder())
  ck = Checkpointer(root, async_save=False)
  with pytest.raises(CheckpointCorrupt, match=r"restores: 1 \("):
    ck.resume(*state)
  assert any(n.startswith("1.corrupt-") for n in os.listdir(root))


def test_a_restore_failing_for_the_machine_is_not_damage():
  """Out of memory or no permission to read is the machine's fault: no rename (root reads
  through any permission bits, so the errors are built here rather than provoked)."""
  from ssp_jax.checkpoint_fit import environment_error
  try:
    try:
      raise PermissionError(13, "Permission denied", "/ckpt/1/params/d/x")
    except OSError as inner:
      raise ValueError("tensorstore read failed") from inner
  except ValueError as e:
    assert environment_error(e).startswith("PermissionError")
  assert environment_error(RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 8 GiB"))
  assert environment_error(ValueError("Error reading local file: unexpected end of data")) is None


def test_a_refused_start_does_not_become_the_reference(assets, other_model, run, capsys):
  """A start recorded and then refused by the restore (where metadata could not tell, e.g. a
  registry model) wrote nothing: the right command is compared with the start that wrote the
  checkpoint, and resumes."""
  recs = starts(run)
  wrong = json.load(open(os.path.join(run, recs[-1]["config"])))
  wrong["model"]["path"] = other_model
  name = os.path.join(workdir_lib.CONFIGS, "start-0002-refused.json")
  with open(os.path.join(run, name), "w") as f:
    json.dump(wrong, f)
  with open(os.path.join(run, workdir_lib.STARTS), "a") as f:
    f.write(json.dumps({"start": 2, "config": name, "latest_checkpoint": 1}) + "\n")
  assert workdir_lib.producer_start(run, 1)[0].endswith(recs[-1]["config"])
  assert cli.main(fast_args(assets, run, 2)) == 0, capsys.readouterr().err
  assert [r["step"] for r in read_metrics(run)] == [1, 2]
