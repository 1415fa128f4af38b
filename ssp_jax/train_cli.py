"""`ssp-jax train --config PATH[:ARG] [--config.field=value ...]`: Search Self-Play training.

The config is validated (unknown or mistyped overrides, bad choices, missing paths) before any
model is loaded. See docs/training.md.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

from ssp_jax import config_loader

DEFAULT_CONFIG = config_loader.repo_path("configs", "tiny.py")


def add_arguments(parser: argparse.ArgumentParser) -> None:
  config_loader.add_config_arguments(
      parser, default=DEFAULT_CONFIG if os.path.exists(DEFAULT_CONFIG) else None)
  parser.add_argument("--print_config", action="store_true",
                      help="print the resolved config and exit")
  parser.add_argument("--log_level", default="INFO", help="python logging level")


def run(args: argparse.Namespace) -> int:
  from ssp_jax.ssp.validate import ConfigError, validate_config
  try:
    config = config_loader.config_from_args(args)
    if args.print_config:
      print(config)
      return 0
    if config.get("game", "ssp") == "svs":   # SvS (math self-play) has its own checks
      from ssp_jax.svs.validate import validate_config
    validate_config(config)
  except (config_loader.ConfigOverrideError, ConfigError) as e:
    print(f"ssp-jax train: {e}", file=sys.stderr)
    return 2
  logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                      format="%(asctime)s %(levelname)s %(name)s: %(message)s")
  logging.getLogger("absl").setLevel(logging.WARNING)   # orbax is chatty at INFO
  if config.distributed:
    start_distributed()
  import jax
  os.makedirs(config.workdir, exist_ok=True)
  if jax.process_index() == 0:   # the other processes of a multi-host run share the workdir
    with open(os.path.join(config.workdir, "config.json"), "w", encoding="utf-8") as f:
      f.write(config.to_json_best_effort(indent=2))
  if config.get("game", "ssp") == "svs":
    from ssp_jax.svs.trainer import train
  else:
    from ssp_jax.ssp.trainer import train
  return train(config)


def distributed_kwargs(environ=os.environ) -> dict:
  """`jax.distributed.initialize` arguments from JAX_NUM_PROCESSES and JAX_PROCESS_ID (JAX reads
  JAX_COORDINATOR_ADDRESS itself but not these two); empty where they are unset, so a cluster
  JAX detects (Cloud TPU, SLURM, Open MPI, Kubernetes) configures itself."""
  out = {}
  for env, key in (("JAX_NUM_PROCESSES", "num_processes"), ("JAX_PROCESS_ID", "process_id")):
    if environ.get(env, "").strip():
      try:
        out[key] = int(environ[env])
      except ValueError:
        raise ValueError(f"{env}={environ[env]!r} is not an integer") from None
  return out


def start_distributed() -> None:
  """`jax.distributed.initialize()`: after it every process sees the devices of all of them and
  runs the same training loop (SPMD; see docs/training.md, "Several hosts")."""
  import jax
  jax.distributed.initialize(**distributed_kwargs())
  logging.getLogger(__name__).info("process %d of %d, %d of %d devices local",
                                   jax.process_index(), jax.process_count(),
                                   jax.local_device_count(), jax.device_count())
