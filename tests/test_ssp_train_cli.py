"""`ssp-jax train` end to end: outputs, resume without duplicates, and override rejection.

The default-suite variant runs the real CLI in-process on a tiny random HF checkpoint and a BM25
index over a few passages (both built here, offline); the slow variant runs the embedded default
config (SmolLM2-135M + MiniLM over the shipped corpus) in a subprocess.
"""
import json
import os
import subprocess
import sys

import pytest

from ssp_jax import cli
from ssp_jax.testing.small_retriever import WIKI_SNIPPETS
from ssp_jax.testing.tiny_checkpoint import make_tiny_checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(REPO, "configs", "tiny.py")


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
  root = tmp_path_factory.mktemp("assets")
  ckpt = make_tiny_checkpoint(str(root / "ckpt"))
  corpus = root / "corpus.jsonl"
  corpus.write_text("".join(json.dumps({"id": str(i), "contents": c}) + "\n"
                            for i, c in enumerate(WIKI_SNIPPETS)))
  from retrieval.index import build_bm25
  build_bm25(str(corpus), str(root / "index"), progress=False)
  answers = root / "answers.jsonl"
  answers.write_text("".join(json.dumps({"ground_truth": a, "search_turns": 2}) + "\n"
                             for a in ("Herman Melville", "Paris", "Warsaw", "Edinburgh"))
                     + "{broken line\n")
  return dict(ckpt=ckpt, index=str(root / "index"), answers=str(answers))


def fast_args(assets, workdir, steps):
  return ["train", "--config", TINY, f"--config.workdir={workdir}",
          f"--config.total_steps={steps}", f"--config.model.path={assets['ckpt']}",
          f"--config.retrieval.index_dir={assets['index']}",
          f"--config.ssp.answers_path={assets['answers']}",
          "--config.mesh.num_devices=1", "--config.progress=false",
          "--config.rollout.max_response_tokens=16", "--config.ssp.proposer_max_new_tokens=16",
          "--config.ssp.solver_max_new_tokens=16", "--config.ssp.rag.max_new_tokens=8",
          "--config.rollout.max_prompt_tokens=512", "--config.rollout.cache_min_len=64",
          "--config.rollout.steps_per_call=16", "--config.rl.bucket=64",
          "--config.rl.max_len=640", "--config.rl.logprob_chunk=64",
          "--config.warmstart.enabled=false"]   # tests/test_warmstart.py covers it


def read_metrics(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(l) for l in f]


REQUIRED = ("step", "proposer/valid_rate", "proposer/rag_pass_rate", "proposer/reward_mean",
            "solver/reward_mean", "solver/searches_mean", "loss", "kl", "entropy", "grad_norm",
            "time/rollout", "time/retrieval", "time/update", "search/failed_rate",
            "rollout/calls", "rollout/policy_tokens", "perf/decode_ms_per_step",
            "rollout/occupancy", "time/rollout_decode")


def check_outputs(workdir, steps):
  rows = read_metrics(workdir)
  assert [r["step"] for r in rows] == list(range(1, steps + 1))
  for r in rows:
    missing = [k for k in REQUIRED if k not in r]
    assert not missing, missing
    assert all(isinstance(r[k], (int, float)) for k in REQUIRED)
    assert r["rollout/policy_tokens"] > 0 and 0 < r["rollout/occupancy"] <= 1
    assert r["rollout/calls"] >= 2   # the proposer's and the solver's rollouts
  for s in range(1, steps + 1):
    with open(os.path.join(workdir, "samples", f"samples_{s}.jsonl")) as f:
      recs = [json.loads(l) for l in f]
    assert recs and {"question", "answer", "searches", "documents", "proposer_reward"} <= \
        set(next(r for r in recs if r["kind"] == "proposal"))
  assert os.listdir(os.path.join(workdir, "tb"))
  assert str(steps) in os.listdir(os.path.join(workdir, "checkpoints"))


def test_train_resume_and_outputs(assets, tmp_path):
  workdir = str(tmp_path / "run")
  with_eval = ["--config.eval.every_steps=1", "--config.eval.limit=2",
               "--config.eval.max_new_tokens=8", "--config.eval.batch_size=2"]
  assert cli.main(fast_args(assets, workdir, 1) + with_eval) == 0
  check_outputs(workdir, 1)
  first = read_metrics(workdir)[0]
  assert any(k.startswith("val/") for k in first)        # in-training validation ran
  # a crashed step 2 had written a metrics line and a sample file before dying
  with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
    f.write(json.dumps({"step": 2, "loss": 123.0}) + "\n" + '{"step": 3, "lo')
  open(os.path.join(workdir, "samples", "samples_2.jsonl"), "w").write("{}\n")
  assert cli.main(fast_args(assets, workdir, 2)) == 0
  check_outputs(workdir, 2)
  rows = read_metrics(workdir)
  assert rows[0] == first and rows[1]["loss"] != 123.0
  assert rows[1]["learner/updates_total"] > rows[0]["learner/updates_total"]
  # running the finished command again does nothing and keeps everything
  assert cli.main(fast_args(assets, workdir, 2)) == 0
  assert read_metrics(workdir) == rows


def test_eval_at_start_logs_step_zero_once(assets, tmp_path):
  """eval.at_start: the starting policy's held-out metrics as step 0, and not again on resume."""
  workdir = str(tmp_path / "run")
  with_eval = ["--config.eval.at_start=true", "--config.eval.limit=2",
               "--config.eval.max_new_tokens=8", "--config.eval.batch_size=2"]
  assert cli.main(fast_args(assets, workdir, 1) + with_eval) == 0
  rows = read_metrics(workdir)
  assert [r["step"] for r in rows] == [0, 1]
  assert any(k.startswith("val/") for k in rows[0]) and "loss" not in rows[0]
  assert not any(k.startswith("val/") for k in rows[1])     # every_steps=0: only the start
  assert os.path.exists(os.path.join(workdir, "eval", "step_0"))
  assert not os.path.exists(os.path.join(workdir, "samples", "samples_0.jsonl"))
  assert cli.main(fast_args(assets, workdir, 2) + with_eval) == 0
  assert [r["step"] for r in read_metrics(workdir)] == [0, 1, 2]


@pytest.mark.parametrize("override,key", [
    ("--config.ssp.batch_sise=3", "ssp.batch_sise"),
    ("--config.total_steps=abc", "total_steps"),
    ("--config.ssp.fill.strategy=bogus", "ssp.fill.strategy"),
])
def test_bad_override_rejected_before_compute(tmp_path, capsys, override, key):
  workdir = tmp_path / "never"
  rc = cli.main(["train", "--config", TINY, f"--config.workdir={workdir}", override])
  err = capsys.readouterr().err
  assert rc == 2 and key in err
  assert not workdir.exists()          # nothing was computed or written
  if key == "ssp.batch_sise":
    assert "did you mean --config.ssp.batch_size" in err


@pytest.mark.slow
def test_tiny_config_end_to_end_subprocess(tmp_path):
  """The embedded default exactly as a user runs it (SmolLM2 + MiniLM index; minutes)."""
  workdir = str(tmp_path / "tiny")
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  cmd = [sys.executable, "-m", "ssp_jax", "train", "--config", TINY,
         f"--config.workdir={workdir}", "--config.total_steps=1"]
  subprocess.run(cmd, check=True, cwd=REPO, env=env, timeout=3000)
  check_outputs(workdir, 1)
  cmd[-1] = "--config.total_steps=2"
  subprocess.run(cmd, check=True, cwd=REPO, env=env, timeout=3000)
  check_outputs(workdir, 2)


def test_train_with_endpoint_judge_and_by_role_updates(assets, tmp_path):
  """The paper config's switches through the real CLI: verifier and judge behind an endpoint
  URL (a local HTTP stub), rag.use_judge, and the original's update schedule."""
  from ssp_jax.testing.chat_stub import ChatStub
  workdir = str(tmp_path / "run")
  with ChatStub(lambda messages: "Wrong") as stub:
    args = fast_args(assets, workdir, 1) + [
        f"--config.ssp.judge.source={stub.url}", f"--config.ssp.rag.verifier={stub.url}",
        "--config.ssp.judge.model=served-judge", "--config.ssp.rag.use_judge=true",
        "--config.ssp.reward.solver=em_then_judge",
        "--config.rl.update_schedule=by_role"]
    assert cli.main(args) == 0
  check_outputs(workdir, 1)
  row = read_metrics(workdir)[0]
  # tiny config: 2 proposals, 2 problems x 2 attempts, mini-batch 64 prompts x 2 rows:
  # one proposer step, then one solver step
  assert (row["updates/proposer"], row["updates/solver"], row["updates"]) == (1, 1, 2)
  assert row["learner/updates_total"] == 2
  assert {"judge/asked", "judge/correct", "judge/failed"} <= set(row)
  assert row["judge/failed"] == 0
  assert all(r["model"] == "served-judge" for r in stub.requests)
