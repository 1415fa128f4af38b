"""bench/sampler.py --tiny runs on CPU and prints its JSON lines (multi-turn: vs_single_turn)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bench(*args):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  return subprocess.run([sys.executable, os.path.join(ROOT, "bench", "sampler.py"), *args],
                        capture_output=True, text=True, env=env, timeout=600)


def test_tiny_multiturn_prints_vs_single_turn_for_both_layouts():
  r = _bench("--tiny", "--multiturn", "--kv-layout", "dense,paged", "--repeats", "1",
             "--peer", "none", "--paper-step")
  assert r.returncode == 0, r.stderr[-2000:]
  lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
  single = {l["kv_layout"]: l for l in lines if l["bench"] == "sampler_single_turn"}
  multi = {l["kv_layout"]: l for l in lines if l["bench"] == "sampler_multi_turn"}
  mem = [l for l in lines if l["bench"] == "sampler_memory"]
  step = {l["kv_layout"]: l for l in lines if l["bench"] == "sampler_paper_step"}
  assert set(single) == set(multi) == set(step) == {"dense", "paged"} and len(mem) == 4
  for l in step.values():   # 4 proposer + 20 solver trajectories in --tiny, budgets per prompt
    assert sum(l["stop_reasons"].values()) == l["proposers"] + l["solvers"] == 24
    assert 0 < l["all_tokens"] <= l["budget_tokens"] and l["rollout_s"] > 0
  for lay, m in multi.items():
    assert m["single_turn_decode_tok_s"] == single[lay]["decode_tok_s"] > 0
    assert abs(m["vs_single_turn"] - m["policy_tok_s"] / single[lay]["decode_tok_s"]) < 1e-2
    assert m["policy_tokens"] > 0 and m["searches"] > 0
  assert multi["paged"]["engine_stats"]["kv_pages_peak"] > 0
  assert single["paged"]["decode_attention"] == "gather"
  for l in mem:
    assert l["estimate_bytes"] == 2 * l["weights_bytes"] + l["kv_bytes_estimate"] > 0


def test_peer_tunix_without_tunix_is_a_one_line_error():
  r = _bench("--tiny", "--peer", "tunix", "--no-single")
  try:
    import tunix.generate.sampler  # noqa: F401
    return   # tunix importable here: the peer runs instead (not the case on the CPU runner)
  except Exception:
    pass
  assert r.returncode == 2
  assert "--peer tunix: cannot import tunix" in r.stderr.strip().splitlines()[-1]


def _fake_tunix(root, init_body, sampler_body):
  for d in ("tunix", "tunix/generate", "tunix/models", "tunix/models/qwen2"):
    os.makedirs(os.path.join(root, d), exist_ok=True)
    open(os.path.join(root, d, "__init__.py"), "w").write("")
  open(os.path.join(root, "tunix", "__init__.py"), "w").write(init_body)
  open(os.path.join(root, "tunix", "generate", "sampler.py"), "w").write(sampler_body)
  open(os.path.join(root, "tunix", "models", "qwen2", "model.py"), "w").write("X = 1\n")


def test_tunix_import_skips_its_package_init_and_names_a_missing_module(tmp_path, monkeypatch):
  """tunix/__init__.py imports tunix's whole API; the peer needs only the sampler and the Qwen2
  model, so a failing package __init__ is bypassed, and a missing dependency of the sampler
  itself is named in the one-line reason."""
  sys.path.insert(0, os.path.join(ROOT, "bench"))
  try:
    import sampler as bench_sampler
  finally:
    sys.path.pop(0)
  drop = lambda: [sys.modules.pop(m) for m in list(sys.modules)
                  if m.split(".")[0] in ("tunix", "metrax")]
  ok, bad = str(tmp_path / "ok"), str(tmp_path / "bad")
  _fake_tunix(ok, "import a_trainer_dependency_not_installed\n", "CacheConfig = object\n")
  _fake_tunix(bad, "", "import a_sampler_dependency_not_installed\n")
  try:
    drop()
    monkeypatch.syspath_prepend(ok)
    assert bench_sampler._tunix_import_error() == ""
    import tunix.generate.sampler as ts
    assert ts.CacheConfig is object
    drop()
    monkeypatch.syspath_prepend(bad)
    why = bench_sampler._tunix_import_error()
    assert why.startswith("missing module 'a_sampler_dependency_not_installed'"), why
  finally:
    drop()
