"""Time of one SSP update under each `rl.update_schedule`; prints one JSON line.

One SSP-shaped batch (--proposers prompts of 1 row, --problems prompts of --solver-n rows, every
row --seq tokens, the first eighth a prompt) goes through `ssp_jax.rl.schedule.run_updates`
exactly as in training: old log-probs recomputed by the learner, then the optimizer steps.
  fused                 one old-log-prob pass over all rows, ceil(prompts / mini_batch) steps
  by_role  the original: a pass + steps over the proposer rows, then a pass over the
                        solver rows with the updated weights + their steps (mini-batch =
                        mini_batch x solver_n rows, veRL's rule)
Random weights and advantages; one untimed warm-up update per schedule compiles its shapes.
Besides the times it reports the optimizer steps per role and the policy drift (`ppo_kl`,
`clipfrac`) of the solver's first update, which by_role makes on-policy.

GPU (one H200; the paper's shape scaled down to fit 10 minutes):
  python bench/ssp_update.py --preset qwen2.5-1.5b --seq 2048 --proposers 64 --problems 64 \\
      --mini-batch 32 --micro-batch 16 --remat dots
CPU smoke test:
  python bench/ssp_update.py --tiny
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import models  # noqa: E402
from ssp_jax.rl import batch as batch_lib  # noqa: E402
from ssp_jax.rl import config as rl_config  # noqa: E402
from ssp_jax.rl.learner import Learner  # noqa: E402
from ssp_jax.rl.roles import RoleTable  # noqa: E402
from ssp_jax.rl.schedule import run_updates as run_table_updates  # noqa: E402
from ssp_jax.ssp import game as ssp_game  # noqa: E402

TINY = models.ModelConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2,
                          num_heads=4, num_kv_heads=2, head_dim=16)


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--preset", default="qwen2.5-1.5b", help="models.presets name")
  p.add_argument("--tiny", action="store_true", help="a tiny model and batch (CPU smoke test)")
  p.add_argument("--seq", type=int, default=2048, help="tokens per row")
  p.add_argument("--proposers", type=int, default=64, help="proposer prompts (1 row each)")
  p.add_argument("--problems", type=int, default=64, help="solver prompts")
  p.add_argument("--solver-n", type=int, default=5, help="solver rows per problem")
  p.add_argument("--mini-batch", type=int, default=32, help="rl.mini_batch_size (prompts)")
  p.add_argument("--micro-batch", type=int, default=16, help="rl.micro_batch_size (rows)")
  p.add_argument("--steps", type=int, default=2, help="timed updates per schedule")
  p.add_argument("--remat", default="dots")
  p.add_argument("--kl-coef", type=float, default=0.01)
  p.add_argument("--attn-impl", default="auto", help="xla | cudnn | auto (cudnn on GPU)")
  p.add_argument("--lr", type=float, default=1e-6)
  a = p.parse_args(argv)
  if a.tiny:
    a.seq, a.proposers, a.problems, a.solver_n = 64, 4, 4, 2
    a.mini_batch, a.micro_batch, a.remat, a.steps, a.lr = 2, 2, "none", 1, 1e-3
  return a


def ssp_batch(a, vocab: int, seed: int = 0) -> batch_lib.Batch:
  rng = np.random.default_rng(seed)
  n = a.proposers + a.problems * a.solver_n
  mask = np.ones((n, a.seq), np.float32)
  mask[:, : a.seq // 8] = 0
  return batch_lib.Batch(
      tokens=rng.integers(1, vocab, (n, a.seq), dtype=np.int32), loss_mask=mask,
      old_logp=np.zeros((n, a.seq), np.float32),
      length=np.full(n, a.seq, np.int32),   # full rows (packing keeps one per row)
      advantages=rng.normal(size=n).astype(np.float32),
      loss_weight=np.ones(n, np.float32),
      role=np.asarray([0] * a.proposers + [1] * (n - a.proposers), np.int32),
      prompt=np.asarray(list(range(a.proposers)) +
                        [a.proposers + i // a.solver_n for i in range(n - a.proposers)], np.int32))


def rl_for(a):
  rl = rl_config.get_rl_config(roles={"proposer": "reinforce", "solver": "grpo"})
  on_gpu = jax.devices()[0].platform == "gpu"
  rl.update(mini_batch_size=a.mini_batch, micro_batch_size=a.micro_batch, remat=a.remat,
            kl_coef=a.kl_coef, lr=a.lr, max_len=a.seq, bucket=a.seq,
            attn_impl=("cudnn" if on_gpu else "xla") if a.attn_impl == "auto" else a.attn_impl)
  if a.tiny:
    rl.update(compute_dtype="float32", ref_dtype="float32", logprob_chunk=64)
  return rl


def run_updates(learner, batch: batch_lib.Batch, schedule: str) -> list[dict]:
  table = RoleTable.from_config(learner.rl, ssp_game.ROLES)
  return run_table_updates(learner, batch, schedule, table, ssp_game.UPDATE_ORDER)


def time_schedule(a, cfg, schedule: str, batch: batch_lib.Batch) -> dict:
  learner = Learner(cfg, rl_for(a), models.Sharder(models.make_mesh((("data", -1),
                                                                    ("tensor", 1)))))
  t0 = time.perf_counter()
  run_updates(learner, batch, schedule)                         # warm-up: compiles
  jax.block_until_ready(learner.state["params"])
  first = time.perf_counter() - t0
  times, ups = [], []
  for _ in range(a.steps):
    t0 = time.perf_counter()
    ups = run_updates(learner, batch, schedule)
    jax.block_until_ready(learner.state["params"])
    times.append(time.perf_counter() - t0)
  if schedule == "fused":     # prompts are dealt to mini-batches in order (ssp_jax.rl.batch)
    groups = np.array_split(np.arange(a.proposers + a.problems), len(ups))
    k_prop = sum(int(g.max()) < a.proposers for g in groups)   # steps of proposer rows only
  else:
    k_prop = sum("role_proposer" in u for u in ups)
  solver_first = k_prop        # the first update that holds solver rows
  return {"step_s_median": float(np.median(times)), "step_s_all": [round(t, 4) for t in times],
          "first_call_s": round(first, 2), "optimizer_steps": len(ups),
          "proposer_steps": k_prop, "solver_steps": len(ups) - k_prop,
          "solver_first_ppo_kl": ups[solver_first]["ppo_kl"],
          "solver_first_clipfrac": ups[solver_first]["clipfrac"],
          "loss_mean": float(np.mean([u["loss"] for u in ups]))}


def main(argv=None) -> int:
  a = parse_args(argv)
  cfg = TINY if a.tiny else models.get_preset(a.preset)
  batch = ssp_batch(a, cfg.vocab_size)
  out = {"bench": "ssp_update", "model": "tiny" if a.tiny else a.preset, "seq": a.seq,
         "rows": batch.num_rows, "proposers": a.proposers,
         "problems": a.problems, "solver_n": a.solver_n, "mini_batch": a.mini_batch,
         "micro_batch": a.micro_batch, "remat": a.remat, "kl_coef": a.kl_coef,
         "devices": jax.device_count(), "device_kind": jax.devices()[0].device_kind,
         "jax": jax.__version__}
  for schedule in rl_config.UPDATE_SCHEDULES:
    out[schedule] = time_schedule(a, cfg, schedule, batch)
  out["ratio_by_role_to_fused"] = (out["by_role"]["step_s_median"]
                                                / out["fused"]["step_s_median"])
  print(json.dumps(out))
  return 0


if __name__ == "__main__":
  sys.exit(main())
