"""Block-sparse attention with an online softmax and its own backward pass, for the masked
(packed, causal) training forward on a CPU: `hidden_states(attn_impl="blocked")`.

The XLA path (`layers.causal_chunked_attention`) builds each query chunk's whole score matrix,
masks it, normalises it and transposes it for the value GEMM; on a 2-core CPU that is about a
third of an SFT step of the 135M default (per layer of a 1,024-token packed row: 96 ms forward
and backward at chunks of 512, against 46 ms here; bench/RESULTS.md). Here queries and keys go
in blocks of `block` tokens:
  - a (query block, key block) pair is computed only when the mask lets some query of the
    block see some key of it (`lax.cond`, a real branch on a CPU): the upper triangle and the
    pairs between different packed segments are skipped, not masked;
  - each query block keeps a running max, sum and output (flash attention), so no score
    matrix larger than [K, G, block, block] exists;
  - the backward pass recomputes each visible pair's probabilities from the saved
    log-sum-exp (the flash backward), instead of differentiating the forward's GEMMs and
    softmax as XLA would.
Same outputs and gradients as `layers.attention` up to float rounding for every query that
sees at least one key; a query that sees none (padding) gets 0 and passes no gradient.

The block loop is unrolled in Python (about (T / block)^2 / 2 branches a layer), so a row
longer than MAX_BLOCKS blocks gets longer blocks (`block_for`): rows of up to a few thousand
tokens are what it is for; on a GPU use "cudnn", on a TPU "xla".
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

_NEG = -1e30   # finite: a fully masked block row keeps a finite running max


MAX_BLOCKS = 32   # query blocks a row at most (528 visible pairs at most, compiled unrolled)


def block_for(T: int, block: int) -> int:
  """`block`, or the multiple of 16 that keeps a row of T tokens within MAX_BLOCKS blocks."""
  need = -(-T // MAX_BLOCKS)
  return max(block, -(-need // 16) * 16)


def _spans(n: int, block: int) -> list[tuple[int, int]]:
  return [(s, min(s + block, n)) for s in range(0, n, block)]


def _visible(mask_BTS: jax.Array, block: int) -> jax.Array:
  """[nq, nk] bool: some row of the batch lets some query of block i see a key of block j."""
  B, T, S = mask_BTS.shape
  nq, nk = -(-T // block), -(-S // block)
  m = jnp.pad(mask_BTS, ((0, 0), (0, nq * block - T), (0, nk * block - S)))
  return jnp.any(m.reshape(B, nq, block, nk, block), axis=(0, 2, 4))


def _heads_first(q_BTNH, k_BSKH, v_BSKH):
  B, T, N, H = q_BTNH.shape
  K = k_BSKH.shape[2]
  q_BKGTH = q_BTNH.reshape(B, T, K, N // K, H).transpose(0, 2, 3, 1, 4)
  return q_BKGTH, k_BSKH.transpose(0, 2, 1, 3), v_BSKH.transpose(0, 2, 1, 3)


def _forward(q_BTNH, k_BSKH, v_BSKH, mask_BTS, block):
  """(out [B, K, G, T, H] f32, lse [B, K, G, T] f32; +inf where a query sees no key)."""
  B, T, N, H = q_BTNH.shape
  S = k_BSKH.shape[1]
  scale = 1.0 / math.sqrt(H)
  q, k, v = _heads_first(q_BTNH, k_BSKH, v_BSKH)
  vis = _visible(mask_BTS, block)
  outs, lses = [], []
  for i, (qs, qe) in enumerate(_spans(T, block)):
    q_i = q[:, :, :, qs:qe]
    shape = q_i.shape[:-1]                      # B K G t
    carry = (jnp.full(shape, _NEG, jnp.float32), jnp.zeros(shape, jnp.float32),
             jnp.zeros(q_i.shape, jnp.float32))
    for j, (ks, ke) in enumerate(_spans(S, block)):
      if ks >= qe:       # every key of the block comes after every query: causal in index space
        break

      def pair(c, ks=ks, ke=ke, qs=qs, qe=qe, q_i=q_i):
        m, l, acc = c
        s = jnp.einsum("BKGTH,BKSH->BKGTS", q_i, k[:, :, ks:ke],
                       preferred_element_type=jnp.float32) * scale
        seen = mask_BTS[:, None, None, qs:qe, ks:ke]
        m_new = jnp.maximum(m, jnp.max(jnp.where(seen, s, _NEG), axis=-1))
        p = jnp.where(seen, jnp.exp(s - m_new[..., None]), 0.0)
        a = jnp.exp(m - m_new)
        acc = acc * a[..., None] + jnp.einsum("BKGTS,BKSH->BKGTH", p.astype(v.dtype),
                                              v[:, :, ks:ke],
                                              preferred_element_type=jnp.float32)
        return m_new, l * a + jnp.sum(p, axis=-1), acc

      carry = jax.lax.cond(vis[i, j], pair, lambda c: c, carry)
    m, l, acc = carry
    safe = jnp.where(l > 0, l, 1.0)
    outs.append(acc / safe[..., None])
    lses.append(jnp.where(l > 0, m + jnp.log(safe), jnp.inf))
  return jnp.concatenate(outs, axis=3), jnp.concatenate(lses, axis=3)


def _to_BTNH(x_BKGTH):
  B, K, G, T, H = x_BKGTH.shape
  return x_BKGTH.transpose(0, 3, 1, 2, 4).reshape(B, T, K * G, H)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def blocked_attention(q_BTNH: jax.Array, k_BSKH: jax.Array, v_BSKH: jax.Array,
                      mask_BTS: jax.Array, block: int = 128) -> jax.Array:
  """Grouped-query attention [B, T, N, H] of q over k, v [B, S, K, H] under a boolean mask
  [B, T, S] that is causal in index space (no query sees a later index; `segment_mask`).
  Callers pass `block_for(T, block)` (models.decoder does)."""
  out, _ = _forward(q_BTNH, k_BSKH, v_BSKH, mask_BTS, block)
  return _to_BTNH(out).astype(q_BTNH.dtype)


def _fwd_rule(q_BTNH, k_BSKH, v_BSKH, mask_BTS, block):
  out, lse = _forward(q_BTNH, k_BSKH, v_BSKH, mask_BTS, block)
  return _to_BTNH(out).astype(q_BTNH.dtype), (q_BTNH, k_BSKH, v_BSKH, mask_BTS, out, lse)


def _bwd_rule(block, res, dout_BTNH):
  q_BTNH, k_BSKH, v_BSKH, mask_BTS, out, lse = res
  B, T, N, H = q_BTNH.shape
  S, K = k_BSKH.shape[1], k_BSKH.shape[2]
  scale = 1.0 / math.sqrt(H)
  q, k, v = _heads_first(q_BTNH, k_BSKH, v_BSKH)
  do = dout_BTNH.reshape(B, T, K, N // K, H).transpose(0, 2, 3, 1, 4).astype(jnp.float32)
  delta = jnp.sum(do * out, axis=-1)                      # [B, K, G, T]
  vis = _visible(mask_BTS, block)
  kspans = _spans(S, block)
  dk = [jnp.zeros((B, K, ke - ks, H), jnp.float32) for ks, ke in kspans]
  dv = [jnp.zeros((B, K, ke - ks, H), jnp.float32) for ks, ke in kspans]
  dq = []
  for i, (qs, qe) in enumerate(_spans(T, block)):
    q_i, do_i = q[:, :, :, qs:qe], do[:, :, :, qs:qe]
    delta_i, lse_i = delta[..., qs:qe], lse[..., qs:qe]
    dq_i = jnp.zeros(q_i.shape, jnp.float32)
    for j, (ks, ke) in enumerate(kspans):
      if ks >= qe:
        break

      def pair(c, ks=ks, ke=ke, qs=qs, qe=qe, q_i=q_i, do_i=do_i, delta_i=delta_i,
               lse_i=lse_i):
        dq_i, dk_j, dv_j = c
        k_j, v_j = k[:, :, ks:ke], v[:, :, ks:ke]
        s = jnp.einsum("BKGTH,BKSH->BKGTS", q_i, k_j,
                       preferred_element_type=jnp.float32) * scale
        p = jnp.where(mask_BTS[:, None, None, qs:qe, ks:ke],
                      jnp.exp(s - lse_i[..., None]), 0.0)
        dv_j = dv_j + jnp.einsum("BKGTS,BKGTH->BKSH", p, do_i)
        dp = jnp.einsum("BKGTH,BKSH->BKGTS", do_i, v_j.astype(jnp.float32))
        ds = p * (dp - delta_i[..., None]) * scale
        dq_i = dq_i + jnp.einsum("BKGTS,BKSH->BKGTH", ds, k_j.astype(jnp.float32))
        dk_j = dk_j + jnp.einsum("BKGTS,BKGTH->BKSH", ds, q_i.astype(jnp.float32))
        return dq_i, dk_j, dv_j

      dq_i, dk[j], dv[j] = jax.lax.cond(vis[i, j], pair, lambda c: c, (dq_i, dk[j], dv[j]))
    dq.append(dq_i)
  dq_BTNH = _to_BTNH(jnp.concatenate(dq, axis=3))
  dk_BSKH = jnp.concatenate(dk, axis=2).transpose(0, 2, 1, 3)
  dv_BSKH = jnp.concatenate(dv, axis=2).transpose(0, 2, 1, 3)
  return (dq_BTNH.astype(q_BTNH.dtype), dk_BSKH.astype(k_BSKH.dtype),
          dv_BSKH.astype(v_BSKH.dtype), None)


blocked_attention.defvjp(_fwd_rule, _bwd_rule)
