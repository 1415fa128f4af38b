"""The `rl` section of a run config (ml_collections). Defaults are the original SSP run's
(veRL cb809d66 defaults + `examples/train_ssp.sh`) unless a comment says why not.

Use in a run config:
  from ssp_jax.rl.config import get_rl_config
  config.rl = get_rl_config()
and override with `--config.rl.lr=2e-6`.
"""
from __future__ import annotations

from typing import Optional, Sequence

import ml_collections

from ssp_jax.rl.registry import RLConfigError
from ssp_jax.rl.roles import check_roles, roles_config

# How one step's batch becomes optimizer updates (`ssp_jax.rl.schedule.run_updates`).
UPDATE_SCHEDULES = ("fused", "by_role", "proposer_then_solver")
BY_ROLE = ("by_role", "proposer_then_solver")   # the second: by_role's name before roles were
                                                # data, still accepted so old commands run
ATTN_IMPLS = ("xla", "blocked", "cudnn", "cudnn_gqa", "auto")   # models.decoder.hidden_states


def get_rl_config(roles: Optional[dict[str, str]] = None) -> ml_collections.ConfigDict:
  """The `rl` section; `roles` maps each of the game's role names to its advantage estimator
  (the game's base config passes them, e.g. {"proposer": "reinforce", "solver": "grpo"})."""
  c = ml_collections.ConfigDict()
  # -- optimizer (optax AdamW) --------------------------------------------------------------
  c.lr = 1e-6                  # peak learning rate (veRL actor.optim.lr)
  c.warmup_steps = 5           # linear warm-up: lr * min(1, (update + 1) / warmup_steps)
  c.weight_decay = 0.01        # decoupled AdamW decay, applied to every parameter (as torch)
  c.adam_b1 = 0.9              # AdamW beta1
  c.adam_b2 = 0.999            # AdamW beta2
  c.adam_eps = 1e-8            # AdamW epsilon
  c.grad_clip = 1.0            # global grad-norm clip (veRL actor.grad_clip)
  # -- policy loss ----------------------------------------------------------------------------
  c.clip_low = 0.2             # ratio clipped below at 1 - clip_low
  c.clip_high = 0.285          # ratio clipped above at 1 + clip_high (SSP script)
  c.dual_clip = 3.0            # dual-clip c for negative advantages; None turns it off
  c.kl_coef = 0.01             # KL-to-reference loss weight; 0 drops the reference model
  c.kl_type = "k3"             # "k3"/"low_var_kl", "k1"/"kl", "k2"/"mse"
  c.loss_agg = "token-mean"    # veRL's names. "token-mean": the exact token mean of the
                               # mini-batch. "seq-mean-token-mean": the mean over trajectories
                               # of each one's token mean, which is what the original run
                               # computes in effect (veRL token-mean inside micro-batches of one
                               # sequence, averaged by gradient accumulation). Also
                               # "seq-mean-token-sum". Packing changes none of them.
  c.entropy_coef = 0.0         # entropy bonus weight (entropy is always logged)
  c.temperature = 1.0          # logits / temperature before log-softmax (the sampler's T)
  # -- advantages -----------------------------------------------------------------------------
  c.roles = roles_config(**(roles or {}))  # {role: {estimator, loss_weight}} (ssp_jax.rl.roles)
  c.grpo_std_normalize = True  # False: mean-only A = r - mean_g (the paper's formula, Dr.GRPO)
  c.grpo_eps = 1e-6            # GRPO std epsilon
  # -- batching -------------------------------------------------------------------------------
  c.update_schedule = "fused"  # "fused": one update call over all roles (one old-log-prob pass,
                               # then ceil(prompts / mini_batch_size) optimizer steps, the LR
                               # schedule stepping per optimizer step) -- a difference from the
                               # original. "by_role": one update call per role in the game's
                               # update order (SSP: the original's proposer, then the solver with
                               # its old log-probs recomputed after the proposer's update; each
                               # role's mini-batch holds mini_batch_size x largest-group rows,
                               # veRL's ppo_mini_batch_size x rollout.n; the LR schedule steps
                               # once per call, veRL's lr_scheduler.step() in update_actor)
  c.mini_batch_size = 128      # prompts per optimizer update (256 prompts -> 2 updates)
  c.shuffle_mini_batches = False  # deal prompts to mini-batches in a seeded random order
  c.micro_batch_size = 8       # sequences per gradient-accumulation step, whole mesh (must be a
                               # multiple of the batch-sharding mesh size)
  c.bucket = 128               # sequence lengths rounded up to a multiple of this
  c.max_len = 12288            # longest training sequence (prompt 4096 + response 8192)
  c.pack = True                # sequence packing: several trajectories per row, attention per
                               # trajectory (ssp_jax.rl.pack); False: one padded row each
  c.pack_len = 0               # tokens per packed row; 0: the padded layout's row length (the
                               # longest trajectory rounded to `bucket`, at most max_len)
  c.pack_max_segments = 64     # most trajectories in one packed row (a static shape of the
                               # cuDNN packed attention)
  c.recompute_old_logp = True  # recompute old log-probs with the learner (veRL); False uses
                               # the sampler's Trajectory.logprobs
  c.fuse_old_logp = True       # with one mini-batch per update call, take the recomputed old
                               # log-probs from the step's own forward (stop-gradient): the
                               # same values, one forward pass fewer; False: a separate pass
  # -- compute ----------------------------------------------------------------------------
  c.remat = "full"             # models.decoder.REMAT_POLICIES: none, full, dots, dots_flash
                               # (dots + cuDNN attention's forward outputs), save_attn_out
  c.compute_dtype = "bfloat16" # forward/backward dtype; master params stay param_dtype
  c.param_dtype = "float32"    # master params, gradients and AdamW moments
  c.ref_dtype = "bfloat16"     # frozen reference params (forward only)
  c.attn_impl = "auto"         # "auto": cudnn on a GPU, blocked on a CPU, xla elsewhere;
                               # "xla" (einsum, chunked); "blocked" (block-sparse, skips the
                               # pairs the mask hides); "cudnn" (flash attention, GPU);
                               # "cudnn_gqa" (cudnn, packed rows' grouped-query K/V not
                               # repeated to the query heads: needs a JAX whose wrapper
                               # strides them by the key's heads, checked here)
  c.attn_chunk = 512           # "xla": query chunks that skip the keys after them (same
                               # result, about half the score matrix on long rows); 0: one block.
                               # "blocked": its block length (0: 128)
  c.logprob_chunk = 512        # tokens per lm_head chunk: logits never exist as [B, T, V]
  c.logprob_positions = "loss" # "loss": the lm_head runs only at the loss tokens (their hidden
                               # states gathered, a power-of-two count per row: same log-probs,
                               # no [D, V] GEMM on prompts and observations); "all": at every
                               # position, then masked
  c.logits_grad_dtype = "compute"  # the fp32 logits' gradient, rounded to compute_dtype before
                               # the output projection's two backward GEMMs (bf16 GEMMs, as in
                               # veRL's bf16 learner); "float32": kept fp32 (fp32/TF32 GEMMs)
  c.layer_loop = "scan"        # the learner's layers as a lax.scan over the stacked params,
                               # one layer an iteration; "scan:N": N an iteration; "unrolled":
                               # straight-line code (no [L, ...] stacks, no weight slicing in a
                               # loop; a longer compile: the 1.5B and 0.5B updates 7-12%
                               # faster on an H100, docs/rl.md). Same values
  # -- robustness -------------------------------------------------------------------------
  c.max_nonfinite_steps = 5    # stop (after a checkpoint) after this many consecutive skips
  c.seed = 0                   # train-state RNG seed
  return c


def check_rl_config(c: ml_collections.ConfigDict, roles: Sequence[str]) -> None:
  """The one check of the `rl` section, run by every game's validator before any model is
  loaded: RangeError naming the first numeric field out of its valid range (a negative learning
  rate or clip, a zero batch or temperature would run, or give NaN losses, without a word);
  RLConfigError naming the first unknown choice (remat, kl_type, loss_agg, dtypes, attn_impl,
  update_schedule) or bad `rl.roles` entry against the game's declared `roles`."""
  from ssp_jax.config_ranges import check_range
  r = lambda name, *a, **k: check_range("rl", c, name, *a, **k)
  r("lr", 0, note="0 = no update: the policy stays as loaded")
  r("warmup_steps", 0, note="0 = no warm-up")
  r("weight_decay", 0)
  r("adam_b1", 0, 1, high_open=True)
  r("adam_b2", 0, 1, high_open=True)
  r("adam_eps", 0, low_open=True)
  r("grad_clip", 0, low_open=True, note="a global-norm clip of 0 would zero every gradient")
  r("clip_low", 0, 1, high_open=True, note="the ratio is clipped below at 1 - clip_low")
  r("clip_high", 0, note="the ratio is clipped above at 1 + clip_high")
  r("dual_clip", 1, low_open=True, optional=True, note="None turns it off")
  r("kl_coef", 0, note="0 drops the reference model")
  r("temperature", 0, low_open=True, note="log-probs are log_softmax(logits / temperature)")
  r("grpo_eps", 0, low_open=True)
  r("mini_batch_size", 1)
  r("micro_batch_size", 1)
  r("bucket", 1)
  r("max_len", 1)
  r("pack_len", 0, note="0 = the padded layout's row length")
  r("pack_max_segments", 1)
  r("attn_chunk", 0, note="0 = one block")
  r("logprob_chunk", 1)
  r("max_nonfinite_steps", 1)
  _check_choices(c)
  check_roles(c.get("roles"), roles)


def _check_choices(c: ml_collections.ConfigDict) -> None:
  from models.decoder import REMAT_POLICIES
  from ssp_jax.rl.registry import KL_PENALTIES, LOSS_AGGREGATIONS
  choices = {"remat": tuple(REMAT_POLICIES), "kl_type": KL_PENALTIES.names(),
             "loss_agg": LOSS_AGGREGATIONS.names(), "attn_impl": ATTN_IMPLS,
             "update_schedule": UPDATE_SCHEDULES, "logprob_positions": ("loss", "all"),
             "logits_grad_dtype": ("compute", "float32")}
  for name, known in choices.items():
    if c.get(name) not in known:
      raise RLConfigError(f"config.rl.{name}={c.get(name)!r} is unknown; known: "
                          f"{', '.join(known)}")
  from ssp_jax.rl.step import layer_unroll
  try:
    layer_unroll(str(c.get("layer_loop", "scan")))
  except ValueError as e:
    raise RLConfigError(f"config.rl.{e}") from None
  if c.get("attn_impl") == "cudnn_gqa":
    from models.layers import CUDNN_GQA_REFUSED, cudnn_packed_gqa_ok
    if not cudnn_packed_gqa_ok():
      raise RLConfigError(f"config.rl.{CUDNN_GQA_REFUSED}")
  import jax.numpy as jnp
  for name in ("compute_dtype", "param_dtype", "ref_dtype"):
    try:
      jnp.dtype(c.get(name))
    except TypeError:
      raise RLConfigError(f"config.rl.{name}={c.get(name)!r} is not a dtype; use float32 or "
                          "bfloat16") from None
