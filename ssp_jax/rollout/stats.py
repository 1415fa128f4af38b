"""The counters of one `generate` call (`Rollout.stats`; docs/rollout.md, "API")."""
from __future__ import annotations

import collections

import numpy as np

from ssp_jax import sampling as S
from ssp_jax.sampling import paged as PG

TIMERS = ("plan_s", "prefill_s", "decode_s", "transfer_s", "absorb_s", "search_s", "splice_s")


def count_decode(stats: collections.Counter, cfg, st: S.DecodeState, pos0_B: np.ndarray,
                 limit_B: np.ndarray, res: S.DecodeOut) -> None:
  """Slot-step and KV-read counters of one decode call (res on the host)."""
  steps, B = int(res.steps), len(limit_B)
  ran_B = limit_B > 0
  stats["decode_calls"] += 1
  stats["decode_steps"] += steps
  stats["slot_steps"] += steps * B
  stats["policy_tokens"] += int(res.count_B.sum())
  # slot-steps without a token: a row that finished (stop, eos, limit) before the call
  # ended waits for it; an empty (or page-blocked) slot makes nothing for the whole call
  stats["wait_slot_steps"] += int(((steps - res.count_B) * ran_B).sum())
  stats["empty_slot_steps"] += steps * int((~ran_B).sum())
  _count_kv_reads(stats, cfg, st, pos0_B, ran_B, res)


def _count_kv_reads(stats, cfg, st, pos0_B, ran_B, res) -> None:
  """KV slots the decode attention read in this call (`kv_read_slot_steps`) against the slots
  the rows that made a token needed (`kv_used_slot_steps`: pos + 1 at each of their steps).
  Dense attention reads B x S slots a step (counted so for "cudnn" too, whose kernel may skip
  blocks past a row's length); paged "gather" B x (its table columns x
  page_size); the Pallas kernels (paged "pallas" / "pallas_jax", or the dense one) each row's own
  pos + 1 (a row that is done stays at its last position; an empty slot is counted as one slot;
  the kernels' last partly used block is not counted). A count, not a timing: the same on every
  backend."""
  n, steps = res.count_B.astype(np.int64), int(res.steps)
  n = n * ran_B
  stats["kv_used_slot_steps"] += int((n * (pos0_B + 1) + n * (n - 1) // 2).sum())
  B = len(pos0_B)
  if PG.reads_own_slots(cfg.decode_attention):   # the dense "pallas" too
    # a row's length grows while it runs, then stays: sum over steps of pos0 + min(i, n) + 1
    grown = n * (n - 1) // 2 + (steps - n) * n
    stats["kv_read_slot_steps"] += int((steps * (pos0_B + 1) + grown).sum())
  elif cfg.kv_layout != "paged":
    stats["kv_read_slot_steps"] += steps * B * int(st.cache["k"][0].shape[2])
  else:
    stats["kv_read_slot_steps"] += steps * B * int(st.cache["table"].shape[1]) * int(
        cfg.page_size)


def summary(stats: collections.Counter) -> dict:
  """The counters plus derived figures: other_s, decode_ms_per_step, occupancy,
  kv_read_over_used."""
  out = dict(stats)
  timed = sum(out.get(k, 0.0) for k in TIMERS)
  out["other_s"] = max(out["wall_s"] - timed, 0.0)
  if out.get("decode_steps"):
    out["decode_ms_per_step"] = 1000.0 * out["decode_s"] / out["decode_steps"]
    out["occupancy"] = out.get("policy_tokens", 0) / out["slot_steps"]
  if out.get("kv_used_slot_steps"):
    out["kv_read_over_used"] = out["kv_read_slot_steps"] / out["kv_used_slot_steps"]
  return out


class StepTotals:
  """A step's `generate` calls summed into the `rollout/*` metrics a game logs (docs/training.md):
  the decode step's time, how full the slots were, the paged pool's use and preemptions, so a
  run's metrics.jsonl shows whether its rollouts run at the engine's speed and whether
  `rollout.kv_max_tokens` (the pool) is sized to what the calls used."""

  SUMS = ("decode_s", "prefill_s", "decode_steps", "slot_steps", "policy_tokens", "preemptions")

  def __init__(self):
    self.sums: collections.Counter = collections.Counter()
    self.pool_use: float | None = None

  def clear(self) -> None:
    self.sums.clear()
    self.pool_use = None

  def add(self, stats: dict) -> None:
    """One call's stats (a `summary`; missing counters count as 0)."""
    self.sums["calls"] += 1
    for k in self.SUMS:
      self.sums[k] += stats.get(k, 0)
    if stats.get("kv_pool_pages"):   # paged: the peak pages in use over the pool's pages
      use = float(stats.get("kv_pages_peak", 0)) / float(stats["kv_pool_pages"])
      self.pool_use = max(self.pool_use or 0.0, use)

  def metrics(self) -> dict[str, float]:
    """What the calls did, the same on every machine for a seeded run: rollout/{calls,
    policy_tokens, decode_steps, preemptions} (sums), rollout/occupancy (tokens made per
    slot-step) and rollout/kv_pool_use (the largest share of its pool a paged call held; paged
    layout only). How fast: time/{rollout_prefill, rollout_decode} (seconds) and
    perf/{decode_ms_per_step, decode_tok_per_s} (decode time only). {} when no call ran."""
    s = self.sums
    if not s["calls"]:
      return {}
    out = {f"rollout/{k}": float(s[k])
           for k in ("calls", "policy_tokens", "decode_steps", "preemptions")}
    out["time/rollout_prefill"] = float(s["prefill_s"])
    out["time/rollout_decode"] = float(s["decode_s"])
    if s["decode_steps"]:
      out["rollout/occupancy"] = s["policy_tokens"] / max(s["slot_steps"], 1)
      out["perf/decode_ms_per_step"] = 1000.0 * s["decode_s"] / s["decode_steps"]
    if s["decode_s"] > 0:
      out["perf/decode_tok_per_s"] = s["policy_tokens"] / s["decode_s"]
    if self.pool_use is not None:
      out["rollout/kv_pool_use"] = self.pool_use
    return out
