"""The fused RL train step, compiled by `ssp_jax.rl.learner.Learner` (which drives it).

One jitted program per update: for each micro-batch (`lax.scan`, gradient accumulation) it
runs the reference forward (when kl_coef > 0), the policy forward + backward with chunked
per-token log-probs, and after the scan the non-finite check and the optax update. The train
state is donated. Loss weights are computed over the whole mini-batch first, so the scan's sum
is exactly the mini-batch's aggregate (token-mean over all its loss tokens by default).

Per-token log-probs never build [B, T, V] logits: the lm_head runs over chunks of T under
`jax.checkpoint`, so the backward recomputes one chunk's logits at a time.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

import models
from models.decoder import lm_head_weight
from models.sharding import Sharder, constrain
from ssp_jax.rl import batch as batch_lib
from ssp_jax.rl import losses
from ssp_jax.rl import pack as pack_lib
from ssp_jax.rl import train_state as ts


def resolve_attn_impl(impl: str, backend: Optional[str] = None) -> str:
  """rl.attn_impl="auto": cuDNN flash attention on a GPU (its packed layout for packed rows),
  the block-sparse "blocked" attention on a CPU, the XLA einsum path elsewhere (TPU)."""
  if impl != "auto":
    return impl
  backend = backend or jax.default_backend()
  return {"gpu": "cudnn", "cuda": "cudnn", "cpu": "blocked"}.get(backend, "xla")


def layer_unroll(layer_loop: str):
  """rl.layer_loop as `models.hidden_states`' unroll_layers: "scan" -> 1, "scan:N" -> N,
  "unrolled" -> True. ValueError names the accepted forms."""
  if layer_loop == "unrolled":
    return True
  if layer_loop == "scan":
    return 1
  head, _, n = layer_loop.partition(":")
  if head == "scan" and n.isdigit() and int(n) >= 1:
    return int(n)
  raise ValueError(f"layer_loop={layer_loop!r} is unknown; use 'scan', 'scan:N' (N >= 1 layers "
                   "an iteration) or 'unrolled'")


@dataclasses.dataclass(frozen=True)
class StepConfig:
  """The static (hashable) knobs of the compiled step, read from the `rl` config."""
  clip_low: float = 0.2
  clip_high: float = 0.285
  dual_clip: Optional[float] = 3.0
  kl_coef: float = 0.01
  kl_type: str = "k3"
  loss_agg: str = "token-mean"
  entropy_coef: float = 0.0
  temperature: float = 1.0
  micro_batch_size: int = 8
  remat: str = "full"
  compute_dtype: str = "bfloat16"
  attn_impl: str = "xla"
  logprob_chunk: int = 512
  max_segments: int = 64       # packed rows: most segments per row (cuDNN packed attention)
  attn_chunk: int = 0          # XLA attention by query chunks (models.layers.causal_chunked_attention)
  onpolicy_old_logp: bool = False  # old log-probs = the step's own log-probs (stop-gradient)
  score_loss_tokens: bool = True   # the output projection only at the loss tokens (`score_idx`)
  logits_grad_dtype: str = "compute"   # "compute" or "float32": the logits' cotangent in the
                                       # output projection's backward GEMMs (`head_logits`)
  layer_loop: str = "scan"     # "scan", "scan:N" or "unrolled" (`layer_unroll`)

  @classmethod
  def from_config(cls, rl: ml_collections.ConfigDict) -> "StepConfig":
    """Reads the fields; their values were checked by `ssp_jax.rl.config.check_rl_config`."""
    return cls(clip_low=rl.clip_low, clip_high=rl.clip_high, dual_clip=rl.dual_clip,
               kl_coef=rl.kl_coef, kl_type=rl.kl_type, loss_agg=rl.loss_agg,
               entropy_coef=rl.entropy_coef, temperature=rl.temperature,
               micro_batch_size=rl.micro_batch_size, remat=rl.remat,
               compute_dtype=rl.compute_dtype, attn_impl=resolve_attn_impl(rl.attn_impl),
               logprob_chunk=rl.logprob_chunk,
               max_segments=int(rl.get("pack_max_segments", 64)),
               attn_chunk=int(rl.get("attn_chunk", 0)),
               score_loss_tokens=rl.get("logprob_positions", "loss") == "loss",
               logits_grad_dtype=rl.get("logits_grad_dtype", "compute"),
               layer_loop=rl.get("layer_loop", "scan"))


# --------------------------------------------------------------------------------------------
# Per-token log-probs
# --------------------------------------------------------------------------------------------
def _chunk_size(T: int, chunk: int) -> int:
  """Largest divisor of T that is <= chunk."""
  c = max(1, min(chunk, T))
  while T % c:
    c -= 1
  return c


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def head_logits(h_BCD: jax.Array, w_DV: jax.Array, grad_dtype: Optional[str]) -> jax.Array:
  """fp32 logits h @ w (inputs in the compute dtype, fp32 accumulation).

  The backward pass rounds the logits' fp32 cotangent to h's dtype (`grad_dtype` "compute") so
  both its GEMMs (dh = g w^T, dw = h^T g) run in that dtype with fp32 accumulation (the
  original's veRL learner, bf16 params under autocast, runs them in bf16 too, and its logits
  are bf16 as well; here they stay fp32); with "float32" (or None) they take the fp32
  cotangent, which XLA runs as fp32 (TF32 on a GPU) GEMMs (0.33 s of a 7.5 s 1.5B update in an
  H100 profile)."""
  return jnp.einsum("BCD,DV->BCV", h_BCD, w_DV, preferred_element_type=jnp.float32)


def _head_logits_fwd(h_BCD, w_DV, grad_dtype):
  return head_logits(h_BCD, w_DV, grad_dtype), (h_BCD, w_DV)


def _head_logits_bwd(grad_dtype, res, g_BCV):
  h_BCD, w_DV = res
  if grad_dtype == "compute":
    g_BCV = g_BCV.astype(h_BCD.dtype)
  dh = jnp.einsum("BCV,DV->BCD", g_BCV, w_DV.astype(g_BCV.dtype),
                  preferred_element_type=jnp.float32)
  dw = jnp.einsum("BCD,BCV->DV", h_BCD.astype(g_BCV.dtype), g_BCV,
                  preferred_element_type=jnp.float32)
  return dh.astype(h_BCD.dtype), dw.astype(w_DV.dtype)


head_logits.defvjp(_head_logits_fwd, _head_logits_bwd)


def chunked_logprobs(w_DV: jax.Array, h_BTD: jax.Array, targets_BT: jax.Array, *,
                     temperature: float = 1.0, chunk: int = 512,
                     sharder: Optional[Sharder] = None,
                     logits_grad_dtype: str = "compute") -> tuple[jax.Array, jax.Array]:
  """log p(targets_BT[b, t] | h_BTD[b, t]) and the entropy of that distribution, [B, T] each.

  Loops over chunks of C tokens (`lax.map`, rematerialised), so at most [B, C, V] fp32 logits
  are live in the forward and in the backward. `logits_grad_dtype`: see `head_logits`.
  """
  B, T, D = h_BTD.shape
  C = _chunk_size(T, chunk)
  K = T // C
  h_KBCD = h_BTD.reshape(B, K, C, D).swapaxes(0, 1)
  t_KBC = targets_BT.reshape(B, K, C).swapaxes(0, 1)

  @jax.checkpoint
  def one(h_BCD, t_BC):
    logits_BCV = head_logits(h_BCD, w_DV.astype(h_BCD.dtype), logits_grad_dtype)
    logits_BCV = constrain(logits_BCV / temperature, ("act_batch", "act_len", "act_vocab"),
                           sharder)
    lse_BC = jax.nn.logsumexp(logits_BCV, axis=-1)
    iota_V = jnp.arange(logits_BCV.shape[-1], dtype=t_BC.dtype)
    tgt_BC = jnp.sum(jnp.where(iota_V == t_BC[..., None], logits_BCV, 0.0), axis=-1)
    p_BCV = jnp.exp(logits_BCV - lse_BC[..., None])
    ent_BC = lse_BC - jnp.sum(p_BCV * logits_BCV, axis=-1)
    return tgt_BC - lse_BC, ent_BC

  logp_KBC, ent_KBC = jax.lax.map(lambda xs: one(*xs), (h_KBCD, t_KBC))
  return logp_KBC.swapaxes(0, 1).reshape(B, T), ent_KBC.swapaxes(0, 1).reshape(B, T)


def sequence_logprobs(cfg: models.ModelConfig, params: Any, tokens_BT: jax.Array,
                      sc: StepConfig, sharder: Optional[Sharder] = None,
                      remat: Optional[str] = None, *,
                      segment_ids_BT: Optional[jax.Array] = None,
                      positions_BT: Optional[jax.Array] = None,
                      score_idx_BN: Optional[jax.Array] = None) -> tuple[jax.Array, jax.Array]:
  """(logp_BT, entropy_BT) aligned to the scored token: logp[b, t] = log p(tokens[b, t] |
  tokens[b, :t]); position 0 (never a loss token) holds 0.

  With `score_idx_BN` (`score_positions`: each row's positions to score, -1 padded) only those
  positions go through the output projection and the result is (logp_BN, entropy_BN) aligned to
  `score_idx_BN` (padding entries hold finite values of no meaning): the same values as the
  [B, T] result at those positions, without the [D, V] GEMM on the context tokens.

  Packed rows (segment ids and positions given): attention stays inside each segment, so a
  segment's values are those of its own padded row; a segment's first token is scored from
  the previous segment's last hidden state and must not be a loss token (the packer masks it).
  """
  dtype = ts.dtype_of(sc.compute_dtype)
  h_BTD = models.hidden_states(cfg, params, tokens_BT, dtype=dtype,
                               remat=sc.remat if remat is None else remat,
                               attn_impl=sc.attn_impl, sharder=sharder,
                               segment_ids_BT=segment_ids_BT, positions_BT=positions_BT,
                               max_segments=sc.max_segments if segment_ids_BT is not None else 0,
                               attn_chunk=sc.attn_chunk,
                               unroll_layers=layer_unroll(sc.layer_loop))
  if score_idx_BN is not None:   # token t is scored from the hidden state at t - 1
    t_BN = jnp.maximum(score_idx_BN, 1)
    h_BND = jnp.take_along_axis(h_BTD, (t_BN - 1)[..., None], axis=1)
    return chunked_logprobs(lm_head_weight(cfg, params), h_BND,
                            jnp.take_along_axis(tokens_BT, t_BN, axis=1),
                            temperature=sc.temperature, chunk=sc.logprob_chunk, sharder=sharder,
                            logits_grad_dtype=sc.logits_grad_dtype)
  targets_BT = jnp.concatenate([tokens_BT[:, 1:], jnp.zeros_like(tokens_BT[:, :1])], axis=1)
  logp_BT, ent_BT = chunked_logprobs(lm_head_weight(cfg, params), h_BTD, targets_BT,
                                     temperature=sc.temperature, chunk=sc.logprob_chunk,
                                     sharder=sharder, logits_grad_dtype=sc.logits_grad_dtype)
  pad = jnp.zeros_like(logp_BT[:, :1])
  return (jnp.concatenate([pad, logp_BT[:, :-1]], axis=1),
          jnp.concatenate([pad, ent_BT[:, :-1]], axis=1))


def score_positions(loss_mask_KMT: np.ndarray, minimum: int = 64) -> np.ndarray:
  """Host side: [K, M, N] int32, each row's loss-token positions in ascending order, -1 padded.
  N is the most any row has, rounded up to a power of two (at least `minimum`, at most T), so a
  run compiles its step for a few N only."""
  keep = np.asarray(loss_mask_KMT) > 0
  T = keep.shape[-1]
  most = int(keep.sum(-1).max()) if keep.size else 0
  n = min(T, max(minimum, 1 << max(most - 1, 0).bit_length()))
  order = np.argsort(~keep, axis=-1, kind="stable")[..., :n]   # loss positions first, in order
  return np.where(np.take_along_axis(keep, order, -1), order, -1).astype(np.int32)


def gather_scored(x_BT: jax.Array, score_idx_BN: jax.Array) -> jax.Array:
  """x at the scored positions, [B, N] (padding entries read position 0, never a loss token)."""
  return jnp.take_along_axis(x_BT, jnp.maximum(score_idx_BN, 0), axis=1)


def _cast(tree, dtype):
  return jax.tree.map(lambda x: x.astype(dtype), tree)


# --------------------------------------------------------------------------------------------
# The fused step
# --------------------------------------------------------------------------------------------
MICRO_KEYS = ("tokens", "loss_mask", "old_logp", "advantages", "loss_w", "metric_w")
PACKED_INPUTS = ("segment_ids", "positions")   # extra per-token model inputs of packed rows


def is_packed(mb: dict) -> bool:
  """Whether a step input dict (`Rows.step_inputs`, micro-batched) has the packed layout."""
  return "segment_ids" in mb


def _model_inputs(x: dict) -> dict:
  """Keyword arguments of `sequence_logprobs` for a (micro-)batch: segments when packed, the
  scored positions when the step scores the loss tokens only."""
  out = {"score_idx_BN": x["score_idx"]} if "score_idx" in x else {}
  if is_packed(x):
    out.update(segment_ids_BT=x["segment_ids"], positions_BT=x["positions"])
  return out


def _scored(mb: dict) -> dict:
  """The loss's per-token inputs at the scored positions ([B, N]) when the micro-batch has
  `score_idx` (the loss mask 0 on padding entries); as they are otherwise."""
  if "score_idx" not in mb:
    return mb
  idx = mb["score_idx"]
  out = dict(mb, loss_mask=jnp.where(idx >= 0, gather_scored(mb["loss_mask"], idx), 0))
  for k in ("old_logp", "loss_w", "metric_w", "advantages"):
    if mb[k].ndim == 2:   # per token ([B, T]); a padded batch's advantages are per row ([B])
      out[k] = gather_scored(mb[k], idx)
  return out


def loss_weights(mb: dict, sc: StepConfig) -> tuple[jax.Array, jax.Array]:
  """(loss_w_NT, metric_w_NT) over the whole mini-batch, each sequence's role loss weight
  (`loss_weight`) folded in.

  Padded rows: one weight per row, each row one trajectory. Packed rows: a weight per token and
  each token's trajectory size (`seq_tokens`), so every aggregation is per trajectory."""
  loss_w = losses.aggregation_weights(mb["loss_mask"], sc.loss_agg, mb["loss_weight"],
                                      mb.get("seq_tokens"))
  return loss_w, losses.token_mean_weights(mb["loss_mask"])


def micro_loss(params, ref_logp, mb, cfg, sc: StepConfig, sharder):
  """Loss of one micro-batch with mini-batch-global weights; (loss, metrics). `params` are
  cast to the compute dtype here (no-op when `accumulate_grads` already did)."""
  cparams = _cast(params, ts.dtype_of(sc.compute_dtype))
  logp, ent = sequence_logprobs(cfg, cparams, mb["tokens"], sc, sharder, **_model_inputs(mb))
  mb = _scored(mb)   # [B, N] when only the loss tokens were scored
  if sc.entropy_coef == 0.0:
    ent = jax.lax.stop_gradient(ent)
  old = mb["old_logp"]
  if sc.onpolicy_old_logp:   # the policy before this (only) step is this step's policy
    old = jnp.where(mb["loss_mask"] > 0, jax.lax.stop_gradient(logp), 0.0)
  return losses.weighted_policy_loss(
      logp, old, ref_logp, mb["advantages"], mb["loss_mask"], mb["loss_w"],
      mb["metric_w"], clip_low=sc.clip_low, clip_high=sc.clip_high, dual_clip=sc.dual_clip,
      kl_coef=sc.kl_coef, kl_type=sc.kl_type, entropy_NT=ent, entropy_coef=sc.entropy_coef)


def to_micro(mb: dict, micro: int) -> dict:
  """Host-side reshape of [M, ...] rows to [M / micro, micro, ...] (no cross-device moves)."""
  n = mb["tokens"].shape[0]
  if n % micro:
    raise ValueError(f"mini-batch of {n} rows is not a multiple of rl.micro_batch_size={micro}")
  return {k: np.asarray(v).reshape((n // micro, micro) + v.shape[1:]) for k, v in mb.items()}


def metric_keys(sc: StepConfig) -> tuple[str, ...]:
  keys = ("loss", "pg_loss", "clipfrac", "clipfrac_lower", "ppo_kl", "entropy")
  return keys + (("kl_loss",) if sc.kl_coef != 0.0 else ())


def accumulate_grads(params, ref_params, mb, cfg, sc: StepConfig, sharder, p_shardings):
  """Sum of micro-batch gradients and metrics over a mini-batch of [K, m, ...] arrays.

  A micro-batch without loss tokens (the row padding of a mini-batch) contributes exactly 0
  and is skipped by a `lax.cond` that passes the accumulator through, so rounding the
  micro-batch count up costs ~nothing.

  The params are cast to the compute dtype once, before the scan, and each micro-batch's
  gradient is taken with respect to that copy, then added to the accumulator in the params'
  dtype: the same values as differentiating through a cast in every micro-batch (the cast's
  transpose is that same conversion), without converting every weight once per micro-batch."""
  loss_w, metric_w = loss_weights(mb, sc)
  cparams = _cast(params, ts.dtype_of(sc.compute_dtype))
  extra = PACKED_INPUTS if is_packed(mb) else ()
  extra += ("score_idx",) if "score_idx" in mb else ()
  micro = {**{k: mb[k] for k in MICRO_KEYS[:4] + extra}, "loss_w": loss_w, "metric_w": metric_w}
  grad_fn = jax.value_and_grad(micro_loss, has_aux=True)
  pin = ((lambda g: g) if p_shardings is None else
         lambda g: jax.tree.map(jax.lax.with_sharding_constraint, g, p_shardings))
  zeros_m = {k: jnp.zeros((), jnp.float32) for k in metric_keys(sc)}

  def grads_and_metrics(x):
    ref_logp = None
    if sc.kl_coef != 0.0:
      ref_logp, _ = sequence_logprobs(cfg, ref_params, x["tokens"], sc, sharder, remat="none",
                                      **_model_inputs(x))
      ref_logp = jax.lax.stop_gradient(ref_logp)
    (_, metrics), g = grad_fn(cparams, ref_logp, x, cfg, sc, sharder)
    return pin(g), {k: metrics[k].astype(jnp.float32) for k in zeros_m}

  def add(carry, x):
    g_acc, m_acc = carry
    g, metrics = grads_and_metrics(x)
    g_acc = pin(jax.tree.map(lambda a, b: a + b.astype(a.dtype), g_acc, g))
    return g_acc, {k: m_acc[k] + metrics[k] for k in m_acc}

  def body(carry, x):
    # The accumulation sits inside the cond, so an empty micro-batch neither zero-fills a
    # gradient-sized buffer nor adds it (10 of 32 micro-batches in the 1.5B bench on an H100).
    return jax.lax.cond(jnp.any(x["loss_mask"] > 0), add, lambda c, _: c, carry, x), None

  zeros_g = pin(jax.tree.map(jnp.zeros_like, params))
  (grads, metrics), _ = jax.lax.scan(body, (zeros_g, zeros_m), micro)
  return grads, metrics


def train_step(state: ts.TrainState, ref_params: Any, mb: dict, *, cfg: models.ModelConfig,
               sc: StepConfig, tx: optax.GradientTransformation, sharder: Sharder,
               p_shardings: Any) -> tuple[ts.TrainState, dict]:
  """One optimizer update on a mini-batch: `mb` is its `Rows.step_inputs()` (a dict, the step's
  pytree), reshaped by `to_micro` to [K, m, ...].

  A non-finite loss or gradient norm leaves params and optimizer state untouched and counts
  the skip in `state["nonfinite"]` (consecutive) and `state["nonfinite_total"]`.
  """
  params = state["params"]
  grads, metrics = accumulate_grads(params, ref_params, mb, cfg, sc, sharder, p_shardings)
  grad_norm = optax.global_norm(grads)
  ok = jnp.isfinite(metrics["loss"]) & jnp.isfinite(grad_norm)


  def apply(args):
    grads, opt_state, params = args
    updates, new_opt = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), new_opt

  # A cond (not a select of both results) so the skipped branch costs no second copy of the
  # params and optimizer state.
  new_params, new_opt = jax.lax.cond(ok, apply, lambda args: (args[2], args[1]),
                                     (grads, state["opt_state"], params))
  one = jnp.ones((), jnp.int32)
  new_state = {
      "params": new_params,
      "opt_state": new_opt,
      "rng": jax.random.split(state["rng"])[0],
      "step": state["step"] + one,
      "nonfinite": jnp.where(ok, 0, state["nonfinite"] + one),
      "nonfinite_total": state["nonfinite_total"] + jnp.where(ok, 0, one),
  }
  metrics = dict(metrics, grad_norm=grad_norm, update_ok=ok.astype(jnp.float32),
                 loss_tokens=jnp.sum(mb["loss_mask"]))
  return new_state, metrics


def layout(packed: bool) -> type[batch_lib.Rows]:
  """The host batch class of a layout: `PackedBatch` or the padded `Batch`."""
  return pack_lib.PackedBatch if packed else batch_lib.Batch


def step_fields(packed: bool, scored: bool) -> dict[str, tuple[np.dtype, tuple[str, ...]]]:
  """{field: (dtype, axes)} of the step's inputs: the layout's `Rows.step_fields`, and
  `score_idx` [N, S] (`score_positions`) when the step scores the loss tokens only."""
  fields = dict(layout(packed).step_fields())
  if scored:
    fields["score_idx"] = (np.dtype(np.int32), ("N", "S"))
  return fields


def batch_shardings(sharder: Sharder, packed: bool = False, scored: bool = False) -> dict:
  """The step's inputs (`step_fields`), micro-batched to [K, m, ...]: rows (m) over the batch
  mesh axes, the rest replicated. Padded: tokens, loss_mask, old_logp [K, m, T] and advantages,
  loss_weight, role, prompt [K, m]; packed: every field [K, m, T]; score_idx [K, m, S]."""
  row = sharder.spec(("act_batch",))[0]
  return {k: NamedSharding(sharder.mesh, P(None, row, *[None] * (len(dims) - 1)))
          for k, (_, dims) in step_fields(packed, scored).items()}


def abstract_inputs(sharder: Sharder, packed: bool, K: int, m: int, T: int,
                    scored: bool = False) -> dict:
  """ShapeDtypeStructs of the step's inputs (K micro-batches of m rows of T tokens; with
  `scored`, every position of a row scored: the most `score_positions` gives), for
  `jit(...).lower` without data."""
  sh = batch_shardings(sharder, packed, scored)
  return {k: jax.ShapeDtypeStruct((K, m) + (T,) * (len(dims) - 1), dtype, sharding=sh[k])
          for k, (dtype, dims) in step_fields(packed, scored).items()}


def make_train_step(cfg: models.ModelConfig, sc: StepConfig, tx: optax.GradientTransformation,
                    sharder: Sharder, state_sh: Any, with_ref: bool, packed: bool = False):
  """jit(train_step) with the state donated and its shardings fixed in and out."""
  p_sh = state_sh["params"]
  fn = functools.partial(train_step, cfg=cfg, sc=sc, tx=tx, sharder=sharder, p_shardings=p_sh)
  rep = NamedSharding(sharder.mesh, P())
  return jax.jit(fn, donate_argnums=(0,),
                 in_shardings=(state_sh, p_sh if with_ref else None,
                               batch_shardings(sharder, packed, sc.score_loss_tokens)),
                 out_shardings=(state_sh, rep))


def make_logprob_fn(cfg: models.ModelConfig, sc: StepConfig, sharder: Sharder, p_sh: Any,
                    packed: bool = False, scored: bool = False):
  """jit: (params, {"tokens" [K, m, T] (+ "segment_ids", "positions" when packed, "score_idx"
  when `scored`)}) -> aligned log-probs [K, m, T], one micro-batch at a time; with `scored`
  only the positions in score_idx are computed (0 elsewhere).

  The result is replicated, so every process of a multi-host run can read all of it."""
  keys = ("tokens",) + (PACKED_INPUTS if packed else ()) + (("score_idx",) if scored else ())

  def one(cparams, x):
    logp = sequence_logprobs(cfg, cparams, x["tokens"], sc, sharder, "none",
                             **_model_inputs(x))[0]
    if not scored:
      return logp
    idx = x["score_idx"]   # back to [m, T]: padding entries add 0 at position 0
    put = jax.vmap(lambda row, i, v: row.at[i].add(v))
    return put(jnp.zeros(x["tokens"].shape, logp.dtype), jnp.maximum(idx, 0),
               jnp.where(idx >= 0, logp, 0.0))

  def fn(params, inputs):
    cparams = _cast(params, ts.dtype_of(sc.compute_dtype))
    return jax.lax.map(lambda x: one(cparams, x), inputs)
  sh = batch_shardings(sharder, packed, scored)
  return jax.jit(fn, in_shardings=(p_sh, {k: sh[k] for k in keys}),
                 out_shardings=NamedSharding(sharder.mesh, P()))
