"""`ssp-jax train --config PATH[:ARG] [--config.field=value ...]`: training of the game the config
names (`config.game`; the table is ssp_jax/run/games.py, each game's entry its `entry.py`).

The config is validated (unknown or mistyped overrides, bad choices, missing paths) before any
model is loaded. See docs/training.md.
"""
from __future__ import annotations

import argparse
import errno
import logging
import os
import shutil
import sys

from ssp_jax import config_loader

DEFAULT_CONFIG = config_loader.repo_path("configs", "tiny.py")
MIN_FREE_BYTES = 64 << 20   # below this the first checkpoint or metrics line cannot be written
DISK_ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EDQUOT)
DISK_TEXTS = ("No space left on device", "Read-only file system", "Disk quota exceeded")


class SetupError(ValueError):
  """The workdir or the retrieval server cannot be used; the message names it and the fix."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
  config_loader.add_config_arguments(
      parser, default=DEFAULT_CONFIG if os.path.exists(DEFAULT_CONFIG) else None)
  parser.add_argument("--print_config", action="store_true",
                      help="print the resolved config (JSON) and exit")
  parser.add_argument("--log_level", default="INFO", help="python logging level")


def run(args: argparse.Namespace) -> int:
  from ssp_jax import world_config
  from ssp_jax.run import games
  from ssp_jax.run.validate import ConfigError
  try:
    config = config_loader.config_from_args(args)
    if args.print_config:
      print(config.to_json_best_effort(indent=2))   # plain JSON values, no !!python/tuple
      return 0
    game = games.game_of(config)   # each game has its own checks (ssp_jax/run/games.py)
    game.load("validate")(config)
    world_config.validate_world(config)
  except (config_loader.ConfigOverrideError, ConfigError) as e:
    print(f"ssp-jax train: {e}", file=sys.stderr)
    return 2
  logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                      format="%(asctime)s %(levelname)s %(name)s: %(message)s")
  logging.getLogger("absl").setLevel(logging.WARNING)   # orbax is chatty at INFO
  if config.distributed:
    start_distributed()
  from ssp_jax import compile_cache
  compile_cache.enable(config.get("compile_cache", "auto"))   # before the first compile
  import jax
  try:
    prepare_workdir(config, write=jax.process_index() == 0)  # other hosts share the workdir
    if "retrieval" in config and config.retrieval.url:   # games that search
      probe_retriever(config.retrieval)
    if game.probe:   # the endpoints the game calls (ssp: verifier and judge URLs)
      probe_game(game.load("probe"), config)
  except SetupError as e:
    print(f"ssp-jax train: {e}", file=sys.stderr)
    return 2
  train = game.load("train")
  try:
    return train(config)
  except Exception as e:
    err = disk_error(e)
    if err is None or os.environ.get("SSP_JAX_DEBUG"):
      raise
    print(f"ssp-jax train: cannot write to {config.workdir!r} ({err}); free space or fix "
          "its permissions, then run the same command again to resume from the last "
          "checkpoint", file=sys.stderr)
    return 2


def disk_error(e: BaseException):
  """The OS reason ("No space left on device", ...) when `e` or an exception it chains from is
  a disk fault (orbax and tensorstore re-raise them in other types), else None."""
  seen = set()
  while e is not None and id(e) not in seen:
    seen.add(id(e))
    if isinstance(e, OSError) and e.errno in DISK_ERRNOS:
      return e.strerror or os.strerror(e.errno)
    text = str(e)
    for t in DISK_TEXTS:
      if t in text:
        return t
    e = e.__cause__ or e.__context__
  return None


def prepare_workdir(config, write: bool = True) -> None:
  """Creates the workdir, checks this start against the checkpoints there and records it
  (`ssp_jax.workdir`: config.json of the first start, configs/start-N-time.json of each);
  a read-only, unwritable or (nearly) full disk, or a config the checkpoints cannot be resumed
  with (another model.path, rl.param_dtype or game), is one SetupError naming the path or the
  fields, before any model is loaded and with nothing written."""
  from ssp_jax import workdir as workdir_lib
  workdir = config.workdir
  try:
    os.makedirs(workdir, exist_ok=True)
    free = shutil.disk_usage(workdir).free
    if free < MIN_FREE_BYTES:
      raise SetupError(f"workdir {workdir!r} has {free >> 20} MiB free (needs at least "
                       f"{MIN_FREE_BYTES >> 20} MiB for metrics and checkpoints); free space or "
                       "set --config.workdir elsewhere")
    try:
      check = workdir_lib.check_start(config)   # every process: all of them refuse alike
    except workdir_lib.WorkdirMismatch as e:
      raise SetupError(str(e)) from None
    if write:
      workdir_lib.record_start(config, check)
  except OSError as e:
    reason = disk_error(e) or e.strerror or f"{type(e).__name__}: {e}"
    raise SetupError(f"workdir {workdir!r} is not writable ({reason}); set --config.workdir to "
                     "a writable directory") from None


def probe_retriever(rcfg) -> None:
  """One query to `retrieval.url` before any model is loaded. Unreachable: a SetupError, or
  with retrieval.on_unreachable="warn" a warning (the run goes on, and each failed search is
  counted in the metric search/failed_rate)."""
  import retrieval
  client = retrieval.HttpRetriever(rcfg.url, timeout=min(float(rcfg.timeout_s), 10.0),
                                   retries=0)
  try:
    client.search(["connectivity probe"], topk=1)
  except Exception as e:
    msg = (f"retrieval.url {rcfg.url!r} does not answer ({type(e).__name__}: {e}); start "
           "`ssp-jax retrieve` there, fix the URL, or set --config.retrieval.url= to use a "
           "local index")
    if rcfg.get("on_unreachable", "error") != "warn":
      raise SetupError(msg) from None
    logging.getLogger(__name__).warning("%s; continuing (retrieval.on_unreachable=warn): "
                                        "failed searches are counted in search/failed_rate",
                                        msg)


def probe_game(probe, config) -> None:
  """The game's start-up probe (`GameEntry.probe`, e.g. one tiny chat request to each endpoint
  URL an SSP run calls) before any model is loaded: unreachable, a refused key or an unknown
  model is a SetupError naming the field and the fix."""
  try:
    probe(config)
  except (RuntimeError, ValueError) as e:   # ssp_jax.ssp.remote.RemoteError is a RuntimeError
    raise SetupError(str(e)) from None


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
