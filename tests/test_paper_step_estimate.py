"""bench/paper_step_estimate.py (issue 26 item 5): the paper's 7B step from measured pieces.
Its arithmetic against the token counts it prints, and its flags reaching the estimate."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _estimate(*flags) -> dict:
  r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "paper_step_estimate.py"),
                      *flags], capture_output=True, text=True, timeout=60)
  assert r.returncode == 0, r.stderr
  return json.loads(r.stdout)


def test_the_parts_add_up_from_the_printed_counts_and_rates():
  e = _estimate()
  assert e["trajectories"] == {"proposer": 256, "solver": 1280}
  inp = e["inputs"]
  assert abs(e["one_h200"]["rollout_s"] - e["policy_tokens"] / inp["rollout_policy_tok_s"]) < 0.1
  update_s = e["update_pflop"] * 1e15 / (inp["update_mfu"] * inp["h200_peak_flop_s"])
  assert abs(e["one_h200"]["update_s_compute_only"] - update_s) / update_s < 1e-3
  one, eight = e["one_h200"], e["eight_h200"]
  assert abs(one["step_s"] - (one["rollout_s"] + one["rag_check_s"]
                              + one["update_s_compute_only"])) < 0.2
  assert abs(eight["rollout_s"] - one["rollout_s"] / 8) < 0.1
  assert abs(eight["update_s"] - one["update_s_compute_only"] / (8 * inp["scale_eff"])) < 0.1
  assert e["v5p_64"]["step_s"] < eight["step_s"] < one["step_s"]


def test_flags_move_the_parts_they_name():
  base, fast = _estimate(), _estimate("--rollout-tok-s", "20842", "--update-mfu", "0.946")
  assert abs(fast["one_h200"]["rollout_s"] - base["one_h200"]["rollout_s"] / 2) < 0.1
  assert abs(fast["one_h200"]["update_s_compute_only"]
             - base["one_h200"]["update_s_compute_only"] / 2) < 0.2
  assert fast["one_h200"]["rag_check_s"] == base["one_h200"]["rag_check_s"]
  every = _estimate("--logprob-positions", "all")   # the head at every token: more FLOPs
  assert every["update_pflop"] > base["update_pflop"]
