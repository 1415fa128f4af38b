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
  os.makedirs(config.workdir, exist_ok=True)
  with open(os.path.join(config.workdir, "config.json"), "w", encoding="utf-8") as f:
    f.write(config.to_json_best_effort(indent=2))
  if config.distributed:
    import jax
    jax.distributed.initialize()
    if jax.process_count() > 1:
      # The rollout engine reads per-row results on the host with jax.device_get and feeds host
      # arrays back, which needs every device to be addressable from one process. Fail before
      # loading anything rather than part-way through the first rollout.
      print(f"ssp-jax train: {jax.process_count()} processes found, but multi-host rollouts are "
            "not supported yet; run on one host (e.g. 8 GPUs, or a single-host TPU VM) with "
            "--config.distributed=false. `launch/aot_compile.py` still checks pod shardings.",
            file=sys.stderr)
      return 2
  if config.get("game", "ssp") == "svs":
    from ssp_jax.svs.trainer import train
  else:
    from ssp_jax.ssp.trainer import train
  return train(config)
