"""`ssp-jax eval`: the evaluation of the config's game (`config.game`, ssp_jax/run/games.py): the
solver with search on QA benchmarks for SSP and Search-R1 (the paper's Table 1,
ssp_jax/ssp/qa_eval.py), math problems with accuracy and pass@k for SvS (ssp_jax/svs/eval.py). A config with a generated world
(`config.world`, ssp_jax/world_config.py) has it built (once, cached) before the data is read.

  ssp-jax eval --config configs/tiny.py --out runs/eval_tiny        # the shipped set, offline
  ssp-jax eval --config configs/ssp_qwen2_5_7b_instruct.py --checkpoint runs/ssp/checkpoints \\
      --data nq=data/nq_test.jsonl --data bamboogle=data/bamboogle_test.jsonl --out runs/eval

Writes OUT/predictions_<dataset>.jsonl for the datasets of this run and merges their scores into
OUT/results.json and OUT/results.md, keeping other datasets' earlier scores (each marked with the
run that wrote it; ssp_jax/eval/outputs.py). An unwritable OUT is reported before the evaluation.
See docs/eval.md.
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
  parser.add_argument("--checkpoint", default=None,
                      help="policy to evaluate: HF dir, .gguf, or a training workdir / its "
                           "checkpoints dir / one checkpoints/<step> dir (default: the config's "
                           "model.path)")
  parser.add_argument("--data", action="append", default=[], metavar="NAME=FILE",
                      help="dataset to evaluate (repeatable): a FlashRAG JSONL file, "
                           "builtin:wiki_sample or tfds:BUILDER[@SPLIT] (default: "
                           "config.eval.datasets)")
  parser.add_argument("--limit", type=int, default=None,
                      help="questions per dataset, sampled with --seed (default: "
                           "config.eval.limit; 0 = all)")
  parser.add_argument("--seed", type=int, default=None,
                      help="subsampling seed (default: config.eval.seed)")
  parser.add_argument("--closed-book", action="store_true",
                      help="ask without the search tool (what the policy recalls; near 0 on "
                           "a generated world's invented facts)")
  parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
  parser.add_argument("--log_level", default="INFO", help="python logging level")


def _setup(args: argparse.Namespace):
  """(config, {name: spec}) with the command-line flags folded into config.eval; the config's
  world is not built yet (`_with_world` does it)."""
  from ssp_jax import world_config
  from ssp_jax.run import games
  from ssp_jax.eval import data
  config = config_loader.config_from_args(args)
  if "eval" not in config:
    raise config_loader.ConfigOverrideError(
        f"config {args.config} has no `eval` section; add config.eval = get_eval_config() "
        "(from ssp_jax.eval import get_eval_config)")
  with config.unlocked():
    if args.limit is not None:
      config.eval.limit = args.limit
    if args.seed is not None:
      config.eval.seed = args.seed
  games.game_of(config)              # an unknown game ends here
  world_config.validate_world(config)
  specs = data.parse_data_args(args.data) if args.data else dict(config.eval.datasets)
  return config, specs


def _with_world(config, specs: dict[str, str]) -> dict[str, str]:
  """Builds the config's world if it has one (once, cached; its index fills the config) and
  turns `world:<file>` specs into the world's files."""
  from ssp_jax import world_config
  return world_config.resolve_specs(specs, world_config.resolve_world(config))


def run(args: argparse.Namespace) -> int:
  from ssp_jax.run import games
  try:
    config, specs = _setup(args)
  except (config_loader.ConfigOverrideError, ValueError) as e:
    print(f"ssp-jax eval: {e}", file=sys.stderr)
    return 2
  logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                      format="%(asctime)s %(levelname)s %(name)s: %(message)s")
  logging.getLogger("absl").setLevel(logging.WARNING)
  game = games.game_of(config)   # its evaluation (docs/eval.md; docs/svs.md for SvS)
  from ssp_jax import compile_cache
  compile_cache.enable(config.get("compile_cache", "auto"))   # before the first compile
  try:
    specs = _with_world(config, specs)
  except (OSError, ValueError, ImportError, RuntimeError) as e:
    print(f"ssp-jax eval: {e}", file=sys.stderr)
    return 2
  return game.load("eval")(config, specs, args.checkpoint, args.out,
                           closed_book=bool(args.closed_book), config_path=args.config)
