"""The fused RL train step and a small `Learner` that drives it over a rollout batch.

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
import math
from typing import Any, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

import models
from models.decoder import REMAT_POLICIES, lm_head_weight
from models.sharding import Sharder, constrain
from ssp_jax.rl import batch as batch_lib
from ssp_jax.rl import losses
from ssp_jax.rl import pack as pack_lib
from ssp_jax.rl import train_state as ts
from ssp_jax.rl.config import ROLES


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
  role_weights: tuple[float, ...] = (1.0, 1.0)
  micro_batch_size: int = 8
  remat: str = "full"
  compute_dtype: str = "bfloat16"
  attn_impl: str = "xla"
  logprob_chunk: int = 512
  max_segments: int = 64       # packed rows: most segments per row (cuDNN packed attention)
  attn_chunk: int = 0          # XLA attention by query chunks (models.layers.causal_chunked_attention)
  onpolicy_old_logp: bool = False  # old log-probs = the step's own log-probs (stop-gradient)

  @classmethod
  def from_config(cls, rl: ml_collections.ConfigDict) -> "StepConfig":
    if rl.remat not in REMAT_POLICIES:
      raise ValueError(f"rl.remat={rl.remat!r}; choose one of {sorted(REMAT_POLICIES)}")
    losses.KL_PENALTIES.get(rl.kl_type)
    losses.LOSS_AGGREGATIONS.get(rl.loss_agg)
    ts.dtype_of(rl.compute_dtype)
    return cls(clip_low=rl.clip_low, clip_high=rl.clip_high, dual_clip=rl.dual_clip,
               kl_coef=rl.kl_coef, kl_type=rl.kl_type, loss_agg=rl.loss_agg,
               entropy_coef=rl.entropy_coef, temperature=rl.temperature,
               role_weights=tuple(float(rl.role_loss_weights[r]) for r in ROLES),
               micro_batch_size=rl.micro_batch_size, remat=rl.remat,
               compute_dtype=rl.compute_dtype, attn_impl=rl.attn_impl,
               logprob_chunk=rl.logprob_chunk,
               max_segments=int(rl.get("pack_max_segments", 64)),
               attn_chunk=int(rl.get("attn_chunk", 0)))


# --------------------------------------------------------------------------------------------
# Per-token log-probs
# --------------------------------------------------------------------------------------------
def _chunk_size(T: int, chunk: int) -> int:
  """Largest divisor of T that is <= chunk."""
  c = max(1, min(chunk, T))
  while T % c:
    c -= 1
  return c


def chunked_logprobs(w_DV: jax.Array, h_BTD: jax.Array, targets_BT: jax.Array, *,
                     temperature: float = 1.0, chunk: int = 512,
                     sharder: Optional[Sharder] = None) -> tuple[jax.Array, jax.Array]:
  """log p(targets_BT[b, t] | h_BTD[b, t]) and the entropy of that distribution, [B, T] each.

  Loops over chunks of C tokens (`lax.map`, rematerialised), so at most [B, C, V] fp32 logits
  are live in the forward and in the backward.
  """
  B, T, D = h_BTD.shape
  C = _chunk_size(T, chunk)
  K = T // C
  h_KBCD = h_BTD.reshape(B, K, C, D).swapaxes(0, 1)
  t_KBC = targets_BT.reshape(B, K, C).swapaxes(0, 1)

  @jax.checkpoint
  def one(h_BCD, t_BC):
    logits_BCV = jnp.einsum("BCD,DV->BCV", h_BCD, w_DV.astype(h_BCD.dtype),
                            preferred_element_type=jnp.float32)
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
                      positions_BT: Optional[jax.Array] = None) -> tuple[jax.Array, jax.Array]:
  """(logp_BT, entropy_BT) aligned to the scored token: logp[b, t] = log p(tokens[b, t] |
  tokens[b, :t]); position 0 (never a loss token) holds 0.

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
                               attn_chunk=sc.attn_chunk)
  targets_BT = jnp.concatenate([tokens_BT[:, 1:], jnp.zeros_like(tokens_BT[:, :1])], axis=1)
  logp_BT, ent_BT = chunked_logprobs(lm_head_weight(cfg, params), h_BTD, targets_BT,
                                     temperature=sc.temperature, chunk=sc.logprob_chunk,
                                     sharder=sharder)
  pad = jnp.zeros_like(logp_BT[:, :1])
  return (jnp.concatenate([pad, logp_BT[:, :-1]], axis=1),
          jnp.concatenate([pad, ent_BT[:, :-1]], axis=1))


def _cast(tree, dtype):
  return jax.tree.map(lambda x: x.astype(dtype), tree)


# --------------------------------------------------------------------------------------------
# The fused step
# --------------------------------------------------------------------------------------------
MICRO_KEYS = ("tokens", "loss_mask", "old_logp", "advantages", "loss_w", "metric_w")
PACKED_INPUTS = ("segment_ids", "positions")   # extra per-token model inputs of packed rows


def is_packed(mb: dict) -> bool:
  return "segment_ids" in mb


def _model_inputs(x: dict) -> dict:
  """Keyword arguments of `sequence_logprobs` for a (micro-)batch: segments when packed."""
  if not is_packed(x):
    return {}
  return {"segment_ids_BT": x["segment_ids"], "positions_BT": x["positions"]}


def loss_weights(mb: dict, sc: StepConfig) -> tuple[jax.Array, jax.Array]:
  """(loss_w_NT, metric_w_NT) over the whole mini-batch, role weights folded in.

  Padded rows: one role per row, each row one trajectory. Packed rows: a role per token and
  each token's trajectory size (`seq_tokens`), so every aggregation is per trajectory."""
  role_w = jnp.asarray(sc.role_weights, jnp.float32)[jnp.clip(mb["role"], 0,
                                                              len(sc.role_weights) - 1)]
  loss_w = losses.aggregation_weights(mb["loss_mask"], sc.loss_agg, role_w,
                                      mb.get("seq_tokens"))
  return loss_w, losses.token_mean_weights(mb["loss_mask"])


def micro_loss(params, ref_logp, mb, cfg, sc: StepConfig, sharder):
  """Loss of one micro-batch with mini-batch-global weights; (loss, metrics)."""
  cparams = _cast(params, ts.dtype_of(sc.compute_dtype))
  logp, ent = sequence_logprobs(cfg, cparams, mb["tokens"], sc, sharder, **_model_inputs(mb))
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
  and is skipped by a `lax.cond`, so rounding the micro-batch count up costs ~nothing."""
  loss_w, metric_w = loss_weights(mb, sc)
  extra = PACKED_INPUTS if is_packed(mb) else ()
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
    (_, metrics), g = grad_fn(params, ref_logp, x, cfg, sc, sharder)
    return pin(g), {k: metrics[k].astype(jnp.float32) for k in zeros_m}

  def skip(x):
    return pin(jax.tree.map(jnp.zeros_like, params)), zeros_m

  def body(carry, x):
    g_acc, m_acc = carry
    g, metrics = jax.lax.cond(jnp.any(x["loss_mask"] > 0), grads_and_metrics, skip, x)
    g_acc = pin(jax.tree.map(lambda a, b: a + b.astype(a.dtype), g_acc, g))
    return (g_acc, {k: m_acc[k] + metrics[k] for k in m_acc}), None

  zeros_g = pin(jax.tree.map(jnp.zeros_like, params))
  (grads, metrics), _ = jax.lax.scan(body, (zeros_g, zeros_m), micro)
  return grads, metrics


def train_step(state: ts.TrainState, ref_params: Any, mb: dict, *, cfg: models.ModelConfig,
               sc: StepConfig, tx: optax.GradientTransformation, sharder: Sharder,
               p_shardings: Any) -> tuple[ts.TrainState, dict]:
  """One optimizer update on a mini-batch (`batch` fields reshaped by `to_micro` to [K, m, ...]).

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


def batch_shardings(sharder: Sharder, packed: bool = False) -> dict:
  """[K, m, ...] micro-batched fields: rows (m) over the batch mesh axes, the rest replicated.

  packed: the fields of `ssp_jax.rl.pack.PACKED_KEYS`, all [K, m, T]."""
  row = sharder.spec(("act_batch",))[0]
  mk = lambda *rest: NamedSharding(sharder.mesh, P(None, row, *rest))
  if packed:
    return {k: mk(None) for k in pack_lib.PACKED_KEYS}
  return {"tokens": mk(None), "loss_mask": mk(None), "old_logp": mk(None),
          "advantages": mk(), "role": mk(), "prompt": mk()}


def make_train_step(cfg: models.ModelConfig, sc: StepConfig, tx: optax.GradientTransformation,
                    sharder: Sharder, state_sh: Any, with_ref: bool, packed: bool = False):
  """jit(train_step) with the state donated and its shardings fixed in and out."""
  p_sh = state_sh["params"]
  fn = functools.partial(train_step, cfg=cfg, sc=sc, tx=tx, sharder=sharder, p_shardings=p_sh)
  rep = NamedSharding(sharder.mesh, P())
  return jax.jit(fn, donate_argnums=(0,),
                 in_shardings=(state_sh, p_sh if with_ref else None,
                               batch_shardings(sharder, packed)),
                 out_shardings=(state_sh, rep))


def make_logprob_fn(cfg: models.ModelConfig, sc: StepConfig, sharder: Sharder, p_sh: Any,
                    packed: bool = False):
  """jit: (params, {"tokens" [K, m, T] (+ "segment_ids", "positions" when packed)}) ->
  aligned log-probs [K, m, T], one micro-batch at a time.

  The result is replicated, so every process of a multi-host run can read all of it."""
  keys = ("tokens",) + (PACKED_INPUTS if packed else ())

  def fn(params, inputs):
    cparams = _cast(params, ts.dtype_of(sc.compute_dtype))
    return jax.lax.map(lambda x: sequence_logprobs(cfg, cparams, x["tokens"], sc, sharder,
                                                   "none", **_model_inputs(x))[0], inputs)
  sh = batch_shardings(sharder, packed)
  return jax.jit(fn, in_shardings=(p_sh, {k: sh[k] for k in keys}),
                 out_shardings=NamedSharding(sharder.mesh, P()))


# --------------------------------------------------------------------------------------------
# Host-side driver
# --------------------------------------------------------------------------------------------
_COMPILED: dict = {}


def _opt_key(rl: ml_collections.ConfigDict) -> tuple:
  return tuple(float(rl[k]) for k in ("lr", "warmup_steps", "weight_decay", "adam_b1",
                                       "adam_b2", "adam_eps", "grad_clip"))


class Learner:
  """Owns the sharded train state and the compiled step; `update(batch)` runs the mini-batches.

  Args:
    cfg: the policy's ModelConfig.
    rl: the `rl` config section (`ssp_jax.rl.config.get_rl_config()`).
    sharder: mesh + rules (default: one device).
    params: initial policy params (e.g. `models.load_hf_checkpoint`); random when None. The
      reference policy (when rl.kl_coef > 0) is a frozen copy of them in rl.ref_dtype.
  """

  def __init__(self, cfg: models.ModelConfig, rl: ml_collections.ConfigDict,
               sharder: Optional[Sharder] = None, *, params: Any = None):
    self.cfg, self.rl = cfg, rl
    self.sharder = sharder if sharder is not None else ts.single_device_sharder()
    self.sc = StepConfig.from_config(rl)
    rows = self.sharder.axis_size("act_batch")
    if rl.micro_batch_size % rows:
      raise ValueError(f"rl.micro_batch_size={rl.micro_batch_size} must be a multiple of the "
                       f"{rows} devices the batch is sharded over; change it or the mesh")
    pdt = ts.dtype_of(rl.param_dtype)
    key = (cfg, self.sc, _opt_key(rl), self.sharder, str(pdt), rl.kl_coef != 0.0)
    if key not in _COMPILED:  # one compiled step per distinct setup, shared by Learners
      _COMPILED[key] = ts.make_optimizer(rl)
    self.tx = _COMPILED[key]
    self.abstract_state, self.state_shardings = ts.state_shardings(cfg, self.tx, self.sharder, pdt)
    self.state = ts.create_train_state(cfg, self.tx, self.sharder, seed=rl.seed, params=params,
                                       param_dtype=pdt)
    self.ref_params = None
    if rl.kl_coef != 0.0:
      self.ref_params = ts.make_reference(self.state["params"], cfg, self.sharder,
                                          ts.dtype_of(rl.ref_dtype))
    self._fkey = key + ("fns",)
    self.pack_stats: list[dict[str, float]] = []   # the last update's packing, per mini-batch

  def _fns(self, packed: bool, onpolicy: bool = False):
    """(compiled train step, compiled log-prob fn) for the padded or the packed layout;
    `onpolicy`: the step takes its old log-probs from its own forward (see `update`)."""
    fkey = self._fkey + (packed, onpolicy)
    sc = dataclasses.replace(self.sc, onpolicy_old_logp=onpolicy)
    if fkey not in _COMPILED:
      _COMPILED[fkey] = (
          make_train_step(self.cfg, sc, self.tx, self.sharder, self.state_shardings,
                          with_ref=self.ref_params is not None, packed=packed),
          make_logprob_fn(self.cfg, self.sc, self.sharder, self.state_shardings["params"],
                          packed=packed))
    return _COMPILED[fkey]

  def put(self, mb: dict) -> dict:
    """[M, ...] numpy mini-batch -> [K, m, ...] device arrays with the batch shardings (fields
    the step does not read, e.g. the host-only `length`, stay behind)."""
    sh = batch_shardings(self.sharder, is_packed(mb))
    # Every process holds the whole batch and hands each of its devices its own slice (works
    # on one host and on several).
    micro = to_micro({k: mb[k] for k in sh}, self.sc.micro_batch_size)
    return {k: jax.make_array_from_callback(v.shape, sh[k], lambda idx, v=v: v[idx])
            for k, v in micro.items()}

  def logprobs(self, batch: dict) -> np.ndarray:
    """Aligned log-probs [N, T] of `batch["tokens"]` under the current policy (a padded or a
    packed batch)."""
    n = batch["tokens"].shape[0]
    m = self.sc.micro_batch_size
    packed = is_packed(batch)
    padded = batch_lib.pad_rows(batch, int(math.ceil(max(n, 1) / m)) * m)
    dev = self.put(padded)
    inputs = {k: dev[k] for k in ("tokens",) + (PACKED_INPUTS if packed else ())}
    out = np.asarray(jax.device_get(self._fns(packed)[1](self.state["params"], inputs)))
    return out.reshape(-1, out.shape[-1])[:n]

  def pack_len(self, batch: dict) -> int:
    """Tokens per packed row: rl.pack_len, or the padded layout's row length when 0."""
    return int(self.rl.pack_len) or int(batch["tokens"].shape[1])

  def mini_batches(self, batch: dict, k: int, seed: Optional[int]) -> list[dict]:
    """The update's `k` mini-batches in the step's layout, all with one row count.

    Prompts are dealt to mini-batches as in the padded layout (a prompt's rows stay together);
    with rl.pack each mini-batch's trajectories are then packed (`ssp_jax.rl.pack`), its rows
    padded to a power-of-two number of micro-batches (few compiled shapes; the empty ones are
    skipped in the step). Sets `self.pack_stats`, one dict per mini-batch: fill_rate (real
    tokens / positions of the micro-batches that run), row_fill (real / packed rows' positions),
    rows, real_tokens, segments_per_row.
    """
    m = self.sc.micro_batch_size
    parts = batch_lib.split_mini_batches(batch, k, row_multiple=m, seed=seed)
    self.pack_stats = []
    if not self.rl.pack:
      return parts
    row_len = self.pack_len(batch)
    packed = []
    for part in parts:
      pb, _, stats = pack_lib.pack_batch(part, row_len, max_segments=self.sc.max_segments)
      # fill of what the step computes: rows come in whole micro-batches
      computed = -(-int(stats["rows"]) // m) * m * row_len
      stats = dict(stats, row_fill=stats["fill_rate"], fill_rate=stats["real_tokens"] / computed)
      packed.append(pb)
      self.pack_stats.append(stats)
    rows = pack_lib.micro_batches_bucket(max(p["tokens"].shape[0] for p in packed), m)
    return [batch_lib.pad_rows(p, rows) for p in packed]

  def update(self, batch: dict, *, num_prompts: Optional[int] = None,
             num_mini_batches: Optional[int] = None,
             lr_once: bool = False) -> list[dict[str, float]]:
    """One update call: old log-probs (when rl.recompute_old_logp), then one optimizer step per
    mini-batch: `num_mini_batches`, or ceil(prompts / rl.mini_batch_size) (see `ssp_jax.rl.batch`).

    The first mini-batch is on-policy; later ones see a moved policy and are clipped. With
    `lr_once` every step of the call uses the same learning rate and the LR schedule advances
    by one for the whole call (veRL steps its scheduler once per update_actor call); otherwise
    it advances per optimizer step. Returns one metrics dict per update (with its `lr`).
    """
    batch = dict(batch)
    roles = np.unique(batch["role"])
    if roles.size and (roles.min() < 0 or roles.max() >= len(ROLES)):
      raise ValueError(f"batch roles {roles.tolist()} outside 0..{len(ROLES) - 1} ({ROLES})")
    prompts = np.unique(batch["prompt"][batch["prompt"] >= 0]).size
    k = num_mini_batches or batch_lib.num_mini_batches(num_prompts or prompts,
                                                       self.rl.mini_batch_size)
    step = int(jax.device_get(self.state["step"]))
    seed = self.rl.seed * 1_000_003 + step if self.rl.shuffle_mini_batches else None
    mbs = self.mini_batches(batch, k, seed)
    # With one mini-batch the policy before the call is the policy of its only step, so the
    # step's own log-probs (under stop-gradient) are the recomputed old log-probs: one forward
    # pass fewer, same loss and gradient (rl.fuse_old_logp; the ratio is exactly 1).
    onpolicy = bool(self.rl.recompute_old_logp and len(mbs) == 1
                    and self.rl.get("fuse_old_logp", True))
    if self.rl.recompute_old_logp and not onpolicy:  # all with the policy before the first step
      for mb in mbs:
        mb["old_logp"] = np.where(mb["loss_mask"] > 0, self.logprobs(mb), 0.0)
    lr_fn = ts.lr_schedule(self.rl.lr, self.rl.warmup_steps)
    count0 = self._schedule_count()
    out, lrs = [], []
    for i, mb in enumerate(mbs):
      if lr_once:
        self._set_schedule_count(count0)
      lrs.append(float(lr_fn(count0 if lr_once else count0 + i)))
      step_fn = self._fns(is_packed(mb), onpolicy)[0]
      self.state, metrics = step_fn(self.state, self.ref_params, self.put(mb))
      out.append(metrics)
    if lr_once and out:
      self._set_schedule_count(count0 + 1)
    out = [dict({k: float(v) for k, v in jax.device_get(m).items()}, lr=lr)
           for m, lr in zip(out, lrs)]
    for m, stats in zip(out, self.pack_stats):
      m.update({f"pack/{k}": v for k, v in stats.items()
                if k in ("fill_rate", "row_fill", "rows", "segments_per_row")})
    return out

  def update_by_role(self, batch: dict, *, order: tuple[int, ...] = (0, 1),
                     rows_per_mini_batch: Optional[int] = None) -> dict[str, list[dict]]:
    """The original SSP schedule (`rl.update_schedule="proposer_then_solver"`): one update call
    per role in `order` (proposer, then solver), each recomputing its old log-probs with the
    weights the previous call left, the LR schedule stepping once per call.

    A role's rows are split into ceil(rows / rows_per_mini_batch) mini-batches (prompts kept
    whole); the default, rl.mini_batch_size x the largest prompt group in `batch`, is veRL's
    ppo_mini_batch_size x rollout.n (SSP paper setting: proposer 256 rows -> 1 step, solver
    1280 rows -> 2). Returns {role name: metrics of its updates}; roles without rows are skipped.
    """
    prompt = batch["prompt"]
    if rows_per_mini_batch is None:
      _, sizes = np.unique(prompt[prompt >= 0], return_counts=True)
      rows_per_mini_batch = self.rl.mini_batch_size * int(sizes.max(initial=1))
    out = {}
    for role in order:
      idx = np.flatnonzero((batch["role"] == role) & (prompt >= 0))
      if not idx.size:
        continue
      sub = batch_lib.take_rows(batch, idx)
      k = max(1, int(math.ceil(idx.size / rows_per_mini_batch)))
      out[ROLES[role]] = self.update(sub, num_mini_batches=k, lr_once=True)
    return out

  def _schedule_states(self) -> list:
    is_sched = lambda x: isinstance(x, optax.ScaleByScheduleState)
    return [x for x in jax.tree.leaves(self.state["opt_state"], is_leaf=is_sched)
            if is_sched(x)]

  def _schedule_count(self) -> int:
    """The LR schedule's position (optax's ScaleByScheduleState count; Adam's own step count,
    used for bias correction, is separate and always counts optimizer steps)."""
    states = self._schedule_states()
    if len(states) != 1:
      raise RuntimeError(f"expected one LR schedule state in the optimizer, found {len(states)}")
    return int(jax.device_get(states[0].count))

  def _set_schedule_count(self, value: int) -> None:
    is_sched = lambda x: isinstance(x, optax.ScaleByScheduleState)

    def put(x):
      if not is_sched(x):
        return x
      sh = x.count.sharding
      return x._replace(count=jax.make_array_from_callback(
          (), sh, lambda idx: np.asarray(value, np.int32)))
    self.state = dict(self.state, opt_state=jax.tree.map(put, self.state["opt_state"],
                                                         is_leaf=is_sched))

  def should_stop(self) -> bool:
    """True after rl.max_nonfinite_steps consecutive skipped updates (checkpoint, then stop)."""
    return ts.too_many_nonfinite(self.state, self.rl.max_nonfinite_steps)
