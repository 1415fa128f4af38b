"""The embedded SvS default (configs/svs_tiny.py, SmolLM2-135M on graded arithmetic) plays the
whole game within its default steps: at least one step is not skipped, runs synthesis and SPA,
and applies an update with a non-zero loss. Slow: the real model on CPU, minutes per step."""
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_default_svs_tiny_run_synthesises_and_updates(tmp_path):
  workdir = str(tmp_path / "svs_tiny")
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  subprocess.run([sys.executable, "-m", "ssp_jax", "train", "--config",
                  os.path.join(REPO, "configs", "svs_tiny.py"), f"--config.workdir={workdir}",
                  "--config.progress=false"], check=True, cwd=REPO, env=env, timeout=3600)
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  assert [r["step"] for r in rows] == [1, 2, 3]              # the config's default steps
  played = [r for r in rows if r["svs/skipped"] == 0.0]
  assert played, [(r["step"], r["oqa/accuracy"]) for r in rows]
  assert any(r["vps/num"] > 0 for r in played)               # synthesis ran
  assert any(r.get("updates", 0) > 0 and r["loss"] != 0.0 for r in played)
  assert max(r["oqa/accuracy"] for r in rows) > 0            # the model solves some problems
