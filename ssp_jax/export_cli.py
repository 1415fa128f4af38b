"""`ssp-jax export`: a training checkpoint's policy -> a Hugging Face directory.

  ssp-jax export --checkpoint runs/ssp/checkpoints --out runs/ssp/hf [--step 40] [--dtype bfloat16]
      [--tokenizer HF_DIR_OR_GGUF]

The output holds config.json, model.safetensors and the tokenizer files of the model the run
started from (read from the run's config.json), so `ssp-jax generate --checkpoint OUT` and
`transformers.AutoModelForCausalLM/AutoTokenizer.from_pretrained(OUT)` load it.
"""
from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--checkpoint", required=True, help="checkpoint root (orbax, ssp-jax train)")
  parser.add_argument("--out", required=True, help="output HF directory")
  parser.add_argument("--step", type=int, default=None, help="checkpoint step (default latest)")
  parser.add_argument("--dtype", default=None, help="cast params, e.g. bfloat16 (default: as saved)")
  parser.add_argument("--tokenizer", default=None,
                      help="HF directory or .gguf whose tokenizer to include (default: the "
                           "model.path in the run's config.json next to --checkpoint)")


def run(args: argparse.Namespace) -> int:
  from ssp_jax.checkpointing import export_checkpoint_to_hf
  try:
    step = export_checkpoint_to_hf(args.checkpoint, args.out, step=args.step, dtype=args.dtype,
                                   tokenizer=args.tokenizer)
  except (FileNotFoundError, ValueError) as e:
    print(f"ssp-jax export: {e}", file=sys.stderr)
    return 2
  print(f"exported step {step} of {args.checkpoint} to {args.out}")
  return 0
