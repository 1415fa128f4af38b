"""sampling/gemm_pallas.py: the decode step's layer GEMMs (K split over programs; the RMSNorm,
bias, SiLU and residual adds inside) against jnp.dot and models.layers.rms_norm in Pallas's
interpret mode; their GPU lowering; the decode step and whole rollouts with
rollout.decode_matmul="pallas" against XLA's GEMMs."""
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from models import layers as L_
from ssp_jax import sampling as S
from ssp_jax.sampling import gemm_pallas as GP

from test_head_pallas import decode_loop_cuda_text
from test_rollout_overhead import engine_refuses_bad_choices, sampled_rollouts_equal
from test_rollout_loop import PROMPTS, _engine, model, tags  # noqa: F401 (fixtures)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _inputs(M, K, N, dtype, swiglu=False, seed=0):
  r = np.random.default_rng(seed)
  a = jnp.asarray(r.normal(size=(M, K)), dtype)
  b = jnp.asarray(r.normal(size=(K, N)) / np.sqrt(K), dtype)
  n = N // 2 if swiglu else N
  res = jnp.asarray(r.normal(size=(M, n)), dtype)
  bias = jnp.asarray(r.normal(size=(n,)), dtype)
  g = jnp.asarray(1 + 0.2 * r.normal(size=(K,)), dtype)
  return a, b, res, bias, g


def _ref(a, b, res=None, bias=None, g=None, swiglu=False, eps=1e-6):
  """fp32 from the same (rounded) inputs; the norm as the model rounds it."""
  if g is not None:
    a = L_.rms_norm(a, g, eps)
  y = jnp.dot(a.astype(jnp.float32), b.astype(jnp.float32), precision=jax.lax.Precision.HIGHEST)
  if bias is not None:
    y = y + bias.astype(jnp.float32)
  if swiglu:
    F = y.shape[1] // 2
    y = jax.nn.silu(y[:, :F]) * y[:, F:]
  if res is not None:
    y = y + res.astype(jnp.float32)
  return np.asarray(y)


CASES = [   # M, K, N, knobs (None: default_knobs), residual, bias, norm, swiglu
    (32, 256, 128, GP.Knobs(16, 64, 64, 1, 4, 2), False, False, False, False),
    (32, 256, 128, GP.Knobs(32, 32, 32, 4, 4, 3), False, False, False, False),
    (32, 256, 128, GP.Knobs(16, 16, 64, 2, 4, 3), True, True, False, False),   # joined by XLA
    (32, 256, 128, GP.Knobs(32, 64, 128, 1, 4, 3), True, True, False, False),  # in the kernel
    (32, 256, 128, None, False, True, True, False),                            # q/k/v's
    (32, 256, 256, None, False, False, True, True),                            # gate/up's
    (32, 128, 256, GP.Knobs(16, 32, 32, 1, 4, 2), False, False, False, True),
    (40, 128, 64, None, True, False, False, False),                            # rows padded
    (8, 64, 128, None, False, False, True, True),
]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("M,K,N,knobs,residual,bias,norm,swiglu", CASES)
def test_matmul_equals_the_reference(M, K, N, knobs, residual, bias, norm, swiglu, dtype):
  """fp32: within accumulation-order rounding; bf16: rounded once, so within half a unit in
  the last place of the fp32 result (2^-8 relative) of the same inputs."""
  a, b, res, bi, g = _inputs(M, K, N, dtype, swiglu)
  kw = dict(bias_N=bi if bias else None, norm_K=g if norm else None)
  got = GP.matmul(a, b, res if residual else None, knobs=knobs, swiglu=swiglu, interpret=True,
                  **kw)
  assert got.shape == (M, N // 2 if swiglu else N) and got.dtype == dtype
  want = _ref(a, b, res if residual else None, kw["bias_N"], kw["norm_K"], swiglu)
  if dtype == jnp.float32:
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-5, rtol=1e-5)
  else:
    np.testing.assert_allclose(np.asarray(got, np.float32), want, rtol=2 ** -8, atol=1e-3)


def test_tolerance_catches_a_missing_k_block():
  """The fp32 tolerance is sharp: a kernel that skipped the last 16 of K would fail."""
  a, b, *_ = _inputs(32, 256, 128, jnp.float32)
  got = np.asarray(GP.matmul(a, b, knobs=GP.Knobs(32, 64, 16, 4), interpret=True))
  short = _ref(a[:, :240], b[:240])
  assert np.abs(got - short).max() > 50 * 2e-5


def test_knobs_that_do_not_fit_name_the_knob():
  a, b, res, _, g = _inputs(32, 256, 128, jnp.float32)
  for kn, msg in ((GP.Knobs(block_m=24), "block_m=24: must be a power of two"),
                  (GP.Knobs(block_n=256), "block_n=256: must divide N = 128"),
                  (GP.Knobs(block_k=64, splits=3), "splits=3, block_k=64"),
                  (GP.Knobs(block_k=128, splits=4), "splits=4, block_k=128")):
    with pytest.raises(ValueError, match=msg):
      GP.matmul(a, b, knobs=kn, interpret=True)
  with pytest.raises(ValueError, match="splits must be 1 with swiglu"):
    GP.matmul(a, b, knobs=GP.Knobs(splits=2), swiglu=True, interpret=True)
  with pytest.raises(ValueError, match="splits must be 1 with a norm"):
    GP.matmul(a, b, norm_K=g, knobs=GP.Knobs(splits=2), interpret=True)
  with pytest.raises(ValueError, match="swiglu takes no residual"):
    GP.matmul(a, b, res[:, :64], swiglu=True, interpret=True)


# the decode step's GEMMs of Qwen2.5-0.5B and -7B: K, N, one share (norm or swiglu)
MODEL_GEMMS = [(896, 1152, True), (896, 896, False), (896, 4864, True), (4864, 896, False),
               (3584, 4608, True), (3584, 3584, False), (3584, 18944, True), (18944, 3584, False)]


@pytest.mark.parametrize("M", [256, 48, 16])
def test_default_knobs_fit_the_models_gemms(M):
  """default_knobs fit every decode GEMM of the 0.5B and 7B models (check passes; one share
  where a norm or swiglu needs whole rows); at 256 rows of 0.5B the q/k/v GEMM takes
  32-column tiles (144 programs, not 72), o (K 896) 64-column tiles in two K shares (112
  programs: the H100 sweep's best) and the down projection (K 4,864) four K shares."""
  for K, N, one in MODEL_GEMMS:
    kn = GP.default_knobs(M, K, N, one)
    assert GP.check(M, K, N, kn, one) == kn._replace(block_m=min(kn.block_m, M))
    assert (kn.splits == 1) or not one
  assert GP.default_knobs(256, 896, 1152, True).block_n == 32
  assert GP.default_knobs(256, 896, 896)[1:4] == (64, 64, 2)
  assert GP.default_knobs(256, 4864, 896).splits == 4
  assert not GP.eligible(16, 72, 128) and not GP.eligible(16, 64, 72, swiglu=True)
  assert GP.eligible(3, 64, 128, swiglu=True)


def test_lowers_to_triton_for_gpus():
  """Each 0.5B decode GEMM as the step calls it (norm + bias, residual, norm + swiglu,
  residual with K shares) lowers for CUDA: Pallas's Triton lowering checks its blocks here."""
  M = 256
  sd = lambda *s: jax.ShapeDtypeStruct(s, jnp.bfloat16)
  calls = [
      (lambda a, b, g, bi: GP.matmul(a, b, bias_N=bi, norm_K=g), (sd(M, 896), sd(896, 1152),
                                                                 sd(896), sd(1152))),
      (lambda a, b, x: GP.matmul(a, b, x), (sd(M, 896), sd(896, 896), sd(M, 896))),
      (lambda a, b, g: GP.matmul(a, b, norm_K=g, swiglu=True), (sd(M, 896), sd(896, 9728),
                                                                 sd(896))),
      (lambda a, b, x: GP.matmul(a, b, x), (sd(M, 4864), sd(4864, 896), sd(M, 896))),
  ]
  for f, args in calls:
    text = jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert "decode_gemm" in text


def _tiny():
  cfg = models.ModelConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2,
                           num_heads=4, num_kv_heads=2, head_dim=16, qkv_bias=True)
  return cfg, models.init_params(cfg, jax.random.key(0), std=0.2)


@pytest.mark.parametrize("attn,layout", [("einsum", "dense"), ("pallas_rope", "dense"),
                                         ("pallas_rope", "paged")])
def test_greedy_decode_with_pallas_gemms_equals_xla(attn, layout):
  """The sampler's while_loop, greedy, fp32, decode_matmul "pallas" == "xla" token for token
  (log-probs within 1e-5), with the attention kernels of both layouts (RoPE in the kernel:
  the q/k/v GEMM's output goes straight to it)."""
  cfg, p = _tiny()
  B, P, N = 3, 6, 10
  tables = S.build_stop_tables([b"x"] * cfg.vocab_size, []).to_device()
  dparams = S.make_decode_params(cfg, p, jnp.float32, True)
  prompt = jax.random.randint(jax.random.key(1), (B, P), 0, cfg.vocab_size)
  rows = jnp.arange(B, dtype=jnp.int32)
  out = {}
  for mm in ("xla", "pallas"):
    if layout == "dense":
      st = S.init_state(cfg, B, P + N + 4, tables.prefix_VM.shape[1], jnp.float32)
      st = S.prefill_rows(cfg, st, p, rows, prompt[:, :-1], jnp.zeros((B,), jnp.int32),
                          dtype=jnp.float32)
    else:
      st = S.init_paged_state(cfg, B, B * 4 + 1, 8, 4, tables.prefix_VM.shape[1], jnp.float32)
      table = jnp.arange(B * 4, dtype=jnp.int32).reshape(B, 4) + 1
      st = st._replace(cache={**st.cache, "table": table})
      k, v = S.prefill_pages(cfg, st.cache["k"], st.cache["v"], dparams, table,
                             prompt[:, :-1], jnp.zeros((B,), jnp.int32), dtype=jnp.float32)
      st = st._replace(cache={**st.cache, "k": k, "v": v})
    st = S.set_rows(st, rows, prompt[:, -1], jnp.full((B,), P - 1, jnp.int32),
                    jnp.ones((B,), bool))
    _, out[mm] = S.decode(cfg, st, dparams, tables, jnp.asarray([-1], jnp.int32),
                          jnp.ones((B,), bool), jnp.full((B,), N, jnp.int32), jnp.int32(B + 1),
                          jax.random.key(2), num_steps=N, sampling=S.SamplingParams(0.0),
                          dtype=jnp.float32, attn_impl=attn, matmul=mm)
  np.testing.assert_array_equal(np.asarray(out["pallas"].tokens_BN),
                                np.asarray(out["xla"].tokens_BN))
  np.testing.assert_allclose(np.asarray(out["pallas"].logprobs_BN),
                             np.asarray(out["xla"].logprobs_BN), atol=1e-5)


def test_decode_loop_runs_the_kernels_in_place_of_the_norm_and_silu_fusions(monkeypatch):
  """The decode while-loop lowered for CUDA (the kernels take their GPU path, as on a GPU
  host), bf16, 32 rows: with matmul "pallas" the loop holds the GEMM kernel for q/k/v, o and
  down and its SwiGLU variant for gate/up, and no [B, 2F] gate/up value (SiLU runs inside);
  with "xla" neither kernel is there and the [B, 2F] value is."""
  import re
  cfg, p = _tiny()
  B = 32
  gate_up = re.compile(rf"tensor<{B}x1x{2 * cfg.intermediate_size}xbf16>")
  for mm in ("xla", "pallas"):
    text = decode_loop_cuda_text(cfg, p, B, 64, monkeypatch, attn_impl="pallas_rope", matmul=mm)
    # each kernel is lowered once per distinct signature (the layers share them)
    calls = len(re.findall(r'name = "decode_gemm"', text))
    swiglu = len(re.findall(r'name = "decode_gemm_swiglu"', text))
    if mm == "pallas":   # q/k/v (norm, bias), o (residual), down (residual)
      assert (calls, swiglu) == (3, 1), (calls, swiglu)
      assert not gate_up.search(text)
    else:
      assert calls == swiglu == 0 and gate_up.search(text)


def test_rollout_config_names_a_bad_decode_matmul():
  from ssp_jax.rollout.config import check_rollout_config, get_rollout_config
  rc = get_rollout_config()
  rc.decode_matmul = "pallas"
  check_rollout_config(rc)
  rc.decode_matmul = "cublas"
  with pytest.raises(ValueError, match="rollout.decode_matmul='cublas' unknown"):
    check_rollout_config(rc)


def _bench(*args):
  return subprocess.run([sys.executable, os.path.join(ROOT, "bench", "decode_gemm.py"), *args],
                        capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_decode_gemm_bench_prints_both_paths_and_rejects_bad_flags():
  """bench/decode_gemm.py on the tiny shapes: an XLA line and a Pallas line (the default's)
  per GEMM, each timed; `--mode layers` one line per decode_matmul (each within bf16 rounding
  of XLA's layer); unknown names exit 2 naming the flag."""
  import json
  r = _bench("--models", "tiny", "--gemms", "down,gate_up", "--rows", "24", "--grid", "default",
             "--iters", "1", "--repeats", "1", "--layers", "2")
  assert r.returncode == 0, r.stderr[-2000:]
  lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
  timed = [d for d in lines if d["bench"] == "decode_gemm"]
  assert {(d["gemm"], d["impl"]) for d in timed} == {(g, i) for g in ("down", "gate_up")
                                                     for i in ("xla", "pallas")}
  assert all(d["us"] > 0 and "error" not in d for d in timed)
  # each line's error against the float32 XLA form: bf16 rounding, not a wrong kernel
  assert all(0 <= d["rel_err"] < 0.03 for d in timed), [d["rel_err"] for d in timed]
  r = _bench("--mode", "layers", "--models", "tiny", "--rows", "16", "--iters", "1",
             "--repeats", "1")
  assert r.returncode == 0, r.stderr[-2000:]
  lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
  assert [d["decode_matmul"] for d in lines] == ["xla", "pallas", "pallas_residual"]
  assert all(d["us_per_layer"] > 0 for d in lines)
  assert all(d["vs_xla"] > 0 and 0 <= d["rel_diff_vs_xla"] < 0.05 for d in lines[1:])
  for flag, bad in (("--models", "13b"), ("--gemms", "lm_head"), ("--rows", "many")):
    r = _bench(flag, bad)
    assert r.returncode == 2 and flag in r.stderr, (flag, r.stderr[-500:])


@pytest.mark.parametrize("layout", ["dense", "paged"])
def test_pallas_gemms_give_the_same_rollouts(model, tags, layout, monkeypatch):
  """rollout.decode_matmul="pallas" (interpret mode here): sampled multi-turn rollouts with
  searches, early exits and the tail shrinking to batches that are not multiples of 16 (rows
  padded) are the same tokens as with XLA's GEMMs, the log-probs within fp32 rounding. The
  engine names the field for an unknown name and a backend without Triton."""
  sampled_rollouts_equal(model, tags, layout, "decode_matmul")
  engine_refuses_bad_choices(model, "decode_matmul", monkeypatch)


def test_pallas_residual_runs_only_o_and_down_and_gives_the_same_rollouts(model, tags,
                                                                          monkeypatch):
  """rollout.decode_matmul="pallas_residual": the decode step's kernels are the two GEMMs with
  a residual add (o and down: no norm, no swiglu, a residual), q/k/v and gate/up stay XLA's;
  sampled multi-turn rollouts (dense layout, tail batches padded to 16 rows) are the same
  tokens as with XLA's GEMMs; the engine refuses it on a backend without Triton."""
  calls = []
  real = GP.matmul
  monkeypatch.setattr(GP, "matmul", lambda a, b, r=None, **k: calls.append(
      (k.get("norm_K") is not None, k.get("swiglu", False), r is not None)) or real(a, b, r, **k))
  sampled_rollouts_equal(model, tags, "dense", "decode_matmul", impl="pallas_residual")
  assert calls and set(calls) == {(False, False, True)}
  with monkeypatch.context() as m:
    m.setattr(jax, "default_backend", lambda: "tpu")
    with pytest.raises(ValueError, match="rollout.decode_matmul='pallas_residual' is a Triton"):
      _engine(model, None, decode_matmul="pallas_residual")
