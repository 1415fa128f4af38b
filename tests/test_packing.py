"""Sequence packing: the packer, attention per segment, packed == padded (log-probs, loss,
gradients) for every loss aggregation, and the learner's packed update (CPU, tiny model)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from models import layers
from ssp_jax.rl import batch as batch_lib
from ssp_jax.rl import learner as learner_lib
from ssp_jax.rl import losses
from ssp_jax.rl import pack as pack_lib
from ssp_jax.types import Trajectory

from rl_helpers import CFG, rl_cfg  # noqa: E402


def _trajs(lengths, seed=0):
  """Trajectories of the given response lengths, prompts of 3..5 tokens, an observation chunk
  (mask 0) inside every response longer than 8."""
  rng = np.random.default_rng(seed)
  out = []
  for i, n in enumerate(lengths):
    p = list(rng.integers(1, 64, 3 + i % 3))
    r = list(rng.integers(1, 64, n))
    mask = [1] * n
    if n > 8:
      mask[3:6] = [0, 0, 0]
    out.append(Trajectory(prompt_ids=p, response_ids=r, loss_mask=mask,
                          logprobs=list(-rng.random(n))))
  return out


def _batch(lengths, seed=0, bucket=8):
  n = len(lengths)
  rng = np.random.default_rng(seed + 1)
  roles = [0] + [1] * (n - 1)
  prompt = [0] + [1 + (i - 1) // 3 for i in range(1, n)]   # groups of 3 solver rows
  weights = [0.7] + [1.3] * (n - 1)                        # role loss weights
  return batch_lib.make_batch(_trajs(lengths, seed), rng.normal(size=n), roles,
                              prompt_index=prompt, loss_weights=weights, bucket=bucket)


LENGTHS = [40, 6, 12, 3, 25, 9, 4, 30, 7, 5]


# ---------------------------------------------------------------------------- the packer
def test_first_fit_decreasing_hand_case():
  # row 0: 7 + 3; row 1: 6 + 4; row 2: 5 + 2 (the 2 does not fit the full rows 0 and 1)
  assert pack_lib.first_fit_decreasing([3, 7, 2, 6, 4, 5], 10, 8) == [[1, 0], [3, 4], [5, 2]]
  assert pack_lib.first_fit_decreasing([1, 1, 1], 10, 2) == [[0, 1], [2]]   # max_segments
  with pytest.raises(ValueError, match="row_len"):
    pack_lib.first_fit_decreasing([11], 10, 8)


def test_packer_keeps_prompt_groups_together_and_never_splits_a_trajectory():
  b = _batch(LENGTHS)
  parts = batch_lib.split_mini_batches(b, 2, row_multiple=2)
  seen_prompts = []
  for part in parts:
    pb, placements, stats = pack_lib.pack_batch(part, 48, max_segments=4)
    real = part.prompt >= 0
    assert sorted(p.source for p in placements) == list(np.flatnonzero(real))
    seen_prompts.append(set(part.prompt[real]))
    for p in placements:
      n = int(part.length[p.source])
      assert p.length == n                               # whole, never split
      row = slice(p.start, p.start + n)
      np.testing.assert_array_equal(pb.tokens[p.row, row], part.tokens[p.source, :n])
      np.testing.assert_array_equal(pb.positions[p.row, row], np.arange(n))
      assert len(set(pb.segment_ids[p.row, row])) == 1
      assert pb.seq_tokens[p.row, p.start] == part.loss_mask[p.source].sum()
      assert np.all(pb.advantages[p.row, row] == part.advantages[p.source])
    # segments numbered 1.. in order along each row, padding (0) only after the last one
    for seg in pb.segment_ids:
      used = seg[seg > 0]
      assert np.all(np.diff(used) >= 0) and used[0] == 1 and np.all(np.diff(np.unique(used)) == 1)
      assert np.all(seg[len(used):] == 0)
    assert pb.num_rows < real.sum()             # fewer rows than trajectories
    assert stats["fill_rate"] == pytest.approx(
        part.length[real].sum() / (pb.num_rows * 48))
    assert (pb.loss_mask.sum() == part.loss_mask.sum())
  assert not (seen_prompts[0] & seen_prompts[1])          # a prompt's group in one mini-batch


def test_packing_takes_a_padded_batch():
  pb, _, _ = pack_lib.pack_batch(_batch(LENGTHS), 64)
  assert pb.PACKED and not hasattr(pb, "length")
  with pytest.raises(TypeError, match="padded ssp_jax.rl.batch.Batch, got PackedBatch"):
    pack_lib.pack_batch(pb, 64)


def test_micro_batch_bucket_is_a_power_of_two():
  assert [pack_lib.micro_batches_bucket(r, 2) for r in (1, 2, 3, 5, 9)] == [2, 2, 4, 8, 16]


# ---------------------------------------------------------------------------- attention
def test_segment_seqlens_offsets_hand_values():
  seg = jnp.array([[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 1, 1]], jnp.int32)
  seqlen, offsets = layers.segment_seqlens_offsets(seg, 3)
  np.testing.assert_array_equal(seqlen, [[3, 2, -1], [6, -1, -1]])
  np.testing.assert_array_equal(offsets, [[0, 3, -1, -1], [0, -1, -1, -1]])


@pytest.mark.parametrize("attn_impl", ["xla", "auto"])   # einsum + mask; jax.nn with the mask
def test_no_attention_across_segments(attn_impl):
  params = models.init_params(CFG, jax.random.PRNGKey(0))
  rng = np.random.default_rng(0)
  seg = np.array([[1] * 5 + [2] * 6 + [3] * 4 + [0] * 1], np.int32)
  pos = np.array([list(range(5)) + list(range(6)) + list(range(4)) + [0]], np.int32)
  tok = rng.integers(1, 64, seg.shape).astype(np.int32)
  tok2 = tok.copy()
  tok2[0, 5:11] = rng.integers(1, 64, 6)                  # another segment 2
  f = jax.jit(lambda t: models.hidden_states(CFG, params, t, positions_BT=jnp.asarray(pos),
                                             segment_ids_BT=jnp.asarray(seg),
                                             attn_impl=attn_impl, max_segments=4))
  h1, h2 = np.asarray(f(tok)), np.asarray(f(tok2))
  np.testing.assert_array_equal(h1[0, :5], h2[0, :5])           # segments 1 and 3 unchanged
  np.testing.assert_array_equal(h1[0, 11:15], h2[0, 11:15])
  assert not np.allclose(h1[0, 5:11], h2[0, 5:11])
  # and a segment sees exactly what it would see alone in its own row
  alone = models.hidden_states(CFG, params, jnp.asarray(tok[:, 11:15]))
  np.testing.assert_allclose(h1[0, 11:15], np.asarray(alone)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("chunk", [4, 5, 16])
def test_chunked_attention_equals_one_block_on_packed_and_left_padded_rows(chunk):
  """Query chunks that skip the keys after them give the one-block result on every token
  that sees a key (packed segments, left padding), and the same gradients there."""
  params = models.init_params(CFG, jax.random.PRNGKey(1))
  rng = np.random.default_rng(1)
  seg = np.array([[1] * 5 + [2] * 6 + [3] * 4 + [0] * 2,
                  [0] * 3 + [1] * 14], np.int32)
  pos = np.array([list(range(5)) + list(range(6)) + list(range(4)) + [0, 0],
                  [0] * 3 + list(range(14))], np.int32)
  tok = jnp.asarray(rng.integers(1, 64, seg.shape).astype(np.int32))
  real = seg > 0

  def h(c, p=params):
    return models.hidden_states(CFG, p, tok, positions_BT=jnp.asarray(pos),
                                segment_ids_BT=jnp.asarray(seg), attn_chunk=c)
  np.testing.assert_allclose(np.asarray(h(chunk))[real], np.asarray(h(0))[real],
                             rtol=1e-5, atol=1e-5)
  loss = lambda p, c: jnp.sum(jnp.where(jnp.asarray(real)[..., None], h(c, p), 0.0) ** 2)
  g0, g1 = jax.grad(loss)(params, 0), jax.grad(loss)(params, chunk)
  for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):   # fp32 summation order only
    np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4 * float(np.abs(a).max()))


@pytest.mark.skipif(jax.devices()[0].platform != "gpu", reason="cuDNN packed attention: GPU")
@pytest.mark.parametrize("impl", ["cudnn", "cudnn_gqa"])
def test_cudnn_packed_attention_matches_the_masked_one(impl):
  if impl == "cudnn_gqa" and not layers.cudnn_packed_gqa_ok():
    pytest.skip("this JAX's cuDNN wrapper strides packed KV offsets by the query's heads")
  rng = np.random.default_rng(0)
  B, T, N, K, H = 2, 256, 4, 2, 64
  q, k, v = (jnp.asarray(rng.normal(size=(B, T, n, H)), jnp.bfloat16) for n in (N, K, K))
  seg = np.zeros((B, T), np.int32)
  pos = np.zeros((B, T), np.int32)
  for b, lens in enumerate([(100, 60, 80), (200, 40)]):
    c = 0
    for j, n in enumerate(lens):
      seg[b, c:c + n], pos[b, c:c + n] = j + 1, np.arange(n)
      c += n
  seg, pos = jnp.asarray(seg), jnp.asarray(pos)

  def run(impl):
    def f(q, k, v):
      out = layers.fused_segment_attention(q, k, v, seg, pos, impl, 4)
      return jnp.sum(jnp.where((seg > 0)[:, :, None, None], out, 0).astype(jnp.float32) ** 2), out
    (_, out), g = jax.value_and_grad(f, argnums=(0, 1, 2), has_aux=True)(q, k, v)
    return out, g

  (o1, g1), (o2, g2) = run(impl), run("xla")
  live = np.asarray(seg > 0)
  np.testing.assert_allclose(np.asarray(o1, np.float32)[live], np.asarray(o2, np.float32)[live],
                             atol=2e-2, rtol=2e-2)
  for a, c in zip(g1, g2):
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(c, np.float32),
                               atol=5e-2, rtol=5e-2)


def _offsets_fixed(q_seqlen, kv_seqlen, q_offsets, kv_offsets, query, key):
  """The wrapper's offset conversion with JAX PR 39521 (kv offsets by the key's heads), for one
  row: what a JAX with the fix computes."""
  _, _, N, H = query.shape
  K = key.shape[2]
  return q_seqlen, kv_seqlen, q_offsets * N * H, kv_offsets * K * H


def _offsets_query_stride(q_seqlen, kv_seqlen, q_offsets, kv_offsets, query, key):
  _, _, N, H = query.shape
  return q_seqlen, kv_seqlen, q_offsets * N * H, kv_offsets * N * H


@pytest.mark.parametrize("fix,want", [(_offsets_fixed, True), (_offsets_query_stride, False),
                                      (None, False)])
def test_cudnn_gqa_probe_reads_the_wrappers_kv_stride(monkeypatch, fix, want):
  """cudnn_packed_gqa_ok runs the wrapper's own offset conversion: True only where kv offsets
  follow the key's head count; a query-strided or missing conversion keeps the repeat."""
  from jax._src.cudnn import fused_attention_stablehlo as cudnn_fa
  if fix is None:
    monkeypatch.delattr(cudnn_fa, "_fix_seqlen_offsets")
  else:
    monkeypatch.setattr(cudnn_fa, "_fix_seqlen_offsets", fix)
  layers.cudnn_packed_gqa_ok.cache_clear()
  try:
    assert layers.cudnn_packed_gqa_ok() is want
  finally:
    layers.cudnn_packed_gqa_ok.cache_clear()


@pytest.mark.parametrize("impl,gqa_ok,heads", [("cudnn", True, 4), ("cudnn", False, 4),
                                               ("cudnn_gqa", True, 2)])
def test_cudnn_paths_hand_kv_heads_as_the_wrapper_strides_them(monkeypatch, impl, gqa_ok, heads):
  """"cudnn" repeats grouped-query K/V to the 4 query heads whatever the wrapper; "cudnn_gqa"
  hands them at their own 2 heads (no repeat, no group sum in the backward) to a wrapper that
  strides KV offsets by the key's heads. cuDNN itself cannot run on a CPU: the wrapper's entry
  point is recorded (the GPU comparison against XLA is the test above and
  bench/cudnn_grad_check.py)."""
  from jax._src.cudnn import fused_attention_stablehlo as cudnn_fa
  seen = {}

  def record(q, k, v, **kw):
    seen["k"], seen["v"] = k.shape, v.shape
    return jnp.zeros_like(q)
  monkeypatch.setattr(cudnn_fa, "dot_product_attention", record)
  monkeypatch.setattr(layers, "cudnn_packed_gqa_ok", lambda: gqa_ok)
  B, T, N, K, H = 1, 8, 4, 2, 16
  q = jnp.ones((B, T, N, H), jnp.bfloat16)
  k = v = jnp.ones((B, T, K, H), jnp.bfloat16)
  seg = jnp.asarray([[1, 1, 1, 2, 2, 2, 0, 0]], jnp.int32)
  pos = jnp.asarray([[0, 1, 2, 0, 1, 2, 0, 0]], jnp.int32)
  layers.fused_segment_attention(q, k, v, seg, pos, impl, 4)
  assert seen["k"] == (B, T, heads, H) and seen["v"] == (B, T, heads, H)


def test_cudnn_gqa_is_refused_where_the_wrapper_strides_kv_by_the_query(monkeypatch):
  """On a JAX whose wrapper strides KV offsets by the query's heads, "cudnn_gqa" would read keys
  at the wrong tokens: the model call and the RL config check refuse it, naming the fix."""
  from ssp_jax.rl.config import check_rl_config
  from ssp_jax.rl.registry import RLConfigError
  monkeypatch.setattr(layers, "cudnn_packed_gqa_ok", lambda: False)
  q = jnp.ones((1, 8, 4, 16), jnp.bfloat16)
  k = jnp.ones((1, 8, 2, 16), jnp.bfloat16)
  seg = jnp.asarray([[1, 1, 1, 2, 2, 2, 0, 0]], jnp.int32)
  with pytest.raises(ValueError, match="attn_impl='cudnn'"):
    layers.fused_segment_attention(q, k, k, seg, seg, "cudnn_gqa", 4)
  roles = ("proposer", "solver")
  with pytest.raises(RLConfigError, match=r"^config\.rl\.attn_impl='cudnn_gqa' needs .*PR 39521"):
    check_rl_config(rl_cfg(attn_impl="cudnn_gqa"), roles)
  monkeypatch.setattr(layers, "cudnn_packed_gqa_ok", lambda: True)
  check_rl_config(rl_cfg(attn_impl="cudnn_gqa"), roles)   # accepted where the wrapper allows it


# ---------------------------------------------------------------------------- packed == padded
def _padded_and_packed(agg, row_len=48):
  """One mini-batch in both layouts, micro-batched [K, 2, ...] for `accumulate_grads`."""
  b = _batch(LENGTHS)
  padded = b.pad_rows(10)
  pb, placements, _ = pack_lib.pack_batch(b, row_len, max_segments=8)
  pb = pb.pad_rows(pack_lib.micro_batches_bucket(pb.num_rows, 2))
  sc = learner_lib.StepConfig(compute_dtype="float32", logprob_chunk=8, loss_agg=agg,
                              kl_coef=0.1, micro_batch_size=2,
                              remat="none", entropy_coef=0.01)
  return b, padded, pb, placements, sc


def test_packed_and_padded_log_probs_are_equal():
  params = models.init_params(CFG, jax.random.PRNGKey(3))
  b, padded, pb, placements, sc = _padded_and_packed("token-mean")
  f = jax.jit(lambda p, t, s, q: learner_lib.sequence_logprobs(
      CFG, p, t, sc, segment_ids_BT=s, positions_BT=q))
  lp_packed, ent_packed = f(params, pb.tokens, pb.segment_ids, pb.positions)
  lp_pad, ent_pad = jax.jit(lambda p, t: learner_lib.sequence_logprobs(CFG, p, t, sc))(
      params, padded.tokens)
  T = b.tokens.shape[1]
  back = pack_lib.unpack(np.asarray(lp_packed), placements, (10, T))
  ent_back = pack_lib.unpack(np.asarray(ent_packed), placements, (10, T))
  # every scored position (index >= 1 inside a trajectory) agrees
  scored = (np.arange(T)[None] >= 1) & (np.arange(T)[None] < b.length[:, None])
  np.testing.assert_allclose(back[scored], np.asarray(lp_pad)[:10][scored], atol=2e-5)
  np.testing.assert_allclose(ent_back[scored], np.asarray(ent_pad)[:10][scored], atol=2e-5)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_packed_and_padded_loss_and_gradients_are_equal(agg):
  params = models.init_params(CFG, jax.random.PRNGKey(4))
  ref = models.init_params(CFG, jax.random.PRNGKey(5))
  b, padded, pb, _, sc = _padded_and_packed(agg)
  # an off-policy behaviour so the ratio, clipping and KL all take part
  rng = np.random.default_rng(6)
  padded = padded.replace(old_logp=np.where(
      padded.loss_mask > 0, padded.old_logp - 0.3 * rng.random(padded.old_logp.shape),
      0.0).astype(np.float32))
  pb2, _, _ = pack_lib.pack_batch(padded, 48, max_segments=8)
  pb = pb2.pad_rows(pb.num_rows)

  def grads(mb):
    mb = {k: jnp.asarray(v) for k, v in learner_lib.to_micro(mb, 2).items()}
    return jax.jit(lambda p, r, m: learner_lib.accumulate_grads(p, r, m, CFG, sc, None, None))(
        params, ref, mb)

  g_pad, m_pad = grads(padded.step_inputs())
  g_pk, m_pk = grads(pb.step_inputs())
  for k in m_pad:
    assert float(m_pk[k]) == pytest.approx(float(m_pad[k]), rel=1e-4, abs=1e-6), k
  assert float(m_pad["loss"]) != 0.0
  for a, c in zip(jax.tree.leaves(g_pad), jax.tree.leaves(g_pk)):
    np.testing.assert_allclose(np.asarray(c), np.asarray(a), rtol=2e-4, atol=2e-6)


def test_learner_packed_update_matches_padded_and_reports_fill_rate():
  b = _batch(LENGTHS)
  out = {}
  for pack in (False, True):
    learner = learner_lib.Learner(CFG, rl_cfg(pack=pack, pack_len=64, mini_batch_size=2,
                                              seed=1))
    out[pack] = (learner.update(b), None)
  (m_pad, _), (m_pk, _) = out[False], out[True]
  assert len(m_pad) == len(m_pk) == 2
  # the first update is on-policy: old log-probs recomputed in the packed layout equal the
  # step's own; the second sees the moved policy in both layouts alike
  assert m_pk[0]["ppo_kl"] == 0.0 and m_pk[1]["ppo_kl"] != 0.0
  for a, c in zip(m_pad, m_pk):
    for k in ("loss", "pg_loss", "kl_loss", "grad_norm", "entropy", "loss_tokens"):
      assert c[k] == pytest.approx(a[k], rel=2e-4, abs=1e-6), k
    assert 0.5 < c["pack/fill_rate"] <= 1.0 and "pack/fill_rate" not in a
