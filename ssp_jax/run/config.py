"""The run-config skeleton every game starts from (`ssp_jax/<game>/config.py` adds the game's
sections; `configs/*.py` then override fields)."""
from __future__ import annotations

import ml_collections


def base_run_config() -> ml_collections.ConfigDict:
  """The sections every game's run config has, composed from their owners' `get_*_config()`:
  the run (workdir, steps, seed, outputs), model, mesh, retrieval, checkpoint, rollout and rl.
  A game's `base_run_config` adds its own sections to this, `eval` among them (the training loop
  reads `eval.every_steps` and `eval.at_start`; ssp_jax/ssp/config.py)."""
  from ssp_jax.rl.config import get_rl_config
  from ssp_jax.rollout.config import get_rollout_config
  c = ml_collections.ConfigDict()
  c.workdir = "runs/run"        # metrics.jsonl, tb/, samples/, checkpoints/
  c.total_steps = 200           # steps (each: the game's rollouts + updates)
  c.seed = 0                    # rollout RNG (per step: fold_in(seed, step))
  c.tensorboard = True          # TensorBoard events under workdir/tb
  c.progress = True             # tqdm progress bar on stderr
  c.distributed = False         # multi-host: call jax.distributed.initialize() first
  c.compile_cache = "auto"      # JAX's persistent compilation cache (ssp_jax/compile_cache.py):
                                # auto = $SSP_JAX_CACHE/xla/<backend, CPU flags>; "" = off;
                                # else a directory. A resumed or repeated run loads its programs

  c.model = ml_collections.ConfigDict()
  c.model.path = ""             # HF dir or .gguf; "" = embedded SmolLM2-135M-Instruct GGUF
  c.model.chat_format = "auto"  # auto (checkpoint's template) | chatml | llama3

  c.mesh = ml_collections.ConfigDict()
  c.mesh.axes = (("data", -1), ("tensor", 1))  # mesh axes and sizes (-1: remaining devices)
  c.mesh.rules = ()             # logical -> mesh rules; () = models.DEFAULT_RULES
  c.mesh.num_devices = 0        # use the first N devices (0 = all)

  c.retrieval = ml_collections.ConfigDict()
  c.retrieval.index_dir = ""    # `ssp-jax index build` output; "" = default MiniLM index
  c.retrieval.url = ""          # http://host:port of `ssp-jax retrieve` (overrides index_dir)
  c.retrieval.timeout_s = 30.0  # HTTP client timeout per call
  c.retrieval.retries = 3       # HTTP client retries
  c.retrieval.on_unreachable = "error"  # url probed at start: "error" (exit 2) | "warn" (run;
                                        # each failed search is counted in search/failed_rate)

  c.checkpoint = ml_collections.ConfigDict()
  c.checkpoint.every = 5        # save every N steps (and at the last step)
  c.checkpoint.keep = 3         # checkpoints kept
  c.checkpoint.async_save = True

  c.rollout = get_rollout_config()
  c.rl = get_rl_config()
  return c
