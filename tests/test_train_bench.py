"""bench/train_step.py --tiny on a length mix runs on CPU, prints its JSON line, and with
--profile leaves a trace of the step that bench/trace_summary.py reads."""
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_length_mix_packed_step_with_a_profile(tmp_path):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)   # one CPU device: 2-row micro-batches do not split over 8
  prof = str(tmp_path / "prof")
  r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "train_step.py"), "--tiny",
                      "--length-mix", "paper", "--traj", "12", "--micro-batch", "2", "--steps",
                      "1", "--layouts", "packed", "--remat", "dots_flash", "--profile", prof],
                     capture_output=True, text=True, env=env, timeout=600)
  assert r.returncode == 0, r.stderr[-2000:]
  out = json.loads(r.stdout.strip().splitlines()[-1])
  assert out["remat"] == "dots_flash" and out["step_s_packed"] > 0
  assert 0 < out["fill_rate_packed"] <= 1 and out["real_tokens"] > 0
  assert sorted(os.listdir(prof)) == ["packed", "packed.hlo.txt"]
  s = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "trace_summary.py"), prof,
                      "--match", ""], capture_output=True, text=True, timeout=300)
  assert s.returncode == 0, s.stderr[-2000:]
  tracks = [json.loads(x) for x in s.stdout.splitlines()]
  assert any(t["busy_ms"] > 0 and t["by_class"] for t in tracks)
  # --by-op traces matching kernels to their XLA instructions; --hlo adds their shapes and the
  # JAX source path from the HLO text the profile wrote
  s = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "trace_summary.py"), prof,
                      "--match", "", "--by-op", "fusion", "--hlo",
                      os.path.join(prof, "packed.hlo.txt")],
                     capture_output=True, text=True, timeout=300)
  assert s.returncode == 0, s.stderr[-2000:]
  ops = [o for x in s.stdout.splitlines() for o in json.loads(x).get("by_op", [])]
  named = [o for o in ops if o["hlo_op"] != "?" and o["hlo"] != "?"]
  assert named and all(o["total_ms"] >= 0 and o["count"] > 0 for o in named)
  assert any("jit(train_step)" in o["op_name"] for o in named)
  assert any(re.match(r"(f32|bf16|s32|pred|\()", o["hlo"]) for o in named)
  bad = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "trace_summary.py"), prof,
                        "--hlo", os.path.join(prof, "packed.hlo.txt")],
                       capture_output=True, text=True, timeout=300)
  assert bad.returncode == 2 and "pass --by-op REGEX" in bad.stderr


def test_a_micro_batch_that_does_not_split_over_the_devices_is_refused_with_the_fix():
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=4")
  r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "train_step.py"), "--tiny",
                      "--length-mix", "paper", "--traj", "12", "--micro-batch", "2", "--steps",
                      "1", "--layouts", "packed"], capture_output=True, text=True, env=env,
                     timeout=600)
  assert r.returncode != 0 and "Traceback" not in r.stderr
  assert "--micro-batch 2 is not a multiple of the 4 devices" in r.stderr


def test_cudnn_gqa_on_a_jax_that_cannot_take_it_exits_with_the_fix():
  from models import layers
  if layers.cudnn_packed_gqa_ok():
    pytest.skip("this JAX's cuDNN wrapper takes grouped-query K/V unrepeated")
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "train_step.py"), "--tiny",
                      "--length-mix", "paper", "--traj", "12", "--micro-batch", "2", "--steps",
                      "1", "--layouts", "packed", "--attn-impl", "cudnn_gqa"],
                     capture_output=True, text=True, env=env, timeout=600)
  assert r.returncode != 0 and "Traceback" not in r.stderr
  assert "--attn-impl cudnn_gqa refused" in r.stderr and "attn_impl='cudnn'" in r.stderr
