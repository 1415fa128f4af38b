"""The fused paged decode attention (sampling/paged_pallas.py, interpret mode on a CPU) against
the gather path after writing the token, and the pools it writes against write_token's."""
import jax.numpy as jnp
import numpy as np
import pytest

from ssp_jax.sampling import paged as PG
from ssp_jax.sampling import paged_pallas as PP


def _case(B, K, G, H, T, C, P, dtype, seed=0):
  """Random pools (NaN in pages no row owns: nothing of them may reach an output), a table of
  distinct pages per row (null page 0 past each row's pages) and positions inside each row's
  pages."""
  r = np.random.default_rng(seed)
  kp = r.normal(size=(K, P, T, H)).astype(np.float32)
  vp = r.normal(size=(K, P, T, H)).astype(np.float32)
  q = r.normal(size=(B, K, G, H)).astype(np.float32)
  kn, vn = (r.normal(size=(B, K, H)).astype(np.float32) for _ in range(2))
  perm = r.permutation(np.arange(1, P))
  table = np.zeros((B, C), np.int32)
  pos = np.zeros((B,), np.int32)
  used = 0
  for b in range(B):
    n = int(r.integers(1, C + 1))
    table[b, :n] = perm[used:used + n]
    used += n
    pos[b] = int(r.integers(0, n * T))
  pos[0] = 0                                      # a row's first token
  unowned = np.setdiff1d(np.arange(P), table[table > 0])
  kp[:, unowned] = np.nan
  vp[:, unowned] = np.nan
  as_ = lambda x: jnp.asarray(x, dtype)
  return as_(q), as_(kp), as_(vp), jnp.asarray(table), jnp.asarray(pos), as_(kn), as_(vn)


def _want(q, kp, vp, table, pos, kn, vn):
  """The pre-existing path: write_token, then gather attention over slots <= pos."""
  page_B, off_B = PG.slot_of(table, pos, kp.shape[2])
  kp = PG.write_token(kp, page_B, off_B, kn)
  vp = PG.write_token(vp, page_B, off_B, vn)
  return PG.gather_attention(q, kp, vp, table, pos + 1), kp, vp


@pytest.mark.parametrize("dtype,atol", [(jnp.float32, 2e-5), (jnp.bfloat16, 3e-2)])
@pytest.mark.parametrize("G,H,T,C,splits", [
    (7, 64, 8, 8, 1),       # Qwen2.5-0.5B's heads; pages of 8 (all 8 columns one block)
    (7, 64, 16, 8, 2),      # two shares (the tail batch's split), a combine outside
    (4, 32, 64, 4, 4),      # one page a share; pages of the engine's default size
    (3, 16, 4, 16, None)])  # chosen splits for a small batch
def test_kernel_equals_write_then_gather(G, H, T, C, splits, dtype, atol):
  q, kp, vp, table, pos, kn, vn = _case(5, 2, G, H, T, C, 2 + 5 * C, dtype)
  want, kw, vw = _want(q, kp, vp, table, pos, kn, vn)
  got, kg, vg = PP.paged_attention_write(q, kp, vp, table, pos, kn, vn, interpret=True,
                                         splits=splits)
  assert got.shape == want.shape and got.dtype == want.dtype
  assert np.isfinite(np.asarray(got, np.float32)).all()
  np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                             atol=atol, rtol=0)
  # the pools: the token stored where write_token stores it, nothing else touched
  np.testing.assert_array_equal(np.asarray(kg, np.float32), np.asarray(kw, np.float32))
  np.testing.assert_array_equal(np.asarray(vg, np.float32), np.asarray(vw, np.float32))


def test_position_past_the_table_is_neither_stored_nor_attended():
  """A row whose position is past its C columns: the gather path writes its token to the null
  page and attends over the table's slots only; the kernel stores nothing and attends the same."""
  q, kp, vp, table, pos, kn, vn = _case(3, 2, 4, 16, 4, 4, 24, jnp.float32, seed=1)
  free = np.setdiff1d(np.arange(1, 24), np.asarray(table))[-4:]   # pages no row owns
  table = table.at[1].set(jnp.asarray(free, jnp.int32))
  kp, vp = (p.at[:, free].set(1.0) for p in (kp, vp))
  pos = pos.at[1].set(4 * 4)                      # the first slot past the table
  want, _, _ = _want(q, kp, vp, table, pos, kn, vn)
  got, kg, _ = PP.paged_attention_write(q, kp, vp, table, pos, kn, vn, interpret=True)
  np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), atol=2e-5)
  np.testing.assert_array_equal(np.asarray(kg[:, free]), np.asarray(kp[:, free]))


def test_bad_table_width_or_splits_are_named():
  q, kp, vp, table, pos, kn, vn = _case(2, 1, 2, 16, 4, 8, 20, jnp.float32)
  with pytest.raises(ValueError, match="splits=3"):
    PP.paged_attention_write(q, kp, vp, table, pos, kn, vn, interpret=True, splits=3)
  with pytest.raises(ValueError, match="6 columns.*pad it with null-page"):
    PP.paged_attention_write(q, kp, vp, table[:, :6], jnp.minimum(pos, 23), kn, vn,
                             interpret=True)


def test_choose_splits_reaches_the_program_target():
  assert PP.choose_splits(256, 2, 128) == 2            # 1,024 programs
  assert PP.choose_splits(256, 4, 128) == 1            # 7B heads: 1,024 already
  assert PP.choose_splits(16, 2, 128) == 32            # the tail batch: 1,024 programs
  assert PP.choose_splits(16, 2, 4) == 4               # no more splits than columns
  assert PP.block_pages(share=8, page_size=64) == 2    # 128 slots a block
  assert PP.block_pages(share=1, page_size=64) == 1
  assert PP.block_pages(share=16, page_size=8) == 16


@pytest.mark.parametrize("dtype,atol,katol", [(jnp.float32, 2e-5, 1e-6),
                                              (jnp.bfloat16, 3e-2, 1.6e-2)])
@pytest.mark.parametrize("G,H,T,C,splits", [(7, 64, 16, 8, 1), (7, 64, 16, 8, 2),
                                            (4, 32, 64, 4, None)])
def test_kernel_with_rope_equals_rope_in_xla(G, H, T, C, splits, dtype, atol, katol):
  """paged_attention_write_qkv (the decode step's "pallas_rope": heads split and RoPE applied in
  the kernel) == DP.split_rope in XLA, then paged_attention_write ("pallas"): outputs, and
  pools that differ only at the stored tokens, by at most one bf16 rounding of the roped k."""
  from models import layers as L_
  from ssp_jax.sampling import dense_pallas as DP
  q, kp, vp, table, pos, _, _ = _case(5, 2, G, H, T, C, 2 + 5 * C, dtype)
  B, K = q.shape[:2]
  N = K * G
  qkv = jnp.asarray(np.random.default_rng(7).normal(size=(B, N + 2 * K, H)), dtype)
  cos, sin = L_.rope_cos_sin(pos[:, None], L_.rope_inv_freq(H, 10000.0, None), dtype)
  cos, sin = cos[:, 0], sin[:, 0]
  q2, kn, vn = DP.split_rope(qkv, cos, sin, N)
  want, wk, wv = PP.paged_attention_write(q2, kp, vp, table, pos, kn, vn, interpret=True,
                                          splits=splits)
  got, gk, gv = PP.paged_attention_write_qkv(qkv, cos, sin, kp, vp, table, pos, num_heads=N,
                                             interpret=True, splits=splits)
  assert got.shape == (B, K, G, H) and got.dtype == dtype
  np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                             atol=atol, rtol=0)
  owned = np.unique(np.asarray(table)[np.asarray(table) > 0])   # NaN elsewhere, untouched
  np.testing.assert_allclose(np.asarray(gk[:, owned], np.float32),
                             np.asarray(wk[:, owned], np.float32), atol=katol, rtol=0)
  np.testing.assert_array_equal(np.asarray(gv[:, owned], np.float32),
                                np.asarray(wv[:, owned], np.float32))


@pytest.mark.parametrize("G,T,C,splits", [(7, 16, 8, 1), (8, 16, 8, 1), (7, 16, 8, 2)])
def test_direct_output_equals_the_sliced_tile(G, T, C, splits):
  """direct_out (the G real query rows of each KV head stored straight into [B, K * G, H]; no
  XLA slice after the kernel) gives bitwise the padded tile's sliced output and the same pools,
  for both entry points; with shares the combine runs as before."""
  from models import layers as L_
  from ssp_jax.sampling import dense_pallas as DP
  q, kp, vp, table, pos, kn, vn = _case(5, 2, G, 64, T, C, 2 + 5 * C, jnp.bfloat16, seed=3)
  B, K, _, H = q.shape
  qkv = jnp.asarray(np.random.default_rng(9).normal(size=(B, K * G + 2 * K, H)), jnp.bfloat16)
  cos, sin = L_.rope_cos_sin(pos[:, None], L_.rope_inv_freq(H, 10000.0, None), jnp.bfloat16)
  calls = (lambda d: PP.paged_attention_write(q, kp, vp, table, pos, kn, vn, interpret=True,
                                              splits=splits, direct_out=d),
           lambda d: PP.paged_attention_write_qkv(qkv, cos[:, 0], sin[:, 0], kp, vp, table, pos,
                                                  num_heads=K * G, interpret=True,
                                                  splits=splits, direct_out=d))
  for call in calls:
    tile, direct = call(False), call(True)
    assert direct[0].shape == (B, K, G, H)
    for a, b in zip(tile, direct):
      np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


@pytest.mark.parametrize("direct_out", [False, True])
def test_rope_kernel_lowers_to_triton_for_gpus(direct_out):
  """The paged kernel as the 0.5B and 7B decode steps call it, lowered for CUDA here (Pallas's
  Triton lowering runs at lowering time: shapes it cannot take fail on a CPU too)."""
  import jax
  for B, K, G, H, P, T, C in ((256, 2, 7, 64, 4096, 16, 64), (16, 4, 7, 128, 1024, 16, 128)):
    qkv = jax.ShapeDtypeStruct((B, K * G + 2 * K, H), jnp.bfloat16)
    cs = jax.ShapeDtypeStruct((B, H), jnp.bfloat16)
    pool = jax.ShapeDtypeStruct((K, P, T, H), jnp.bfloat16)
    table = jax.ShapeDtypeStruct((B, C), jnp.int32)
    pos = jax.ShapeDtypeStruct((B,), jnp.int32)
    f = lambda a, c, s, kp, vp, t, p, N=K * G: PP.paged_attention_write_qkv(
        a, c, s, kp, vp, t, p, num_heads=N, direct_out=direct_out)
    text = (jax.jit(f).trace(qkv, cs, cs, pool, pool, table, pos)
            .lower(lowering_platforms=("cuda",)).as_text())
    assert "paged_decode_attention" in text


def test_sweep_flags_that_are_not_positive_integers_exit_2_naming_the_flag():
  import os
  import subprocess
  import sys
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  for flag, bad in (("--warps", "2,x"), ("--blocks", "0,64")):
    r = subprocess.run([sys.executable, os.path.join(root, "bench", "paged_attention.py"),
                        "--sweep", flag, bad], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and f"{flag} '{bad}'" in r.stderr.strip().splitlines()[-1]
