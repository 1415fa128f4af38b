"""The `Learner`: the sharded train state, its compiled steps, and the host-side update call
over a rollout batch (mini-batches, old log-probs, packing, the LR schedule). The step itself is
`ssp_jax.rl.step`; update calls per role are `ssp_jax.rl.schedule`.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

import jax
import ml_collections
import numpy as np
import optax

import models
from models.sharding import Sharder
from ssp_jax.rl import batch as batch_lib
from ssp_jax.rl import pack as pack_lib
from ssp_jax.rl import train_state as ts
from ssp_jax.rl.step import (PACKED_INPUTS, StepConfig, batch_shardings, make_logprob_fn,
                             make_train_step, score_positions, to_micro)
from ssp_jax.rl.step import (  # noqa: F401  (the step's names, as `ssp_jax.rl.learner.<name>`)
    accumulate_grads, chunked_logprobs, lm_head_weight, sequence_logprobs, train_step)


class CompiledSteps:
  """The jitted variants of one learner's step: (train step, log-prob fn) per batch layout
  (padded / packed) and old-log-prob source (a separate pass / the step's own forward),
  compiled on first use and kept for the learner's lifetime."""

  def __init__(self, cfg: models.ModelConfig, sc: StepConfig, tx: optax.GradientTransformation,
               sharder: Sharder, state_shardings: Any, with_ref: bool):
    self.cfg, self.sc, self.tx, self.sharder = cfg, sc, tx, sharder
    self.state_shardings, self.with_ref = state_shardings, with_ref
    self._fns: dict[tuple[bool, bool, bool], tuple[Any, Any]] = {}

  def get(self, packed: bool, onpolicy: bool = False, scored: Optional[bool] = None):
    """(compiled train step, compiled log-prob fn); `onpolicy`: the step takes its old
    log-probs from its own forward (see `Learner.update`); `scored`: the log-prob fn computes
    only the positions of its `score_idx` (default: as the step does, rl.logprob_positions)."""
    scored = self.sc.score_loss_tokens if scored is None else scored
    key = (packed, onpolicy, scored)
    if key not in self._fns:
      sc = dataclasses.replace(self.sc, onpolicy_old_logp=onpolicy)
      self._fns[key] = (
          make_train_step(self.cfg, sc, self.tx, self.sharder, self.state_shardings,
                          with_ref=self.with_ref, packed=packed),
          make_logprob_fn(self.cfg, self.sc, self.sharder, self.state_shardings["params"],
                          packed=packed, scored=scored))
    return self._fns[key]


class Learner:
  """Owns the sharded train state and its compiled steps (`self.steps`); `update(batch)` runs
  the mini-batches. The learner knows no role names: a batch carries each row's role id and
  role loss weight.

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
    self.tx = ts.make_optimizer(rl)
    self.abstract_state, self.state_shardings = ts.state_shardings(cfg, self.tx, self.sharder, pdt)
    self.state = ts.create_train_state(cfg, self.tx, self.sharder, seed=rl.seed, params=params,
                                       param_dtype=pdt)
    self.ref_params = None
    if rl.kl_coef != 0.0:
      self.ref_params = ts.make_reference(self.state["params"], cfg, self.sharder,
                                          ts.dtype_of(rl.ref_dtype))
    self.steps = CompiledSteps(cfg, self.sc, self.tx, self.sharder, self.state_shardings,
                               with_ref=self.ref_params is not None)
    self.pack_stats: list[dict[str, float]] = []   # the last update's packing, per mini-batch

  def put(self, mb: batch_lib.Rows, scored: Optional[bool] = None) -> dict:
    """[M, ...] numpy mini-batch -> {field: [K, m, ...] device array} with the batch shardings
    (`mb.step_inputs()`: fields the step does not read, e.g. the host-only `length`, stay),
    and the loss tokens' positions (`score_idx`) when `scored` (default: rl.logprob_positions
    is "loss")."""
    scored = self.sc.score_loss_tokens if scored is None else scored
    sh = batch_shardings(self.sharder, mb.PACKED, scored)
    # Every process holds the whole batch and hands each of its devices its own slice (works
    # on one host and on several).
    micro = to_micro(mb.step_inputs(), self.sc.micro_batch_size)
    if scored:
      micro["score_idx"] = score_positions(micro["loss_mask"])
    return {k: jax.make_array_from_callback(v.shape, sh[k], lambda idx, v=v: v[idx])
            for k, v in micro.items()}

  def logprobs(self, batch: batch_lib.Rows, loss_only: bool = False) -> np.ndarray:
    """Aligned log-probs [N, T] of `batch.tokens` under the current policy (a padded `Batch`
    or a `PackedBatch`); with `loss_only` only at the loss tokens (0 elsewhere)."""
    n = batch.num_rows
    m = self.sc.micro_batch_size
    packed = batch.PACKED
    padded = batch.pad_rows(int(math.ceil(max(n, 1) / m)) * m)
    dev = self.put(padded, scored=loss_only)
    keys = ("tokens",) + (PACKED_INPUTS if packed else ()) + (("score_idx",) if loss_only else ())
    fn = self.steps.get(packed, scored=loss_only)[1]
    out = np.asarray(jax.device_get(fn(self.state["params"], {k: dev[k] for k in keys})))
    return out.reshape(-1, out.shape[-1])[:n]

  def pack_len(self, batch: batch_lib.Batch) -> int:
    """Tokens per packed row: rl.pack_len, or the padded layout's row length when 0."""
    return int(self.rl.pack_len) or batch.row_len

  def mini_batches(self, batch: batch_lib.Batch, k: int,
                   seed: Optional[int]) -> list[batch_lib.Rows]:
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
    rows = pack_lib.micro_batches_bucket(max(p.num_rows for p in packed), m)
    return [p.pad_rows(rows) for p in packed]

  def update(self, batch: batch_lib.Batch, *, num_prompts: Optional[int] = None,
             num_mini_batches: Optional[int] = None,
             lr_once: bool = False) -> list[dict[str, float]]:
    """One update call: old log-probs (when rl.recompute_old_logp), then one optimizer step per
    mini-batch: `num_mini_batches`, or ceil(prompts / rl.mini_batch_size) (see `ssp_jax.rl.batch`).

    The first mini-batch is on-policy; later ones see a moved policy and are clipped. With
    `lr_once` every step of the call uses the same learning rate and the LR schedule advances
    by one for the whole call (veRL steps its scheduler once per update_actor call); otherwise
    it advances per optimizer step. Returns one metrics dict per update (with its `lr`).
    """
    prompts = np.unique(batch.prompt[batch.prompt >= 0]).size
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
      loss_only = self.sc.score_loss_tokens
      mbs = [mb.replace(old_logp=np.where(mb.loss_mask > 0, self.logprobs(mb, loss_only), 0.0))
             for mb in mbs]
    lr_fn = ts.lr_schedule(self.rl.lr, self.rl.warmup_steps)
    count0 = ts.schedule_count(self.state)
    out, lrs = [], []
    for i, mb in enumerate(mbs):
      if lr_once:
        self.state = ts.with_schedule_count(self.state, count0)
      lrs.append(float(lr_fn(count0 if lr_once else count0 + i)))
      step_fn = self.steps.get(mb.PACKED, onpolicy)[0]
      self.state, metrics = step_fn(self.state, self.ref_params, self.put(mb))
      out.append(metrics)
    if lr_once and out:
      self.state = ts.with_schedule_count(self.state, count0 + 1)
    out = [dict({k: float(v) for k, v in jax.device_get(m).items()}, lr=lr)
           for m, lr in zip(out, lrs)]
    for m, stats in zip(out, self.pack_stats):
      m.update({f"pack/{k}": v for k, v in stats.items()
                if k in ("fill_rate", "row_fill", "rows", "segments_per_row")})
    return out

  def should_stop(self) -> bool:
    """True after rl.max_nonfinite_steps consecutive skipped updates (checkpoint, then stop)."""
    return ts.too_many_nonfinite(self.state, self.rl.max_nonfinite_steps)
