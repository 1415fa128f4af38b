"""One JAX process of tests/test_multiprocess.py: a rollout and a learner update on a mesh of 8
CPU devices, whether those devices belong to this process alone or to several processes.

  python tests/multiprocess_worker.py rollout --ckpt DIR [--num-processes 2 --process-id I --port P]
  python tests/multiprocess_worker.py learner [--num-processes 2 --process-id I --port P]

The caller sets XLA_FLAGS (devices per process) and JAX_PLATFORMS=cpu. Prints one line
`RESULT <json>` on stdout: this process's trajectories (rollout), or the learner's log-probs,
metrics and updated params gathered from all processes (learner).
"""
import argparse
import json
import os
import sys

RESULT = "RESULT "
MESH = (("data", 4), ("tensor", 2))
PROMPTS = ["Who wrote Moby-Dick?", "The capital of France is", "a", "Paris is",
           "Numbers 1851 2024", "<think> I need to find", "Edinburgh", "Marie Curie was"]


def init(args) -> None:
  import jax
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if args.num_processes > 1:
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{args.port}",
                               num_processes=args.num_processes, process_id=args.process_id)
  assert jax.device_count() == 8, jax.devices()


def sharder():
  from models import Sharder, make_mesh
  return Sharder(make_mesh(MESH))


def rollout(ckpt: str) -> dict:
  """Sampled trajectories (T = 1) with searches through the real engine; a random model never
  writes `<search>`, so frequent one-character tags stand in for the search tags."""
  import jax
  from ssp_jax.rollout import RolloutEngine, get_rollout_config
  from ssp_jax.testing.small_retriever import SmallBM25Retriever
  from ssp_jax.testing.tiny_checkpoint import load_params
  from ssp_jax.tokenizer import Tokenizer
  sh = sharder()
  cfg, params = load_params(ckpt, sharder=sh)
  retriever = SmallBM25Retriever()
  runs = []
  for temperature, close in [(1.0, "a")]:
    rc = get_rollout_config()
    rc.update(dict(dtype="float32", cache_dtype="float32", batch_size=4, cache_min_len=32,
                   prefill_chunk=16, steps_per_call=12, max_obs_tokens=40, topk=2,
                   search_open=" ", search_close=close, max_searches=2))
    eng = RolloutEngine(cfg, Tokenizer.from_dir(ckpt), rc, retriever, sh)
    trajs, _ = eng.generate(params, PROMPTS, jax.random.key(4), temperature=temperature,
                            max_new_tokens=60, stop=[close])
    runs.append([dict(response_ids=t.response_ids, loss_mask=t.loss_mask, logprobs=t.logprobs,
                      stop_reason=t.stop_reason, queries=t.queries,
                      titles=[[d["title"] for d in docs] for docs in t.docs]) for t in trajs])
  return {"runs": runs, "retriever_calls": len(retriever.calls), "broadcast": broadcasts()}


def broadcasts() -> dict:
  """`multihost.broadcast_from_first` of a value that differs per process, and of an error."""
  import jax
  import numpy as np
  from ssp_jax.rollout import multihost
  value = multihost.broadcast_from_first(
      lambda: {"process": jax.process_index(), "score": np.float32(0.5), "text": "é" * 3000})
  try:
    multihost.broadcast_from_first(lambda: 1 / 0)
    error = ""
  except Exception as e:  # noqa: BLE001
    error = f"{type(e).__name__}: {e}"
  return {"value": value, "error": error}


def learner(_ckpt: str) -> dict:
  """Log-probs, then one update (old log-probs recomputed) of the rl tests' tiny model."""
  import jax
  from jax.experimental import multihost_utils
  from ssp_jax.rl.learner import Learner
  from rl_helpers import CFG, make_batch, rl_cfg
  lrn = Learner(CFG, rl_cfg(micro_batch_size=4, recompute_old_logp=True), sharder())
  batch = make_batch(8)
  logprobs = lrn.logprobs(batch)
  metrics = lrn.update(batch)
  params = multihost_utils.process_allgather(lrn.state["params"], tiled=True)
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  return {"logprobs": logprobs.tolist(), "metrics": metrics,
          "params": {jax.tree_util.keystr(p): v.tolist() for p, v in flat}}


def main() -> None:
  p = argparse.ArgumentParser()
  p.add_argument("task", choices=("rollout", "learner"))
  p.add_argument("--ckpt", default="", help="tiny HF checkpoint (rollout)")
  p.add_argument("--num-processes", type=int, default=1)
  p.add_argument("--process-id", type=int, default=0)
  p.add_argument("--port", type=int, default=0)
  args = p.parse_args()
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # rl_helpers
  init(args)
  import jax
  task = {"rollout": rollout, "learner": learner}[args.task]
  out = {"process": jax.process_index(), "processes": jax.process_count(), **task(args.ckpt)}
  print(RESULT + json.dumps(out), flush=True)


if __name__ == "__main__":
  main()
