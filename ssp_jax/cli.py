"""The `ssp-jax` command line. Thin: each verb lives in its own module, imported on use.

A verb module defines `add_arguments(parser)` and `run(args) -> int` (the exit code).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

# verb -> (module, one-line help)
VERBS = {
    "generate": ("ssp_jax.generate_cli", "sample from a checkpoint (HF directory or GGUF)"),
    "train": ("ssp_jax.train_cli", "run Search Self-Play training from a config file"),
    "eval": ("ssp_jax.eval_cli", "evaluate a policy on QA benchmarks with search"),
    "index": ("retrieval.cli_index", "build a dense (E5/MiniLM) or BM25 index over a corpus"),
    "retrieve": ("retrieval.cli_serve", "serve an index over HTTP (POST /retrieve)"),
    "export": ("ssp_jax.export_cli", "export a training checkpoint to a Hugging Face directory"),
    "plot": ("ssp_jax.plot_cli", "PNG curves of a run's metrics.jsonl (one file per key)"),
    "world": ("ssp_jax.world.cli", "build a seeded fictional world, or check questions against it"),
}


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="ssp-jax", description="Search Self-Play (and SvS) in pure JAX.")
  sub = parser.add_subparsers(dest="verb", metavar="VERB")
  for verb, (module, help_) in VERBS.items():
    p = sub.add_parser(verb, help=help_, description=help_)
    p.set_defaults(_module=module)
    try:
      mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
      if e.name and module.startswith(e.name):  # the verb is not built yet
        p.set_defaults(_missing=str(e))
        continue
      raise
    mod.add_arguments(p)
  return parser


def main(argv=None) -> int:
  from ssp_jax.quiet import quiet_libraries
  quiet_libraries()   # before any verb imports jax / faiss / transformers
  argv = sys.argv[1:] if argv is None else argv
  parser = build_parser()
  args = parser.parse_args(argv)
  if not args.verb:
    parser.print_help()
    return 0
  if getattr(args, "_missing", None):
    print(f"ssp-jax {args.verb}: not available in this build ({args._missing})", file=sys.stderr)
    return 2
  mod = importlib.import_module(args._module)
  try:
    return int(mod.run(args) or 0)
  except (FileNotFoundError, NotADirectoryError, IsADirectoryError, FileExistsError,
          PermissionError, ValueError) as e:
    # Bad input (a missing, misplaced or unwritable path, a malformed file or config): one line
    # naming the problem and exit 2. SSP_JAX_DEBUG=1 shows the traceback instead.
    if os.environ.get("SSP_JAX_DEBUG"):
      raise
    print(f"ssp-jax {args.verb}: {type(e).__name__}: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt as e:   # Ctrl-C / SIGTERM outside a training step: stop at once
    if os.environ.get("SSP_JAX_DEBUG"):
      raise
    print(f"ssp-jax {args.verb}: stopped ({e or 'interrupted'}); what was complete is kept "
          "(cached index and warm start, checkpoints): run the same command to go on",
          file=sys.stderr)
    return 130


if __name__ == "__main__":
  sys.exit(main())
