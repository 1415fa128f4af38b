"""Shared pieces of the retrieval tests: a tiny random BERT encoder directory and small corpora."""
import json
import os
import re
import shutil

import numpy as np

from retrieval.corpus import default_corpus_path, iter_corpus
from retrieval.encoders import default_encoder_path

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json",
                   "special_tokens_map.json")


def make_tiny_bert(path: str, seed: int = 0) -> str:
  """A random 2-layer BERT (hidden 32) saved with `save_pretrained`, with MiniLM's tokenizer."""
  import torch
  import transformers
  torch.manual_seed(seed)
  cfg = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                                num_attention_heads=4, intermediate_size=64,
                                max_position_embeddings=512)
  transformers.BertModel(cfg).save_pretrained(path)
  for name in TOKENIZER_FILES:
    shutil.copy(os.path.join(default_encoder_path(), name), path)
  return path


def corpus_records() -> list[dict]:
  return list(iter_corpus(default_corpus_path()))


def write_corpus(path: str, records: list[dict]) -> str:
  with open(path, "w") as f:
    for r in records:
      f.write(json.dumps(r) + "\n")
  return path


def distinctive_span(contents: str, n_sentences: int = 1) -> str:
  """The n longest sentences of a passage's text (in passage order): a query that only this
  passage answers verbatim. n=1 is "a distinctive sentence"."""
  text = contents.split("\n", 1)[1]
  sents = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]
  top = sorted(range(len(sents)), key=lambda i: -len(sents[i].split()))[:n_sentences]
  return " ".join(sents[i] for i in sorted(top))


def hit_ranks(retriever, records: list[dict], sample: list[int], k: int = 1,
              n_sentences: int = 1) -> np.ndarray:
  """Rank (0-based) of each sampled passage in the top k when queried with its distinctive
  span; k where it is missing."""
  queries = [distinctive_span(records[i]["contents"], n_sentences) for i in sample]
  results = retriever.search(queries, k)
  ids = [[d["id"] for d in res] for res in results]
  return np.array([ids_.index(records[i]["id"]) if records[i]["id"] in ids_ else k
                   for ids_, i in zip(ids, sample)])


def recall_at_k(retriever, records: list[dict], sample: list[int], k: int = 1,
                n_sentences: int = 1) -> float:
  """Fraction of sampled passages found in the top k when queried with their distinctive span."""
  return float(np.mean(hit_ranks(retriever, records, sample, k, n_sentences) < k))
