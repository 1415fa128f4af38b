"""Rematerialisation policies (models.decoder.REMAT_POLICIES): every policy gives the same
gradients, and `dots_flash` keeps cuDNN's flash-attention forward out of the backward pass.

The cuDNN path cannot run on a CPU, but it can be traced: with the wrapper's cuDNN version and
compute-capability checks answered as on an H100, `jax.make_jaxpr` of the gradient shows how
many attention forwards the step runs (the jaxpr is never lowered)."""
import collections
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from models import decoder

CFG = models.ModelConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2,
                         num_heads=4, num_kv_heads=2, head_dim=16)
T = 64


def _loss(remat, attn_impl, dtype=jnp.float32, unroll=False):
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, CFG.vocab_size, (2, T)), jnp.int32)
  seg = jnp.asarray(np.repeat([[1] * 40 + [2] * 20 + [0] * 4], 2, 0), jnp.int32)
  pos = jnp.asarray(np.repeat([list(range(40)) + list(range(20)) + [0] * 4], 2, 0), jnp.int32)

  def f(params):
    h = decoder.hidden_states(CFG, params, tokens, positions_BT=pos, segment_ids_BT=seg,
                              dtype=dtype, remat=remat, attn_impl=attn_impl, max_segments=4,
                              unroll_layers=unroll)
    return jnp.sum(jnp.where((seg > 0)[..., None], h, 0).astype(jnp.float32) ** 2)
  return f


def _attention_calls(remat, monkeypatch):
  from jax._src.cudnn import fused_attention_stablehlo as cudnn_fa
  monkeypatch.setattr(cudnn_fa, "check_cudnn_version", lambda: 91000)
  monkeypatch.setattr(cudnn_fa, "check_compute_capability", lambda capability: True)
  params = models.init_params(CFG, jax.random.PRNGKey(0))
  jaxpr = str(jax.make_jaxpr(jax.grad(_loss(remat, "cudnn", jnp.bfloat16)))(params))
  return collections.Counter(
      "fwd" if "fwd" in m else "bwd"
      for m in re.findall(r"(dot_product_attention_(?:fwd|bwd)\w*)\[", jaxpr))


@pytest.mark.skipif(jax.devices()[0].platform == "gpu", reason="traces with faked cuDNN checks")
def test_dots_flash_runs_the_cudnn_attention_forward_once(monkeypatch):
  # `dots` saves the projections but not the attention custom call, so the backward pass runs
  # the flash forward again; `dots_flash` saves its output and statistics. A JAX upgrade that
  # renames the primitive makes dots_flash silently equal to dots: this count catches it.
  assert _attention_calls("dots", monkeypatch) == {"fwd": 2, "bwd": 1}
  assert _attention_calls("dots_flash", monkeypatch) == {"fwd": 1, "bwd": 1}
  assert _attention_calls("none", monkeypatch) == {"fwd": 1, "bwd": 1}


@pytest.mark.parametrize("remat", [r for r in decoder.REMAT_POLICIES if r != "none"])
def test_every_policy_gives_the_gradients_of_no_remat(remat):
  impl = "cudnn" if jax.devices()[0].platform == "gpu" else "xla"
  dtype = jnp.bfloat16 if impl == "cudnn" else jnp.float32
  params = models.init_params(CFG, jax.random.PRNGKey(1))
  ref = jax.grad(_loss("none", impl, dtype))(params)
  got = jax.grad(_loss(remat, impl, dtype))(params)
  tol = 1e-4 if dtype == jnp.float32 else 3e-2   # of each gradient's largest entry
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    np.testing.assert_allclose(a, b, rtol=0, atol=tol * np.abs(b).max())


@pytest.mark.parametrize("remat", ["none", "dots", "full"])
def test_unrolled_layers_give_the_scans_gradients_without_layer_loops(remat):
  """rl.layer_loop="unrolled" (unroll_layers): the same loss and gradients as the scan, and the
  compiled gradient has no while loop left (the scan's forward and backward loops, with their
  [L, ...] stacks of saved activations and per-layer weight slices, are straight-line code)."""
  params = models.init_params(CFG, jax.random.PRNGKey(2))
  f_scan, f_unrolled = _loss(remat, "xla"), _loss(remat, "xla", unroll=True)
  (l0, g0), (l1, g1) = (jax.jit(jax.value_and_grad(f))(params) for f in (f_scan, f_unrolled))
  np.testing.assert_allclose(float(l1), float(l0), rtol=1e-6)
  for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g0)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0,
                               atol=1e-4 * np.abs(np.asarray(b)).max())   # fp32 reassociation
  loops = lambda f: len(re.findall(r" while\(", jax.jit(jax.grad(f)).lower(params).compile()
                                   .as_text()))
  assert loops(f_scan) >= 2 and loops(f_unrolled) == 0


@pytest.mark.parametrize("unroll", [True, 2])
def test_unrolled_layers_still_recompute_under_remat(unroll):
  """Straight-line layers let XLA's CSE merge the backward's recomputation into the forward
  (then `remat` silently saves what it should recompute); the checkpoint prevents CSE when
  unrolled. The compiled gradient with remat "dots_flash" (on the XLA path: the matmuls saved)
  runs the softmax's and SiLU's exponentials twice a layer, with "none" once."""
  params = models.init_params(CFG, jax.random.PRNGKey(3))
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, CFG.vocab_size, (2, T)), jnp.int32)

  def exps(remat):
    f = lambda p: jnp.sum(decoder.hidden_states(CFG, p, tokens, remat=remat,
                                                unroll_layers=unroll) ** 2)
    return len(re.findall(r"\bexponential\(", jax.jit(jax.grad(f)).lower(params).compile()
                          .as_text()))
  assert exps("dots_flash") == 2 * exps("none") > 0
