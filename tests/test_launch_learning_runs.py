"""launch/learning_runs_h200.sh: which commands it runs, with which settings, and its bad input.

The script is meant for a GPU; here `PYTHON` is a small recorder standing in for the Python
interpreter, so what is checked is the script's own logic: the train command carries the
in-training evaluation settings, a run stopped before its last evaluation is evaluated from its
checkpoint (and one that ended on an evaluation is not), memory fractions, and exit code 2 with
a message for a bad RUNS value or a missing model file.
"""
import os
import subprocess
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "launch", "learning_runs_h200.sh")

# Records "MEM_FRACTION args..." per call; `train` appends one metrics row to its workdir, with
# a val/ key when FAKE_LAST_EVAL=1 (the run ended on an in-training evaluation).
RECORDER = textwrap.dedent("""\
  #!/usr/bin/env bash
  echo "$XLA_PYTHON_CLIENT_MEM_FRACTION $*" >> "$FAKE_LOG"
  if [ "$3" = train ]; then
    for a in "$@"; do case $a in --config.workdir=*) w=${a#--config.workdir=} ;; esac; done
    mkdir -p "$w"
    if [ "${FAKE_LAST_EVAL:-0}" = 1 ]; then echo '{"step": 2, "val/x/em": 0.5}' >> "$w/metrics.jsonl"
    else echo '{"step": 2, "loss": 0.1}' >> "$w/metrics.jsonl"; fi
  fi
  """)


def run(tmp_path, runs, last_eval=False, model=True):
  fake = tmp_path / "python"
  fake.write_text(RECORDER)
  fake.chmod(0o755)
  gguf = tmp_path / "m.gguf"
  if model:
    gguf.write_bytes(b"GGUF")
  log = tmp_path / "calls.log"
  env = dict(os.environ, PYTHON=str(fake), RUNS=runs, FAKE_LOG=str(log),
             FAKE_LAST_EVAL="1" if last_eval else "0", SSP_STEPS="4", SSP_EVERY="2")
  p = subprocess.run(["bash", SCRIPT, str(gguf), str(tmp_path / "out"), "30", "30"], env=env,
                     cwd=REPO, capture_output=True, text=True, timeout=120)
  calls = log.read_text().splitlines() if log.exists() else []
  return p, calls


def test_svs_and_ssp_commands(tmp_path):
  p, calls = run(tmp_path, "svs ssp")
  assert p.returncode == 0, p.stderr
  out = tmp_path / "out"
  svs = [c for c in calls if "svs_gsm_h200.py" in c]
  ssp = [c for c in calls if "ssp_small_h200.py" in c or "index build" in c]
  assert [c.split()[3] for c in svs] == ["train", "eval"]
  train = svs[0]
  assert train.startswith("0.38 ") and ":rlvr" not in train
  for flag in ("--config.eval.at_start=true", "--config.eval.every_steps=10",
               "--config.total_steps=30", f"--config.workdir={out}/svs/run"):
    assert flag in train.split(), flag
  assert f"--checkpoint {out}/svs/run --out {out}/svs/eval_after" in svs[1]
  assert [c.split()[3] for c in ssp] == ["index", "train", "eval", "eval"]
  assert all(c.startswith("0.55 ") for c in ssp)
  assert "--config.total_steps=4" in ssp[1] and "--config.eval.every_steps=2" in ssp[1]
  assert f"--checkpoint {tmp_path}/m.gguf --out {out}/ssp/eval_base" in ssp[3]
  assert (out / "results.tar.gz").exists()


def test_no_extra_evaluation_when_the_run_ended_on_one(tmp_path):
  p, calls = run(tmp_path, "math", last_eval=True)
  assert p.returncode == 0, p.stderr
  assert [c.split()[3] for c in calls] == ["train"]
  assert calls[0].startswith("0.9 ") and "svs_gsm_h200.py:rlvr" in calls[0]


def test_bad_input_exits_2(tmp_path):
  p, calls = run(tmp_path, "ssp sft")
  assert p.returncode == 2 and "RUNS: unknown run 'sft'" in p.stderr and not calls
  (tmp_path / "m.gguf").unlink()
  p, calls = run(tmp_path, "ssp", model=False)
  assert p.returncode == 2 and "MODEL: no file" in p.stderr and not calls
