"""`ssp-jax export`: a training checkpoint's policy -> a Hugging Face directory.

  ssp-jax export --checkpoint runs/tiny --out runs/tiny/hf [--step 40] [--dtype float32]
      [--tokenizer HF_DIR_OR_GGUF]

`--checkpoint` is resolved as `ssp-jax eval` resolves it (`ssp_jax.eval.build.resolve_checkpoint`):
a training run's workdir, its `checkpoints/` directory, or one `checkpoints/<step>` directory;
the latest step unless a step directory or `--step` names one. The output holds config.json,
model.safetensors (bfloat16 by default, as Hugging Face models ship; `--dtype float32` keeps the
saved float32 master weights), generation_config.json (the end-of-turn tokens as eos, so
`transformers`' `generate` stops where `ssp-jax generate` does) and the tokenizer files of the
model the run started from (read from the run's config.json), so `ssp-jax generate --checkpoint
OUT` and `transformers.AutoModelForCausalLM/AutoTokenizer.from_pretrained(OUT)` load it.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys

DTYPES = ("bfloat16", "float32", "float16", "saved")
NOT_A_RUN = ("is not a training run: give the workdir of `ssp-jax train` (it holds "
             "checkpoints/), its checkpoints/ directory or one checkpoints/<step> directory")


def add_arguments(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--checkpoint", required=True,
                      help="a training run: its workdir, its checkpoints/ directory or one "
                           "checkpoints/<step> directory")
  parser.add_argument("--out", required=True, help="output HF directory")
  parser.add_argument("--step", type=int, default=None, help="checkpoint step (default latest)")
  parser.add_argument("--dtype", choices=DTYPES, default="bfloat16",
                      help="dtype of the written weights (default bfloat16; float32 keeps the "
                           "float32 master weights; saved: as the checkpoint holds them)")
  parser.add_argument("--tokenizer", default=None,
                      help="HF directory or .gguf whose tokenizer to include (default: the "
                           "model.path in the run's config.json)")


def resolve_run(checkpoint: str, step) -> tuple[str, object]:
  """(checkpoints dir, step or None = latest) of a run directory; ValueError with the fix."""
  from ssp_jax.eval.build import resolve_checkpoint
  where = resolve_checkpoint(checkpoint)
  if where is None:
    reason = "does not exist" if not os.path.exists(checkpoint) else NOT_A_RUN
    raise ValueError(f"--checkpoint {checkpoint!r} {reason}")
  ckpt_dir, path_step = where
  if step is not None and path_step is not None and step != path_step:
    raise ValueError(f"--step {step} disagrees with the step directory {checkpoint!r}; give "
                     "one of them")
  return ckpt_dir, step if step is not None else path_step


def write_generation_config(out_dir: str) -> str:
  """Writes generation_config.json unless the tokenizer source brought one: bos from
  config.json, eos = the tokenizer's end-of-turn ids (chat models stop there), pad."""
  path = os.path.join(out_dir, "generation_config.json")
  if os.path.exists(path):
    return path
  with open(os.path.join(out_dir, "config.json"), encoding="utf-8") as f:
    hf = json.load(f)
  gen = {k: hf[k] for k in ("bos_token_id", "eos_token_id") if hf.get(k) is not None}
  try:
    from ssp_jax.tokenizer import Tokenizer
    tok = Tokenizer.from_dir(out_dir)
    if tok.eos_ids:
      gen["eos_token_id"] = list(tok.eos_ids) if len(tok.eos_ids) > 1 else tok.eos_ids[0]
    gen["pad_token_id"] = tok.pad_id
  except (OSError, ValueError):   # exported without a tokenizer: config.json's ids only
    pass
  with open(path, "w", encoding="utf-8") as f:
    json.dump(gen, f, indent=2)
  os.chmod(path, 0o644)
  return path


def _tokenizer_source(given, ckpt_dir: str):
  """--tokenizer, else the model the run started from (its workdir's start record), else None
  (exported without a tokenizer, with the warning saying why)."""
  from ssp_jax.workdir import run_tokenizer_source
  if given is not None:
    return given
  try:
    return run_tokenizer_source(ckpt_dir)
  except FileNotFoundError as e:
    logging.getLogger(__name__).warning("%s", e)
    return None


def run(args: argparse.Namespace) -> int:
  from ssp_jax.checkpointing import export_checkpoint_to_hf
  from ssp_jax.paths import check_out_dir
  try:
    check_out_dir(args.out, "the Hugging Face files")
    ckpt_dir, step = resolve_run(args.checkpoint, args.step)
    step = export_checkpoint_to_hf(ckpt_dir, args.out, step=step,
                                   dtype=None if args.dtype == "saved" else args.dtype,
                                   tokenizer=_tokenizer_source(args.tokenizer, ckpt_dir))
  except (FileNotFoundError, ValueError) as e:
    print(f"ssp-jax export: {e}", file=sys.stderr)
    return 2
  write_generation_config(args.out)
  print(f"exported step {step} of {ckpt_dir} to {args.out} ({args.dtype})")
  return 0
