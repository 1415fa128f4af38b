"""Cross-play question sets from an SSP run's logged proposals (python -m ssp_jax.world.crossplay)."""
import json
import subprocess
import sys

from ssp_jax.world import crossplay


def test_windows_cover_early_middle_late():
  w = crossplay.windows(9)
  assert list(w["early"]) == [1, 2, 3] and list(w["middle"]) == [4, 5, 6]
  assert list(w["late"]) == [7, 8, 9]
  assert all(len(r) == 1 for r in crossplay.windows(2).values())


def test_sets_hold_distinct_valid_proposals_of_their_window(tmp_path):
  samples = tmp_path / "samples"
  samples.mkdir()
  for step in range(1, 7):
    recs = [{"kind": "proposal", "step": step, "question": f"q{step}", "answer": f"a{step}",
             "valid": True, "world": {"hops": 2}},
            {"kind": "proposal", "step": step, "question": f"bad{step}", "answer": "x",
             "valid": False},
            {"kind": "proposal", "step": step, "question": "q1", "answer": "a1", "valid": True},
            {"kind": "problem", "step": step, "question": f"replayed{step}", "answer": "y"}]
    (samples / f"samples_{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
  out = subprocess.run([sys.executable, "-m", "ssp_jax.world.crossplay", "--samples",
                        str(samples), "--steps", "6", "--out", str(tmp_path / "cp")],
                       capture_output=True, text=True, timeout=60)
  assert out.returncode == 0, out.stderr
  read = lambda n: [json.loads(l) for l in open(tmp_path / "cp" / f"questions_{n}.jsonl")]
  early, late = read("early"), read("late")
  assert [r["question"] for r in early] == ["q1", "q2"]          # q1 once, no invalid ones
  assert [r["question"] for r in late] == ["q5", "q1", "q6"]
  assert early[0]["golden_answers"] == ["a1"] and early[0]["hops"] == 2
  bad = subprocess.run([sys.executable, "-m", "ssp_jax.world.crossplay", "--samples",
                        str(tmp_path / "none"), "--steps", "6", "--out", str(tmp_path / "x")],
                       capture_output=True, text=True, timeout=60)
  assert bad.returncode == 2 and "--samples" in bad.stderr
