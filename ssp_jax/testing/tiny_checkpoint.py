"""Tiny random Hugging Face checkpoints with a real byte-level BPE tokenizer, for CPU tests.

`make_tiny_checkpoint(dir)` trains a small byte-level BPE (`tokenizers`) on a few paragraphs
that use the SSP tags, wraps it with a ChatML (or LLaMA-3) chat template, builds a random
`transformers` Qwen2/LLaMA model whose vocab matches, and `save_pretrained`s both. Nothing is
downloaded. The weights use a large init scale so that logits are peaked and greedy decoding is
numerically stable across implementations.
"""
from __future__ import annotations

import os

from ssp_jax.tokenizer import CHATML_TEMPLATE, LLAMA3_TEMPLATE

CORPUS = [
    "<think> I need to find who wrote the novel. </think> <search> author of the novel </search>",
    "<information> Doc 1 (Title: Moby-Dick) Moby-Dick is an 1851 novel by Herman Melville. "
    "</information> <answer> Herman Melville </answer>",
    "The quick brown fox jumps over the lazy dog. Search engines return documents with titles.",
    "<question> Which river flows through the capital of the country where the telephone "
    "inventor was born? </question> Paris is the capital of France; the Seine flows through it.",
    "Numbers 1851 2024 3.14 and unicode café naïve 東京 — dashes, quotes \"x\" and 'y'.",
] * 4

SPECIAL = {
    "chatml": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
               "<|end_header_id|>", "<|eot_id|>"],
}


def make_tokenizer(path: str, chat_format: str = "chatml", vocab_size: int = 512):
  """Trains and saves a byte-level BPE tokenizer (tokenizer.json + tokenizer_config.json)."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  from transformers import PreTrainedTokenizerFast
  tk = Tokenizer(models.BPE())
  tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tk.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL[chat_format],
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tk.train_from_iterator(CORPUS, trainer)
  if chat_format == "chatml":
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", chat_template=CHATML_TEMPLATE)
  else:
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|begin_of_text|>",
                                   eos_token="<|eot_id|>", pad_token="<|end_of_text|>",
                                   chat_template=LLAMA3_TEMPLATE)
  fast.save_pretrained(path)
  return fast


def make_tiny_checkpoint(path: str, model_type: str = "qwen2", chat_format: str = "chatml",
                         seed: int = 0, init_std: float = 0.3, num_layers: int = 2,
                         hidden: int = 64, heads: int = 4, kv_heads: int = 2) -> str:
  """Writes tokenizer + random HF model to `path` and returns it."""
  import torch
  import transformers
  os.makedirs(path, exist_ok=True)
  tok = make_tokenizer(path, chat_format)
  V = -(-len(tok) // 8) * 8   # padded embedding rows, as real checkpoints have
  common = dict(vocab_size=V, hidden_size=hidden, intermediate_size=2 * hidden,
                num_hidden_layers=num_layers, num_attention_heads=heads,
                num_key_value_heads=kv_heads, max_position_embeddings=4096,
                initializer_range=init_std, tie_word_embeddings=True,
                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
  if model_type == "qwen2":
    cfg = transformers.Qwen2Config(rope_theta=10000.0, **common)
    cls = transformers.Qwen2ForCausalLM
  else:
    cfg = transformers.LlamaConfig(rope_theta=10000.0, bos_token_id=tok.bos_token_id, **common)
    cls = transformers.LlamaForCausalLM
  torch.manual_seed(seed)
  model = cls(cfg).eval()
  with torch.no_grad():  # random biases too, so the qkv-bias path is exercised
    for name, p in model.named_parameters():
      if name.endswith(".bias"):
        p.normal_(0.0, init_std)
  model.save_pretrained(path)
  return path


def load_params(path: str, dtype=None, sharder=None):
  """(ModelConfig, params) of a checkpoint directory, through models' loader."""
  import jax.numpy as jnp
  from models import hf_io
  return hf_io.load_hf_checkpoint(path, dtype=dtype or jnp.float32, sharder=sharder)
