"""Shared pieces of the retrieval tests: a tiny random BERT encoder directory and small corpora."""
import json
import os
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


def distinctive_sentence(contents: str) -> str:
  """The longest sentence of a passage's text (ties: the first), used as its query."""
  text = contents.split("\n", 1)[1]
  sents = [s.strip() for s in text.replace("? ", ". ").replace("! ", ". ").split(". ") if s.strip()]
  return max(sents, key=lambda s: len(s.split()))


def recall_at_1(retriever, records: list[dict], sample: list[int]) -> float:
  queries = [distinctive_sentence(records[i]["contents"]) for i in sample]
  results = retriever.search(queries, 1)
  hits = [res[0]["id"] == records[i]["id"] for res, i in zip(results, sample)]
  return float(np.mean(hits))
