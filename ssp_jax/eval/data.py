"""QA evaluation data: FlashRAG JSONL files, TFDS datasets, and deterministic subsampling.

Every loader returns a list of examples `{"id": str, "question": str, "golden_answers":
list[str], ...}` (extra fields of the JSONL line are kept). A data spec is one of:

- a path to a FlashRAG-layout JSONL file (`.jsonl` or `.jsonl.gz`; one object per line with
  `question` and `golden_answers`, optionally `id`);
- `builtin:wiki_sample`, the hand-written set shipped in `ssp_jax/data/eval_wiki_sample.jsonl`;
- `tfds:BUILDER[@SPLIT]` (split defaults to `validation`), e.g. `tfds:natural_questions_open`,
  `tfds:trivia_qa/rc.nocontext@validation`. Read with `tfds.data_source` (ArrayRecord, no
  TensorFlow needed); datasets prepared as TFRecord fall back to `tfds.load`, which needs
  TensorFlow (`pip install "ssp-jax[tfds]"`).

Subsampling (`subsample`) ranks examples by a SHA-256 hash of `(seed, id)` and keeps the `limit`
smallest, in file order: the same seed picks the same questions on any machine, numpy version or
file order, and a smaller limit picks a subset of a larger one.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, Optional

from retrieval.corpus import iter_jsonl

Example = dict[str, Any]

BUILTIN = {"wiki_sample": "eval_wiki_sample.jsonl"}


def builtin_path(name: str) -> str:
  """Path of a data file shipped in `ssp_jax/data/`."""
  if name not in BUILTIN:
    raise ValueError(f"unknown builtin eval set {name!r}; known: {', '.join(sorted(BUILTIN))}")
  return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                      BUILTIN[name])


def _as_example(rec: dict, where: str, fallback_id: str) -> Example:
  """Validates one record and puts it in the common layout."""
  question = rec.get("question")
  if not isinstance(question, str) or not question.strip():
    raise ValueError(f"{where}: missing or empty `question` (FlashRAG layout needs `question` "
                     "and `golden_answers`)")
  golden = rec.get("golden_answers", rec.get("answers"))
  if isinstance(golden, str):
    golden = [golden]
  if not golden or not all(isinstance(g, str) for g in golden):
    raise ValueError(f"{where}: `golden_answers` must be a non-empty list of strings, got "
                     f"{golden!r}")
  ex = dict(rec)
  ex["id"] = str(rec.get("id", fallback_id))
  ex["question"] = question.strip()
  ex["golden_answers"] = list(golden)
  return ex


def load_jsonl(path: str, name: Optional[str] = None) -> list[Example]:
  """Reads a FlashRAG-layout JSONL file. Examples without `id` get `"{name}-{line index}"`."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"eval data file {path!r} does not exist (give --data NAME=FILE "
                            "with a FlashRAG JSONL file)")
  name = name or os.path.basename(path).split(".")[0]
  out = []
  for lineno, rec in iter_jsonl(path):
    out.append(_as_example(rec, f"{path}:{lineno}", f"{name}-{lineno - 1}"))
  if not out:
    raise ValueError(f"eval data file {path!r} holds no examples")
  return out


def _text(x) -> str:
  return x.decode("utf-8") if isinstance(x, bytes) else str(x)


def tfds_record_to_example(rec: dict, fallback_id: str) -> Example:
  """Maps one TFDS record (natural_questions_open, trivia_qa or a FlashRAG-like builder)."""
  answer = rec.get("answer", rec.get("answers", rec.get("golden_answers")))
  if isinstance(answer, dict):                      # trivia_qa: {"value", "aliases", ...}
    golden = [_text(answer["value"])] + [_text(a) for a in answer.get("aliases", [])]
  elif isinstance(answer, (str, bytes)):
    golden = [_text(answer)]
  else:                                             # natural_questions_open: array of strings
    golden = [_text(a) for a in (answer if answer is not None else [])]
  golden = list(dict.fromkeys(g for g in golden if g.strip()))
  rid = rec.get("question_id", rec.get("id"))
  return _as_example({"question": _text(rec.get("question", "")), "golden_answers": golden,
                      "id": _text(rid) if rid is not None else fallback_id},
                     f"tfds record {fallback_id}", fallback_id)


def _tfds_records(builder: str, split: str, data_dir: Optional[str]):
  try:
    import tensorflow_datasets as tfds
  except ImportError:
    raise ImportError("tfds: data specs need tensorflow-datasets; install it with "
                      "`pip install \"ssp-jax[tfds]\"` or give a JSONL file instead") from None
  try:
    source = tfds.data_source(builder, split=split, data_dir=data_dir, download=False)
    return [source[i] for i in range(len(source))]
  except Exception as first:                        # noqa: BLE001 (TFRecord-prepared data)
    try:
      import tensorflow  # noqa: F401
    except ImportError:
      raise RuntimeError(
          f"tfds:{builder}@{split}: could not read it as ArrayRecord ({first}); for TFRecord "
          "data install TensorFlow (`pip install \"ssp-jax[tfds]\"`) or rebuild it with "
          "`tfds build --file_format=array_record`") from first
    ds = tfds.load(builder, split=split, data_dir=data_dir, download=False)
    return list(tfds.as_numpy(ds))


def load_tfds(spec: str, data_dir: Optional[str] = None) -> list[Example]:
  """Loads `BUILDER[@SPLIT]` from TFDS (no download: the data must be prepared in `data_dir`)."""
  builder, _, split = spec.partition("@")
  split = split or "validation"
  records = _tfds_records(builder, split, data_dir)
  base = builder.replace("/", "_")
  return [tfds_record_to_example(r, f"{base}-{split}-{i}") for i, r in enumerate(records)]


def load_dataset(spec: str, name: Optional[str] = None,
                 tfds_data_dir: Optional[str] = None) -> list[Example]:
  """Loads a data spec (see the module docstring)."""
  if spec.startswith("builtin:"):
    return load_jsonl(builtin_path(spec[len("builtin:"):]), name)
  if spec.startswith("tfds:"):
    return load_tfds(spec[len("tfds:"):], tfds_data_dir)
  return load_jsonl(spec, name)


def _rank_key(seed: int, ex_id: str) -> str:
  return hashlib.sha256(f"{seed}\0{ex_id}".encode("utf-8")).hexdigest()


def subsample(examples: list[Example], limit: Optional[int], seed: int = 0) -> list[Example]:
  """Deterministic subset of at most `limit` examples, kept in their original order.

  `limit` None or <= 0, or >= len(examples), keeps everything (Bamboogle's 125 with limit 500).
  """
  if not limit or limit <= 0 or limit >= len(examples):
    return list(examples)
  ranked = sorted(range(len(examples)),
                  key=lambda i: (_rank_key(seed, examples[i]["id"]), i))
  keep = sorted(ranked[:limit])
  return [examples[i] for i in keep]


def parse_data_args(items: list[str]) -> dict[str, str]:
  """Parses repeated `--data NAME=SPEC` into an ordered {name: spec}."""
  out: dict[str, str] = {}
  for item in items or []:
    name, sep, spec = item.partition("=")
    if not sep or not name.strip() or not spec.strip():
      raise ValueError(f"--data {item!r}: expected NAME=FILE (e.g. nq=data/nq_test.jsonl)")
    if name.strip() in out:
      raise ValueError(f"--data: dataset name {name.strip()!r} given twice")
    out[name.strip()] = spec.strip()
  return out
