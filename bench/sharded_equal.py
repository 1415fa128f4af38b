"""Sharded equals unsharded (issue 15, item 2): greedy rollouts and one Learner update on a
small random Qwen2-shaped model, on 1 device against the 2- and 8-device meshes of the paper
config; prints one JSON line per comparison and a final verdict line.

Layouts (mesh axes data x tensor, the paper config's `:gpu` variant:
configs/ssp_qwen2_5_7b_instruct.py sets `mesh.axes = (("data", -1), ("tensor", 4))`):
  1 device    data 1 x tensor 1: the reference (rollout engine without a sharder)
  2 devices   data 1 x tensor 2 and data 2 x tensor 1 (tensor 4 does not fit on 2: the two
              halves of the paper layout, tensor parallel and FSDP, each on its own)
  N >= 4      the `:gpu` axes resolved on N devices (8: data 2 x tensor 4, the 8-GPU host)
Sizes that need more devices than `jax.devices()` has are skipped, with a line saying so.

What is compared against the 1-device run, per layout:
  rollout_single_turn   greedy decode of 8 prompts, no search
  rollout_multi_turn    greedy decode with the search loop on the in-memory BM25 retriever
                        (ssp_jax/testing/small_retriever.py); the random model never writes
                        "</search>", so a stop string it does emit ("e", opened by " ") stands in
                        for the tags and triggers the retriever, observations are spliced
  update                one `Learner.update` (the paper config's `rl` section: sequence packing,
                        k3 KL 0.01 with the reference forward, old log-probs recomputed,
                        seq-mean-token-mean, the by_role schedule) over the
                        1-device multi-turn rollouts: 1 proposer + 2 solver optimizer steps,
                        the solver's old log-probs recomputed after the proposer's step; loss,
                        grad_norm and every other metric of each step
Tolerances: rollout token ids, loss masks and stop reasons identical; sampler log-probs within
--logprob-atol (1e-4); update metrics within rtol --rtol (2e-4) + atol --atol (1e-6), the
tolerances of tests/test_rl_multidevice.py, except ppo_kl and kl_loss (means of log-prob
differences, whose rounding error is absolute): within --logprob-atol. The learning rate is the
paper config's (1e-6, warm-up 5) unless --lr is given; after the first step Adam turns
rounding noise in near-zero gradients into moves of about lr, so a large --lr loosens the later
steps' agreement (at --lr 1e-3 the tensor-sharded layouts differ by up to 1.2e-3
relative in later steps' grad_norm on CPU: bench/RESULTS.md). Everything runs in float32 with
jax_default_matmul_precision="highest" (on GPU the default fp32 matmul is TF32, whose rounding
differs between shardings); the paper's bf16 compute is not what is checked here.

CPU (8 fake devices; the script sets XLA_FLAGS itself before importing jax):
  python bench/sharded_equal.py
One 8-GPU host (unchanged; device count from jax.devices()):
  python bench/sharded_equal.py
Exit status 0 when every comparison is equal, 1 when one differs or none could be made.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--sizes", default="1,2,8",
                 help="device counts to run, comma-separated; 1 (the reference) always runs")
  p.add_argument("--fake-cpu-devices", type=int, default=8,
                 help="fake CPU devices (XLA_FLAGS) when the flag is not set already; CPU only")
  p.add_argument("--parts", default="rollout_single_turn,rollout_multi_turn,update",
                 help="which comparisons to make")
  p.add_argument("--max-new", type=int, default=64, help="greedy tokens per rollout")
  p.add_argument("--lr", type=float, default=0.0,
                 help="learning rate of the update (0: the config's, 1e-6 with 5 warm-up steps "
                      "in the paper config; larger makes later steps more sensitive)")
  p.add_argument("--logprob-atol", type=float, default=1e-4)
  p.add_argument("--rtol", type=float, default=2e-4)
  p.add_argument("--atol", type=float, default=1e-6)
  p.add_argument("--config", default="configs/ssp_qwen2_5_7b_instruct.py:gpu",
                 help="run config whose mesh.axes and rl section are used")
  a = p.parse_args(argv)
  try:
    a.sizes = sorted({int(s) for s in a.sizes.split(",") if s.strip()} | {1})
  except ValueError:
    p.error(f"--sizes={a.sizes!r}: give device counts such as 1,2,8")
  a.parts = [s.strip() for s in a.parts.split(",") if s.strip()]
  bad = set(a.parts) - {"rollout_single_turn", "rollout_multi_turn", "update"}
  if bad or not a.parts:
    p.error(f"--parts: unknown {sorted(bad)}; use rollout_single_turn,rollout_multi_turn,update")
  return a


ARGS = parse_args() if __name__ == "__main__" else None
if ARGS is not None and "--xla_force_host_platform_device_count" not in os.environ.get(
    "XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             f" --xla_force_host_platform_device_count={ARGS.fake_cpu_devices}")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import numpy as np  # noqa: E402

import models  # noqa: E402
from models import Sharder, make_mesh  # noqa: E402
from ssp_jax.config_loader import load_config_file  # noqa: E402
from ssp_jax.rl import batch as batch_lib  # noqa: E402
from ssp_jax.rl.learner import Learner
from ssp_jax.rl.roles import RoleTable
from ssp_jax.rl.schedule import update_by_role
from ssp_jax.ssp import game as ssp_game  # noqa: E402
from ssp_jax.rollout import RolloutEngine, get_rollout_config  # noqa: E402
from ssp_jax.testing.small_retriever import SmallBM25Retriever  # noqa: E402
from ssp_jax.testing.tiny_checkpoint import make_tokenizer  # noqa: E402
from ssp_jax.tokenizer import Tokenizer  # noqa: E402

PROMPTS = ["Who wrote Moby-Dick?", "The capital of France is", "a", "Paris is",
           "Numbers 1851 2024", "<think> I need to find", "Edinburgh", "Marie Curie was"]
# Update batch: rows 0-1 proposer (one prompt each), rows 2-7 two solver groups of 3.
ROLES = [0, 0, 1, 1, 1, 1, 1, 1]
PROMPT_INDEX = [0, 1, 2, 2, 2, 3, 3, 3]


def tiny_config(vocab: int) -> models.ModelConfig:
  """Qwen2.5-7B's layout scaled down: untied lm head, qkv bias, 7 query heads per kv head and
  4 kv heads (one per tensor shard at tensor 4), every sharded dim divisible by the meshes."""
  return dataclasses.replace(models.get_preset("qwen2.5-7b"), vocab_size=vocab, hidden_size=224,
                             intermediate_size=448, num_layers=2, num_heads=28, num_kv_heads=4,
                             head_dim=8, rope_theta=1e4, max_position_embeddings=4096)


def random_params(cfg: models.ModelConfig, seed: int = 0):
  """models.init_params with a large scale (peaked logits: no near-ties for greedy decoding to
  break differently) and random qkv biases (init_params zeroes them), as numpy."""
  k1, k2 = jax.random.split(jax.random.key(seed))
  params = models.init_params(cfg, k1, std=0.3)
  for i, name in enumerate(("bq", "bk", "bv")):
    b = params["layers"][name]
    params["layers"][name] = 0.3 * jax.random.normal(jax.random.fold_in(k2, i), b.shape)
  return jax.device_get(params)


def layouts(sizes, config_axes):
  """[(devices, resolved axes, why not runnable or None)] of every size but 1 (the reference)."""
  tensor = dict(config_axes).get("tensor", 1)
  out = []
  for n in sizes:
    if n == 1:
      continue
    if n < tensor:      # the paper layout's halves, each on its own
      out += [(n, (("data", 1), ("tensor", n)), None), (n, (("data", n), ("tensor", 1)), None)]
      continue
    known = int(np.prod([v for _, v in config_axes if v != -1]))
    if n % known:
      out.append((n, tuple(config_axes), f"{n} devices do not divide into {config_axes}"))
      continue
    out.append((n, tuple((k, n // known if v == -1 else v) for k, v in config_axes), None))
  return out


def layout_name(axes):
  return " x ".join(f"{k} {v}" for k, v in axes)


def rollout(cfg, params, tok, sharder, multi_turn, max_new, data):
  rc = get_rollout_config()
  rc.update(dict(dtype="float32", cache_dtype="float32", batch_size=-(-4 // data) * data,
                 cache_min_len=128, prefill_chunk=16, steps_per_call=16, max_obs_tokens=24,
                 topk=2, max_searches=2))
  if multi_turn:
    rc.update(dict(search_open=" ", search_close="e", use_search=True))
    stop = ["e"]
  else:
    rc.update(dict(use_search=False))
    stop = None
  if sharder is not None:
    params = jax.device_put(params, sharder.tree_shardings(models.param_logical_axes(cfg)))
  eng = RolloutEngine(cfg, tok, rc, SmallBM25Retriever(), sharder)
  return eng.generate(params, PROMPTS, jax.random.key(4), temperature=0.0,
                      max_new_tokens=max_new, stop=stop).trajectories


def compare_rollouts(ref, got, atol):
  mismatch = None
  max_diff = 0.0
  for i, (a, b) in enumerate(zip(ref, got)):
    if mismatch is None and (a.response_ids != b.response_ids or a.loss_mask != b.loss_mask
                             or a.stop_reason != b.stop_reason):
      pos = next((j for j, (x, y) in enumerate(zip(a.response_ids, b.response_ids)) if x != y),
                 min(len(a.response_ids), len(b.response_ids)))
      mismatch = {"row": i, "token": pos, "stop_reasons": [a.stop_reason, b.stop_reason]}
    n = min(len(a.logprobs), len(b.logprobs))
    if n:
      max_diff = max(max_diff, float(np.max(np.abs(np.subtract(a.logprobs[:n],
                                                                b.logprobs[:n])))))
  out = {"equal": mismatch is None and max_diff <= atol,
         "tokens": sum(len(t.response_ids) for t in ref),
         "policy_tokens": sum(sum(t.loss_mask) for t in ref),
         "searches": sum(t.num_searches for t in ref),
         "max_abs_logprob_diff": max_diff}
  if mismatch is not None:
    out["first_mismatch"] = mismatch
  return out


def rl_config(config, lr: float = 0.0):
  """The paper config's rl section in float32, sized for the tiny batch: mini-batches of one
  prompt group (3 rows with the solver groups of 3), micro-batches of 2 rows (a multiple of
  data 2); `lr` > 0 replaces the config's learning rate (then without warm-up)."""
  rl = config.rl
  rl.update(dict(compute_dtype="float32", ref_dtype="float32", param_dtype="float32",
                 micro_batch_size=2, mini_batch_size=1, bucket=32, max_len=512,
                 logprob_chunk=32, attn_impl="xla"))
  if lr > 0:
    rl.update(dict(lr=lr, warmup_steps=1))
  return rl


def update(cfg, rl, params, batch, sharder):
  """One update as the config schedules it: `by_role` (the paper config's: the
  proposer's call, then the solver's with old log-probs recomputed after it; here 1 + 2
  optimizer steps) or `fused` (one call, ceil(prompts / mini_batch_size) steps). Returns
  [(label, metrics)] in step order."""
  learner = Learner(cfg, rl, sharder, params=params)
  if rl.update_schedule == "by_role":
    out = update_by_role(learner, batch, RoleTable.from_config(rl, ssp_game.ROLES),
                         ssp_game.UPDATE_ORDER)
    return [(f"{role}{i}", m) for role, ms in out.items() for i, m in enumerate(ms)]
  return [(f"fused{i}", m) for i, m in enumerate(learner.update(batch))]


# Means of log-prob differences (policy vs old / reference policy): their rounding error is
# absolute, at the scale of one log-prob's, so they are held to the log-prob tolerance.
LOGPROB_METRICS = ("ppo_kl", "kl_loss")


def compare_updates(ref, got, rtol, atol, logprob_atol=1e-4):
  """Every metric of every optimizer step (packing stats and lr excepted) within
  atol + rtol * |reference| (LOGPROB_METRICS: within logprob_atol)."""
  worst, bad = 0.0, []
  if [l for l, _ in ref] != [l for l, _ in got]:
    bad.append(f"steps {[l for l, _ in ref]} vs {[l for l, _ in got]}")
  keys = sorted(k for k in ref[0][1] if not k.startswith("pack/") and k != "lr")
  for (label, a), (_, b) in zip(ref, got):
    for k in keys:
      d = abs(a[k] - b.get(k, float("nan")))
      tol = logprob_atol if k in LOGPROB_METRICS else atol + rtol * abs(a[k])
      worst = max(worst, d / tol) if d == d else float("inf")
      if not d <= tol:
        bad.append(f"{label} {k}: {a[k]!r} vs {b.get(k)!r}")
  return {"equal": not bad,
          "steps": [l for l, _ in ref],
          "loss": {"reference": [m["loss"] for _, m in ref], "sharded": [m["loss"] for _, m in got]},
          "grad_norm": {"reference": [m["grad_norm"] for _, m in ref],
                        "sharded": [m["grad_norm"] for _, m in got]},
          "metrics_compared": keys, "worst_diff_over_tol": worst,
          **({"differ": bad[:8]} if bad else {})}


def main(a) -> int:
  jax.config.update("jax_default_matmul_precision", "highest")
  devices = jax.devices()
  platform = devices[0].platform
  config = load_config_file(os.path.join(ROOT, a.config) if not os.path.isabs(a.config)
                            else a.config)
  config_axes = tuple((str(k), int(v)) for k, v in config.mesh.axes)
  with tempfile.TemporaryDirectory() as tmp:
    hf_tok = make_tokenizer(tmp, "chatml")
    tok = Tokenizer.from_dir(tmp)
  cfg = tiny_config(-(-len(hf_tok) // 8) * 8)
  params = random_params(cfg)
  rl = rl_config(config, a.lr)
  common = {"bench": "sharded_equal", "platform": platform, "devices_present": len(devices)}
  compared, differ, skipped, runnable = 0, [], [], []
  for n, axes, why_not in layouts(a.sizes, config_axes):
    name = layout_name(axes)
    if why_not is None and n > len(devices):
      why_not = f"needs {n} devices, {len(devices)} present"
    if why_not is None:
      runnable.append((n, axes, name))
      continue
    skipped.append(name)
    print(json.dumps(dict(common, layout=name, devices=n, skipped=why_not)), flush=True)
  t0 = time.time()
  ref = {}
  for part in ("rollout_single_turn", "rollout_multi_turn") if runnable else ():
    if part in a.parts or (part == "rollout_multi_turn" and "update" in a.parts):
      ref[part] = rollout(cfg, params, tok, None, part == "rollout_multi_turn", a.max_new, 1)
  if "update" in a.parts and runnable:
    trajs = ref["rollout_multi_turn"]
    adv = np.random.default_rng(0).normal(size=len(trajs))
    batch = batch_lib.make_batch(trajs, adv, ROLES, prompt_index=PROMPT_INDEX,
                                 bucket=rl.bucket, max_len=rl.max_len)
    ref["update"] = update(cfg, rl, params, batch, None)
  if runnable:
    print(json.dumps(dict(common, part="reference", layout="data 1 x tensor 1", devices=1,
                          model=dict(vocab=cfg.vocab_size, hidden=cfg.hidden_size,
                                     layers=cfg.num_layers, heads=cfg.num_heads,
                                     kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim),
                          seconds=round(time.time() - t0, 1))), flush=True)
  for n, axes, name in runnable:
    sharder = Sharder(make_mesh(axes, devices=devices[:n]))
    data = sharder.axis_size("act_batch")
    for part in a.parts:
      t0 = time.time()
      if part == "update":
        res = compare_updates(ref[part], update(cfg, rl, params, batch, sharder), a.rtol, a.atol,
                              a.logprob_atol)
      else:
        got = rollout(cfg, params, tok, sharder, part == "rollout_multi_turn", a.max_new, data)
        res = compare_rollouts(ref[part], got, a.logprob_atol)
      compared += 1
      if not res["equal"]:
        differ.append(f"{part} on {name}")
      print(json.dumps(dict(common, part=part, layout=name, devices=n, **res,
                            seconds=round(time.time() - t0, 1))), flush=True)
  verdict = "equal" if compared and not differ else "differ" if differ else "nothing_compared"
  print(json.dumps(dict(common, verdict=verdict, compared=compared, differ=differ,
                        skipped=skipped, tolerances={
                            "rollout": "token ids, loss masks, stop reasons identical; "
                                       f"log-probs atol {a.logprob_atol}",
                            "update": f"|a-b| <= {a.atol} + {a.rtol}*|a| for every metric, "
                                      f"|a-b| <= {a.logprob_atol} for "
                                      f"{', '.join(LOGPROB_METRICS)}"},
                        lr=rl.lr,
                        dtype="float32", matmul_precision="highest")), flush=True)
  return 0 if verdict == "equal" else 1


if __name__ == "__main__":
  sys.exit(main(ARGS))
