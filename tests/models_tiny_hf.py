"""Tiny random Hugging Face checkpoints for the models tests (made with `save_pretrained`)."""
import gguf
import numpy as np
import torch
import transformers

from models.gguf_io import HF_TO_GGUF

V, D, F, L, N = 97, 64, 96, 2, 4


def make_tiny_hf(path, model_type, seed=0, **extra):
  """Saves a random tiny HF model to `path` and returns it (eval mode, fp32)."""
  shape = dict(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L,
               num_attention_heads=N, max_position_embeddings=128)
  hf_cfg = transformers.AutoConfig.for_model(model_type, **{**shape, **extra})
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


def llama_cpp_permute(w, n_head):
  """llama.cpp convert_hf_to_gguf.py `LlamaModel.permute` (HF rotate-half -> GGML pairs)."""
  return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(
      w.shape)


def write_tiny_gguf(path, model, arch, extra_tensors=None):
  """Writes `model` as an F32 GGUF the way llama.cpp's converter lays it out."""
  hf = model.config
  w = gguf.GGUFWriter(path, arch)
  w.add_block_count(hf.num_hidden_layers)
  w.add_context_length(hf.max_position_embeddings)
  w.add_embedding_length(hf.hidden_size)
  w.add_feed_forward_length(hf.intermediate_size)
  w.add_head_count(hf.num_attention_heads)
  w.add_head_count_kv(hf.num_key_value_heads)
  w.add_rope_freq_base(float(hf.rope_parameters["rope_theta"]))
  w.add_layer_norm_rms_eps(hf.rms_norm_eps)
  w.add_vocab_size(hf.vocab_size)
  if arch == "llama" and hf.rope_parameters.get("rope_type") == "llama3":
    # What llama.cpp writes for LLaMA-3.1: the per-frequency divisor of the inverse frequencies.
    H = hf.hidden_size // hf.num_attention_heads
    base = 1.0 / hf.rope_parameters["rope_theta"] ** (np.arange(0, H, 2) / H)
    w.add_rope_scaling_orig_ctx_len(hf.rope_parameters["original_max_position_embeddings"])
    w.add_tensor("rope_freqs.weight", (base / model.model.rotary_emb.inv_freq.numpy()).astype(
        np.float32))
  to_gguf = {h.format(i=i): g.format(i=i) for h, g in HF_TO_GGUF.items()
             for i in range(hf.num_hidden_layers)}
  for name, t in model.state_dict().items():
    if name == "lm_head.weight" and hf.tie_word_embeddings:
      continue
    arr = t.numpy().astype(np.float32)
    if arch == "llama" and "q_proj.weight" in name:
      arr = llama_cpp_permute(arr, hf.num_attention_heads)
    elif arch == "llama" and "k_proj.weight" in name:
      arr = llama_cpp_permute(arr, hf.num_key_value_heads)
    w.add_tensor(to_gguf[name], arr)
  for name, arr in (extra_tensors or {}).items():
    w.add_tensor(name, arr)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
