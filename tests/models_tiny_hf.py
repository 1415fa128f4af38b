"""Tiny random Hugging Face checkpoints for the models tests (made with `save_pretrained`)."""
import numpy as np
import torch
import transformers

V, D, F, L, N = 97, 64, 96, 2, 4


def make_tiny_hf(path, model_type, seed=0, **extra):
  """Saves a random tiny HF model to `path` and returns it (eval mode, fp32)."""
  hf_cfg = transformers.AutoConfig.for_model(
      model_type, vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L,
      num_attention_heads=N, max_position_embeddings=128, **extra)
  torch.manual_seed(seed)
  model = transformers.AutoModelForCausalLM.from_config(hf_cfg).eval()
  with torch.no_grad():  # larger than the default 0.02 init so that differences would show
    for name, p in model.named_parameters():
      if "norm" in name:
        p.uniform_(0.5, 1.5)
      else:
        p.normal_(0.0, 0.2)
  model.save_pretrained(path)
  return model


def torch_logits(model, tokens) -> np.ndarray:
  with torch.no_grad():
    return model(torch.tensor(np.asarray(tokens), dtype=torch.long)).logits.float().numpy()
