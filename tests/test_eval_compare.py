"""The held-out comparison tool: Wilson intervals, exact McNemar, grouping by hop count."""
import json
import math
import subprocess
import sys

from ssp_jax.eval import compare


def test_wilson_matches_closed_form():
  lo, hi = compare.wilson(20, 100)
  # Wilson interval for p = 0.2, n = 100 at 95%: [0.1333, 0.2888]
  assert math.isclose(lo, 0.1333, abs_tol=5e-4) and math.isclose(hi, 0.2888, abs_tol=5e-4)
  assert compare.wilson(0, 0) == (0.0, 0.0)
  lo, hi = compare.wilson(0, 50)
  assert lo < 1e-12 and 0.05 < hi < 0.1


def test_mcnemar_exact():
  assert compare.mcnemar_exact(0, 0) == 1.0
  # 17 vs 11 discordant pairs (docs/results.md's SSP run): p = 0.345
  assert math.isclose(compare.mcnemar_exact(17, 11), 0.3449, abs_tol=1e-3)
  assert compare.mcnemar_exact(10, 0) < 0.002


def test_compare_groups_and_pairs(tmp_path):
  qs = [{"id": f"q{i}", "hops": 1 + i % 3, "kind": "bridge" if i % 2 else "attribute"}
        for i in range(30)]
  a = {q["id"]: float(i % 3 == 0) for i, q in enumerate(qs)}         # right on hop-1 only
  b = {q["id"]: float(i % 3 in (0, 1)) for i, q in enumerate(qs)}    # also on hop-2
  rep = compare.compare({q["id"]: q for q in qs}, {"a": a, "b": b})
  assert rep["runs"]["a"]["hops=1"]["em"] == 1.0 and rep["runs"]["a"]["hops=2"]["em"] == 0.0
  assert rep["runs"]["b"]["all"]["n"] == 30
  pair = rep["pairs"]["b - a"]
  assert pair["all"]["b_only"] == 10 and pair["all"]["a_only"] == 0
  assert math.isclose(pair["all"]["diff"], 1 / 3)
  assert pair["hops=2"]["diff"] == 1.0 and pair["hops=3"]["diff"] == 0.0
  assert pair["all"]["p_mcnemar"] < 0.01
  lo, hi = pair["all"]["ci95"]
  assert lo < 1 / 3 < hi

  qf, pa, pb = tmp_path / "q.jsonl", tmp_path / "a.jsonl", tmp_path / "b.jsonl"
  qf.write_text("".join(json.dumps(q) + "\n" for q in qs))
  pa.write_text("".join(json.dumps({"id": k, "em": v}) + "\n" for k, v in a.items()))
  pb.write_text("".join(json.dumps({"id": k, "em": v}) + "\n" for k, v in b.items()))
  out = subprocess.run([sys.executable, "-m", "ssp_jax.eval.compare", "--questions", str(qf),
                        "--run", f"a={pa}", "--run", f"b={pb}", "--out", str(tmp_path / "r.json")],
                       capture_output=True, text=True, timeout=60)
  assert out.returncode == 0, out.stderr
  assert "hops=2" in out.stdout and json.loads((tmp_path / "r.json").read_text())["pairs"]
  bad = subprocess.run([sys.executable, "-m", "ssp_jax.eval.compare", "--run", "a"],
                       capture_output=True, text=True, timeout=60)
  assert bad.returncode == 2 and "NAME=PREDICTIONS" in bad.stderr
