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
    if l["kv_layout"] == "paged":   # the pool allocated holds at least the pages in use
      assert l["kv_pool_bytes"] >= l["kv_bytes_estimate"] > 0


def test_dense_knobs_override_reaches_the_lines_and_bad_ones_exit_2():
  """--dense-knobs W,S,B times the dense kernel with other Triton settings (one a process); the
  lines say which; anything but three positive integers is an error naming the flag."""
  r = _bench("--tiny", "--dense-knobs", "4,2", "--peer", "none")
  assert r.returncode == 2 and "--dense-knobs '4,2'" in r.stderr.strip().splitlines()[-1]
  r = _bench("--tiny", "--dense-knobs", "4,2,16", "--decode-attention", "pallas_rope",
             "--peer", "none", "--repeats", "1")
  assert r.returncode == 0, r.stderr[-2000:]
  lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
  single = [l for l in lines if l["bench"] == "sampler_single_turn"]
  assert single and all(l["dense_knobs"] == "4,2,16" and l["decode_tok_s"] > 0 for l in single)


def test_dense_knobs_replace_the_kernels_defaults_in_the_process(monkeypatch):
  """The flag installs its settings where the kernel reads them (dense_pallas.default_knobs),
  for every cache length and head size."""
  from ssp_jax.sampling import dense_pallas as DP
  monkeypatch.setattr(DP, "default_knobs", DP.default_knobs)   # restored after the test
  monkeypatch.syspath_prepend(os.path.join(ROOT, "bench"))
  import sampler as bench_sampler
  assert DP.default_knobs(384, 64) == (4, 3, 128) and DP.default_knobs(1680, 128) == (2, 3, 64)
  assert bench_sampler.main(["--tiny", "--no-single", "--peer", "none",
                             "--dense-knobs", "8,1,32"]) == 0
  assert DP.default_knobs(384, 64) == DP.default_knobs(1680, 128) == (8, 1, 32)


def test_paged_knobs_replace_the_paged_kernels_defaults_and_reach_the_lines(monkeypatch, capsys):
  """--paged-knobs W,S,B does for the paged kernel what --dense-knobs does for the dense one;
  a paged multi-turn line names the setting; a malformed value exits 2 naming the flag."""
  import retrieval.base  # noqa: F401  the package, imported before bench/ (bench/retrieval.py)
  from ssp_jax.sampling import paged_pallas as PP
  monkeypatch.setattr(PP, "default_knobs", PP.default_knobs)   # restored after the test
  monkeypatch.syspath_prepend(os.path.join(ROOT, "bench"))
  import sampler as bench_sampler
  assert PP.default_knobs(64) == (4, 2, PP.MAX_BLOCK)
  assert bench_sampler.main(["--tiny", "--no-single", "--peer", "none", "--kv-layout", "paged",
                             "--multiturn", "--mt-max-new", "16", "--mt-max-obs", "8",
                             "--paged-knobs", "2,2,64"]) == 0
  assert PP.default_knobs(64) == PP.default_knobs(128) == (2, 2, 64)
  lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
  multi = [l for l in lines if l["bench"] == "sampler_multi_turn"]
  assert multi and all(l.get("paged_knobs") == "2,2,64" for l in multi), multi
  r = _bench("--tiny", "--paged-knobs", "2,2")
  assert r.returncode == 2 and "--paged-knobs '2,2'" in r.stderr.strip().splitlines()[-1]


def test_direct_out_flag_sets_the_kernels_default_and_reaches_the_lines(monkeypatch, capsys):
  """--direct-out on / off sets dense_pallas.DIRECT_OUT for the process (the dense and paged
  kernels read it at each call); the lines say which."""
  from ssp_jax.sampling import dense_pallas as DP
  monkeypatch.setattr(DP, "DIRECT_OUT", DP.DIRECT_OUT)   # restored after the test
  monkeypatch.syspath_prepend(os.path.join(ROOT, "bench"))
  import sampler as bench_sampler
  assert bench_sampler.main(["--tiny", "--peer", "none", "--repeats", "1",
                             "--decode-attention", "pallas_rope", "--direct-out", "on"]) == 0
  assert DP.DIRECT_OUT is True
  lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
  single = [l for l in lines if l["bench"] == "sampler_single_turn"]
  assert single and all(l["direct_out"] is True and l["decode_tok_s"] > 0 for l in single)
  r = _bench("--tiny", "--direct-out", "yes")
  assert r.returncode == 2 and "--direct-out" in r.stderr


def test_decode_matmul_flag_runs_both_gemm_paths_and_reaches_the_lines(monkeypatch, capsys):
  """--decode-matmul xla,pallas: one single-turn line each, naming it; the pallas one runs
  the Pallas GEMMs (traced: the tiny model's 8 rows padded to 16); a bad name exits 2."""
  from ssp_jax.sampling import gemm_pallas as GP
  calls = []
  real = GP.matmul
  monkeypatch.setattr(GP, "matmul", lambda *a, **k: calls.append(1) or real(*a, **k))
  monkeypatch.syspath_prepend(os.path.join(ROOT, "bench"))
  import sampler as bench_sampler
  assert bench_sampler.main(["--tiny", "--peer", "none", "--repeats", "1",
                             "--decode-attention", "pallas_rope",
                             "--decode-matmul", "xla,pallas"]) == 0
  lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
  single = [l for l in lines if l["bench"] == "sampler_single_turn"]
  assert [l["decode_matmul"] for l in single] == ["xla", "pallas"]
  assert all(l["decode_tok_s"] > 0 for l in single) and calls
  r = _bench("--tiny", "--decode-matmul", "cublas")
  assert r.returncode == 2 and "--decode-matmul 'cublas'" in r.stderr


def test_matmul_knobs_take_a_sweeps_fastest_settings(tmp_path, monkeypatch, capsys):
  """--matmul-knobs FILE (a bench/decode_gemm.py output): the fastest Pallas line per weight
  shape sets that GEMM's knobs in the loop (lines with an error or a large rel_err skipped;
  block_m lowered at fewer rows; shapes not swept keep gemm_pallas.default_knobs); the line
  carries the table; a file without a usable line exits 2 naming the flag."""
  import jax
  from ssp_jax.sampling import gemm_pallas as GP
  jax.clear_caches()   # GP.matmul traced by an earlier test would not call check again
  default = GP.default_knobs
  monkeypatch.setattr(GP, "default_knobs", default)   # restored after main replaces it
  monkeypatch.syspath_prepend(os.path.join(ROOT, "bench"))
  import sampler as bench_sampler
  line = lambda gemm, K, N, knobs, us, **kw: json.dumps(
      {"bench": "decode_gemm", "impl": "pallas", "gemm": gemm, "K": K, "N": N,
       "knobs": knobs, "us": us, "rel_err": 0.004, **kw})
  sweep = tmp_path / "gm.jsonl"
  sweep.write_text("\n".join([   # the tiny model: qkv 64 x 128, o 64 x 64, down 128 x 64
      line("qkv", 64, 128, [64, 16, 32, 1, 2, 3], 5.0),             # the fastest qkv: taken
      line("qkv", 64, 128, [64, 32, 64, 1, 4, 4], 9.0),
      line("qkv", 64, 128, [16, 64, 16, 1, 4, 4], 1.0, error="x"),   # failed: skipped
      line("qkv", 64, 128, [32, 64, 16, 1, 4, 4], 1.0, rel_err=0.5), # wrong: skipped
      line("down", 128, 64, [64, 16, 32, 2, 4, 4], 3.0),
      json.dumps({"bench": "decode_gemm", "impl": "xla", "gemm": "o", "K": 64, "N": 64,
                  "knobs": None, "us": 0.5})]) + "\n")
  used = []
  real_check = GP.check
  monkeypatch.setattr(GP, "check", lambda M, K, N, kn, *a: used.append((K, N, tuple(kn)))
                      or real_check(M, K, N, kn, *a))
  assert bench_sampler.main(["--tiny", "--peer", "none", "--repeats", "1",
                             "--decode-matmul", "pallas", "--matmul-knobs", str(sweep)]) == 0
  out = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
  single = [l for l in out if l["bench"] == "sampler_single_turn"]
  assert single and single[0]["matmul_knobs"] == {"64x128": [64, 16, 32, 1, 2, 3],
                                                  "128x64": [64, 16, 32, 2, 4, 4]}
  knobs = {(K, N): kn for K, N, kn in used}   # the tiny batch's 8 rows run as 16: block_m 16
  assert knobs[(64, 128)] == (16, 16, 32, 1, 2, 3)
  assert knobs[(128, 64)] == (16, 16, 32, 2, 4, 4)
  assert knobs[(64, 64)] == tuple(default(16, 64, 64, False))   # o: not swept
  bad = tmp_path / "bad.jsonl"
  bad.write_text(line("qkv", 64, 128, [64, 16, 32, 1, 2, 3], 5.0, error="x") + "\n")
  for path in (bad, tmp_path / "missing.jsonl"):
    r = _bench("--tiny", "--decode-matmul", "pallas", "--matmul-knobs", str(path))
    assert r.returncode == 2 and "--matmul-knobs" in r.stderr, r.stderr[-500:]


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
  monkeypatch.syspath_prepend(os.path.join(ROOT, "bench"))   # sys.path restored after the test
  import sampler as bench_sampler                             # (it puts the repo root first)
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


def test_profile_writes_a_trace_that_trace_summary_reads(tmp_path, monkeypatch):
  """--profile runs each measurement once more under the JAX profiler; trace_summary.py sums the
  trace's events per track (here the CPU host threads: no GPU on the runner)."""
  prof = str(tmp_path / "prof")
  r = _bench("--tiny", "--multiturn", "--repeats", "1", "--peer", "none", "--no-warmup",
             "--tail-min-batch", "2", "--profile", prof)
  assert r.returncode == 0, r.stderr[-2000:]
  multi = [json.loads(x) for x in r.stdout.splitlines() if '"sampler_multi_turn"' in x][0]
  e = multi["engine_stats"]   # the timed run's stats, not the profiled one's
  assert e["policy_tokens"] + e["wait_slot_steps"] + e["empty_slot_steps"] == e["slot_steps"]
  assert e["kv_read_over_used"] >= 1.0
  assert sorted(os.listdir(prof)) == ["engine_b8_dense_einsum", "single_tiny_b8_p128_dense_einsum"]
  s = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "trace_summary.py"), prof,
                      "--match", "", "--top", "5"], capture_output=True, text=True, timeout=300)
  assert s.returncode == 0, s.stderr[-2000:]
  tracks = [json.loads(x) for x in s.stdout.splitlines()]
  engine = [t for t in tracks if t["trace"].startswith("engine_") and t["thread"] == "python"]
  assert engine and engine[0]["busy_ms"] > 0 and len(engine[0]["top"]) == 5
  assert all(0.0 <= t["idle_frac"] <= 1.0 for t in tracks)
  assert any("generate" in row["name"] for row in engine[0]["top"])
  classed = engine[0]["by_class"]   # every event in one class, so at least the top rows' time
  assert sum(classed.values()) >= sum(r["total_ms"] for r in engine[0]["top"]) - 1e-2
  monkeypatch.syspath_prepend(os.path.join(ROOT, "bench"))   # undone after the test: bench/
  import trace_summary                                        # retrieval.py shadows retrieval/
  assert [trace_summary.kernel_class(n) for n in (
      "nvjet_sm90_tst_320x64_64x4_1x2_h_bz_NNT", "cudnn_generated_fort_native_sdpa_sm90_flash_bprop",
      "paged_decode_attention", "input_reduce_fusion", "loop_transpose_fusion", "fusion")] == [
      "gemm", "attention", "attention", "reduce", "copy", "other"]
  gpu = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "trace_summary.py"), prof],
                       capture_output=True, text=True, timeout=300)   # default: GPU tracks only
  assert gpu.returncode == 2 and "--match ''" in gpu.stderr and "/host:CPU" in gpu.stderr
  os.makedirs(tmp_path / "none")
  empty = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "trace_summary.py"),
                          str(tmp_path / "none")], capture_output=True, text=True, timeout=60)
  assert empty.returncode == 2 and "no *.trace.json.gz" in empty.stderr


def test_trace_gaps_split_by_length_and_name_the_kernels_around_long_ones(monkeypatch):
  monkeypatch.syspath_prepend(os.path.join(ROOT, "bench"))   # undone after the test: bench/
  import trace_summary                                        # retrieval.py shadows retrieval/
  ev = lambda ts, dur, name: {"ts": ts, "dur": dur, "name": name}
  evs = [ev(0, 5, "gemm.1"), ev(6, 2, "fusion.3"), ev(7, 30, "attn"),   # nested: no gap
         ev(40, 1, "fusion.9"), ev(41, 1, "while_cond"), ev(101, 4, "gemm.2"),
         ev(350, 1, "gemm.7")]
  g = trace_summary.gaps(evs, top=5)
  assert g["by_us"] == {"<2": {"count": 1, "ms": 0.001}, "<5": {"count": 1, "ms": 0.003},
                        "<200": {"count": 1, "ms": 0.059}, ">=200": {"count": 1, "ms": 0.245}}
  # gaps of 10 us or more, longest total first, named by the kernels' grouped names
  assert [(r["after"], r["before"], r["count"], r["mean_us"]) for r in g["top_pairs"]] == [
      ("gemm", "gemm", 1, 245.0), ("while_cond", "gemm", 1, 59.0)]


def test_issue14_script_rejects_an_unknown_stage(tmp_path):
  """bench/issue14_h200.sh (the GPU measurements, run by hand on an H200) parses, and a stage it
  does not know is an error naming the stages, before anything runs."""
  script = os.path.join(ROOT, "bench", "issue14_h200.sh")
  assert subprocess.run(["bash", "-n", script]).returncode == 0
  r = subprocess.run(["bash", script, str(tmp_path / "out")], capture_output=True, text=True,
                     env=dict(os.environ, STAGES="z"), timeout=60)
  assert r.returncode == 2 and "unknown stage 'z' (use a, b, c, d)" in r.stderr
  r = subprocess.run(["bash", script], capture_output=True, text=True, timeout=60)
  assert r.returncode == 2 and 'usage: STAGES="a b c d"' in r.stderr
