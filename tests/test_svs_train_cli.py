"""`ssp-jax train` / `ssp-jax eval` with an SvS config, end to end on a real (tiny, random) model.

The default-suite tests run the CLI in-process on a tiny random HF checkpoint built here (offline)
with configs/svs_tiny.py shrunk by overrides. A random model boxes no correct answer, so every step
is a skipped step: the test checks what such a run must still do (metrics, samples, checkpoints
with the data position and skip counter, resuming where it stopped). The update path of a
non-skipped step is covered by tests/test_svs_game.py. The slow test runs the embedded default
(SmolLM2-135M) exactly as a user does.
"""
import json
import os
import subprocess
import sys

import pytest

from ssp_jax import cli
from ssp_jax.svs import arith
from ssp_jax.svs.data import ProblemIterator, load_problems
from ssp_jax.testing.tiny_checkpoint import make_tiny_checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SVS_TINY = os.path.join(REPO, "configs", "svs_tiny.py")
BATCH = 4          # svs.batch_size of configs/svs_tiny.py


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
  return make_tiny_checkpoint(str(tmp_path_factory.mktemp("svs") / "ckpt"))


def fast_args(ckpt, workdir, steps, verb="train"):
  args = [verb, "--config", SVS_TINY, f"--config.model.path={ckpt}", "--config.mesh.num_devices=1",
          "--config.rollout.max_response_tokens=16", "--config.rollout.max_prompt_tokens=512",
          "--config.rollout.cache_min_len=64", "--config.rollout.steps_per_call=16"]
  if verb == "train":
    args += [f"--config.workdir={workdir}", f"--config.total_steps={steps}",
             "--config.progress=false", "--config.svs.solve_max_new_tokens=16",
             "--config.svs.synth_max_new_tokens=16", "--config.rl.bucket=64",
             "--config.rl.max_len=640", "--config.rl.logprob_chunk=64"]
  return args


def read_metrics(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(l) for l in f]


REQUIRED = ("step", "oqa/accuracy", "oqa/under_performing", "oqa/none_correct_rate",
            "svs/skipped", "svs/skipped_total", "loss", "updates", "time/rollout", "time/step",
            "learner/updates_total", "data/epoch",
            "rollout/calls", "rollout/policy_tokens", "perf/decode_ms_per_step",
            "rollout/occupancy", "time/rollout_decode")


def saved_extra(workdir, step):
  """The JSON extra state of checkpoint `step` (data position, skip counter)."""
  import orbax.checkpoint as ocp
  from ssp_jax.checkpointing import Checkpointer
  ck = Checkpointer(os.path.join(workdir, "checkpoints"), async_save=False)
  try:
    return ck.manager.restore(step, args=ocp.args.Composite(extra=ocp.args.JsonRestore()))["extra"]
  finally:
    ck.close()


def sample_ids(workdir, step):
  with open(os.path.join(workdir, "samples", f"samples_{step}.jsonl")) as f:
    recs = [json.loads(l) for l in f]
  assert all(r["kind"] == "problem" and {"problem", "answer", "accuracy", "predictions"} <= set(r)
             for r in recs)
  return {r["id"] for r in recs}


def test_eval_at_start_is_step_zero(ckpt, tmp_path):
  """eval.at_start with the SvS game: the starting policy's pass@k as step 0, then the steps."""
  workdir = str(tmp_path / "run")
  with_eval = ["--config.eval.at_start=true", "--config.eval.limit=2", "--config.eval.n=2",
               "--config.eval.max_new_tokens=8"]
  assert cli.main(fast_args(ckpt, workdir, 1) + with_eval) == 0
  rows = read_metrics(workdir)
  assert [r["step"] for r in rows] == [0, 1]
  assert any(k.startswith("val/") and k.endswith("/pass@1") for k in rows[0])
  assert "oqa/accuracy" not in rows[0] and not any(k.startswith("val/") for k in rows[1])
  assert os.path.exists(os.path.join(workdir, "eval", "step_0", "results.json"))


def test_train_writes_outputs_checkpoints_and_resumes(ckpt, tmp_path):
  workdir = str(tmp_path / "run")
  with_eval = ["--config.eval.every_steps=1", "--config.eval.limit=2", "--config.eval.n=2",
               "--config.eval.max_new_tokens=8"]
  assert cli.main(fast_args(ckpt, workdir, 1) + with_eval) == 0
  rows = read_metrics(workdir)
  assert [r["step"] for r in rows] == [1]
  missing = [k for k in REQUIRED if k not in rows[0]]
  assert not missing, missing
  assert rows[0]["oqa/num"] == BATCH * 4
  assert rows[0]["svs/skipped"] == 1.0 and rows[0]["learner/updates_total"] == 0.0
  val = {k for k in rows[0] if k.startswith("val/arith-L")}   # one source per level
  assert {k.rsplit("/", 1)[1] for k in val} == {"acc", "pass@1", "pass@2"}
  assert os.path.exists(os.path.join(workdir, "eval", "step_1", "results.json"))
  assert os.listdir(os.path.join(workdir, "tb"))
  assert json.load(open(os.path.join(workdir, "config.json")))["game"] == "svs"
  extra = saved_extra(workdir, 1)
  assert extra["data"]["position"] == BATCH and extra["svs"] == {"skipped_total": 1}

  # the data order a run draws: resuming must continue it, not restart it
  order = ProblemIterator(load_problems(arith.DEFAULT_PATH), seed=0)  # svs_tiny's problem set
  batches = [{p.id for p in order.next_batch(BATCH)} for _ in range(2)]
  assert sample_ids(workdir, 1) == batches[0]

  assert cli.main(fast_args(ckpt, workdir, 2)) == 0
  rows2 = read_metrics(workdir)
  assert [r["step"] for r in rows2] == [1, 2] and rows2[0] == rows[0]
  assert sample_ids(workdir, 2) == batches[1]
  assert rows2[1]["svs/skipped_total"] == 2.0           # the counter came back from the checkpoint
  assert saved_extra(workdir, 2)["data"]["position"] == 2 * BATCH
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["1", "2"]
  # the finished command again: nothing to do, nothing rewritten
  assert cli.main(fast_args(ckpt, workdir, 2)) == 0
  assert read_metrics(workdir) == rows2


@pytest.mark.parametrize("override,key", [
    ("--config.svs.n=1", "svs.n"),
    ("--config.svs.under_lower=0.9", "svs.under_lower"),
    ("--config.svs.train_path=/no/such/file.jsonl", "svs.train_path"),
    ("--config.eval.ks=(1,9)", "eval.ks"),
    ("--config.svs.batch_sise=3", "svs.batch_sise"),
])
def test_bad_svs_config_rejected_before_compute(tmp_path, capsys, override, key):
  workdir = tmp_path / "never"
  rc = cli.main(["train", "--config", SVS_TINY, f"--config.workdir={workdir}", override])
  err = capsys.readouterr().err
  assert rc == 2 and key in err, err
  assert not workdir.exists()


def test_eval_cli_reports_accuracy_and_pass_at_k(ckpt, tmp_path, capsys):
  data = tmp_path / "set.jsonl"
  data.write_text("".join(json.dumps(r) + "\n" for r in [
      {"question": "What is 1 + 1?", "ref_answer": "2", "data_source": "easy"},
      {"question": "What is 2 + 3?", "ref_answer": "5", "data_source": "easy"},
      {"problem": "What is 7 * 6?", "answer": "42"}]))
  out = tmp_path / "eval"
  args = fast_args(ckpt, None, 0, verb="eval") + [
      "--config.eval.n=3", "--config.eval.ks=(1,3)", "--config.eval.max_new_tokens=8",
      f"--data=mine={data}", f"--out={out}"]
  assert cli.main(args) == 0
  res = json.load(open(out / "results.json"))
  assert set(res) == {"easy", "mine", "meta"}
  assert res["easy"]["problems"] == 2 and res["mine"]["problems"] == 1
  assert res["easy"]["samples_per_problem"] == 3 and 0.0 <= res["easy"]["pass@3"] <= 1.0
  preds = [json.loads(l) for l in open(out / "predictions_mine.jsonl")]
  assert len(preds) == 3 and all(len(p["responses"]) == 3 for p in preds)
  assert "| easy | 2 |" in capsys.readouterr().out
  bad = tmp_path / "bad.jsonl"
  bad.write_text(json.dumps({"question": "no answer here?"}) + "\n")
  args[-2] = f"--data=bad={bad}"
  assert cli.main(args) == 2
  assert "bad.jsonl:1" in capsys.readouterr().err


@pytest.mark.slow
def test_svs_tiny_config_end_to_end_subprocess(tmp_path):
  """The embedded SvS default exactly as a user runs it (SmolLM2-135M; minutes per step)."""
  workdir = str(tmp_path / "svs_tiny")
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  cmd = [sys.executable, "-m", "ssp_jax", "train", "--config", SVS_TINY,
         f"--config.workdir={workdir}", "--config.total_steps=1"]
  subprocess.run(cmd, check=True, cwd=REPO, env=env, timeout=3000)
  assert [r["step"] for r in read_metrics(workdir)] == [1]
  cmd[-1] = "--config.total_steps=2"
  subprocess.run(cmd, check=True, cwd=REPO, env=env, timeout=3000)
  rows = read_metrics(workdir)
  assert [r["step"] for r in rows] == [1, 2]
  assert all(k in rows[-1] for k in REQUIRED)
