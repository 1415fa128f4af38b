"""The sampler against `transformers`: greedy token for token, stop strings cut from the model's
own output, and recorded log-probs against a fresh forward pass."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import models
from models.decoder import forward_jit
from ssp_jax.rollout import RolloutEngine, get_rollout_config
from ssp_jax.testing.tiny_checkpoint import load_params, make_tiny_checkpoint
from ssp_jax.tokenizer import Tokenizer

PROMPTS = [
    "Who wrote Moby-Dick?",
    "The capital of France is",
    "a",
    "<think> I need to find who wrote the novel. </think> <search> author of the novel",
    "Numbers 1851 2024 3.14 and unicode café",
]
CHATS = [[{"role": "user", "content": p}] for p in PROMPTS[:3]] + [
    [{"role": "system", "content": "You are helpful."},
     {"role": "user", "content": "Which river flows through Paris?"}]]


def _engine(ckpt, batch_size=4, **kw):
  cfg, params = load_params(ckpt)
  tok = Tokenizer.from_dir(ckpt)
  rc = get_rollout_config()
  rc.update(dict(dtype="float32", cache_dtype="float32", batch_size=batch_size,
                 cache_min_len=32, prefill_chunk=16, steps_per_call=12, **kw))
  return RolloutEngine(cfg, tok, rc), cfg, params, tok


def _build(tmp_path_factory, model_type, fmt):
  path = make_tiny_checkpoint(str(tmp_path_factory.mktemp(model_type)), model_type, fmt)
  eng, cfg, params, tok = _engine(path)
  import transformers
  hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
  return eng, cfg, params, tok, hf


@pytest.fixture(scope="module", params=[("qwen2", "chatml"), ("llama", "llama3")],
                ids=["qwen2-chatml", "llama-llama3"])
def families(request, tmp_path_factory):
  return _build(tmp_path_factory, *request.param)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  return _build(tmp_path_factory, "qwen2", "chatml")


def _hf_greedy(hf, tok, ids, n):
  with torch.no_grad():
    out = hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                      max_new_tokens=n, do_sample=False, eos_token_id=list(tok.eos_ids),
                      pad_token_id=tok.pad_id)
  return out[0, len(ids):].tolist()


@pytest.mark.parametrize("chat", [False, True], ids=["raw", "chat"])
def test_greedy_equals_transformers(families, chat):
  eng, cfg, params, tok, hf = families
  prompts = CHATS if chat else PROMPTS       # 5 raw prompts on 4 slots: exercises refill
  trajs, _ = eng.generate(params, prompts, jax.random.key(0), temperature=0.0, max_new_tokens=30,
                          stop=[])
  for p, tr in zip(prompts, trajs):
    ids = tok.prompt_ids(p)
    assert tr.prompt_ids == ids
    want = _hf_greedy(hf, tok, ids, 30)
    assert tr.response_ids == want
    assert tr.stop_reason == ("eos" if want[-1] in tok.eos_ids else "length")
    assert tr.loss_mask == [1] * len(want)


def _first_k(tok, ids, s):
  for k in range(1, len(ids) + 1):
    if s.encode() in tok.ids_to_bytes(ids[:k]):
      return k
  return None


def test_stop_strings_from_own_output(setup):
  eng, cfg, params, tok, hf = setup
  full, _ = eng.generate(params, PROMPTS, jax.random.key(0), temperature=0.0, max_new_tokens=40,
                         stop=[])
  rng = np.random.default_rng(0)
  checked = 0
  for p, tr in zip(PROMPTS, full):
    ids = tr.response_ids
    # a stop string starting inside a multi-byte token, spanning into the next tokens
    starts = [j for j in range(2, len(ids) - 3) if len(tok.ids_to_bytes([ids[j]])) >= 2]
    for j in rng.permutation(starts)[:3]:
      head = tok.ids_to_bytes(ids[:j])
      off = len(head) + int(rng.integers(1, len(tok.ids_to_bytes([ids[j]]))))
      raw = tok.ids_to_bytes(ids)[off:off + int(rng.integers(2, 7))]
      try:
        s = raw.decode("utf-8")
      except UnicodeDecodeError:
        continue
      k = _first_k(tok, ids, s)
      eos_k = next((i + 1 for i, t in enumerate(ids) if t in tok.eos_ids), None)
      ((tr2,), _) = eng.generate(params, [p], jax.random.key(0), temperature=0.0, max_new_tokens=40,
                                 stop=[s])
      if eos_k is not None and eos_k < k:
        assert tr2.response_ids == ids[:eos_k]
        continue
      assert tr2.response_ids == ids[:k], (s, k)
      assert tr2.stop_reason == "stop"
      text = tok.ids_to_bytes(tr2.response_ids)
      assert s.encode() in text and s.encode() not in tok.ids_to_bytes(ids[:k - 1])
      checked += 1
  assert checked >= 4


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_fresh_forward(setup, temperature):
  eng, cfg, params, tok, hf = setup
  trajs, _ = eng.generate(params, PROMPTS[:3], jax.random.key(3), temperature=temperature,
                          max_new_tokens=25, stop=[])
  for tr in trajs:
    seq = tr.prompt_ids + tr.response_ids
    padded = seq + [0] * (96 - len(seq))   # causal: the padding changes no earlier logit
    logits = forward_jit(cfg, params, jnp.asarray([padded]))[0]
    logp = jax.nn.log_softmax(logits / temperature, axis=-1)
    P = len(tr.prompt_ids)
    want = [float(logp[P - 1 + i, t]) for i, t in enumerate(tr.response_ids)]
    np.testing.assert_allclose(tr.logprobs, want, atol=2e-4, rtol=0)


def test_top_k_one_is_greedy(setup):
  eng, cfg, params, tok, hf = setup
  g, _ = eng.generate(params, PROMPTS[:2], jax.random.key(0), temperature=0.0, max_new_tokens=15,
                      stop=[])
  k1, _ = eng.generate(params, PROMPTS[:2], jax.random.key(5), temperature=1.0, top_k=1,
                       max_new_tokens=15, stop=[])
  tiny_p, _ = eng.generate(params, PROMPTS[:2], jax.random.key(6), temperature=1.0, top_p=1e-6,
                           max_new_tokens=15, stop=[])
  for a, b, c in zip(g, k1, tiny_p):
    assert a.response_ids == b.response_ids == c.response_ids


@pytest.mark.parametrize("impl", ["reduce", "einsum", "einsum_readonly", "xla", "pallas"])
def test_decode_step_equals_chunk_forward(impl):
  """The while_loop's decode step == models.forward_with_cache at T = 1 (logits and cache)."""
  from ssp_jax.sampling import decode_forward, decode_params
  cfg = models.ModelConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2,
                           num_heads=4, num_kv_heads=2, head_dim=16)
  p = models.init_params(cfg, jax.random.key(0), std=0.2)
  cache = models.init_cache(cfg, 3, 32, jnp.float32)
  toks = jax.random.randint(jax.random.key(1), (3, 12), 0, 256)
  start = jnp.asarray([0, 0, 0], jnp.int32)
  _, cache = models.forward_with_cache(cfg, p, toks[:, :9], start, cache)
  pos = jnp.asarray([9, 4, 0], jnp.int32)   # rows at different positions (slots past are stale)
  want, want_cache = models.forward_with_cache(cfg, p, toks[jnp.arange(3), pos][:, None], pos,
                                               cache)
  layers = {k: list(cache[k]) for k in ("k", "v")}   # the engine's per-layer buffers
  got, got_cache = decode_forward(cfg, decode_params(cfg, p, jnp.float32),
                                  toks[jnp.arange(3), pos], pos, layers, attn_impl=impl)
  np.testing.assert_allclose(got, want[:, 0], atol=1e-5)
  for k in ("k", "v"):
    np.testing.assert_allclose(jnp.stack(got_cache[k]), want_cache[k], atol=1e-5)


@pytest.mark.parametrize("variant", [dict(qkv_bias=True), dict(qkv_bias=False, qk_norm=True)])
def test_decode_step_fused_projections_equal_separate(variant):
  """`decode_params(fuse=True)` (one q/k/v GEMM, one gate/up GEMM a layer) computes the same
  logits and cache as the separate weights, with Qwen2's q/k/v biases and Qwen3's q/k norms."""
  from ssp_jax.sampling import decode_forward, decode_params
  cfg = models.ModelConfig(vocab_size=256, hidden_size=64, intermediate_size=96, num_layers=2,
                           num_heads=4, num_kv_heads=2, head_dim=16, **variant)
  p = models.init_params(cfg, jax.random.key(0), std=0.2)
  if cfg.qkv_bias:   # non-zero biases, so a bias in the wrong column block changes the result
    for i, name in enumerate(("bq", "bk", "bv")):
      p["layers"][name] = jax.random.normal(jax.random.key(10 + i), p["layers"][name].shape)
  cache = models.init_cache(cfg, 3, 32, jnp.float32)
  toks = jax.random.randint(jax.random.key(1), (3, 12), 0, 256)
  _, cache = models.forward_with_cache(cfg, p, toks[:, :9], jnp.zeros((3,), jnp.int32), cache)
  pos = jnp.asarray([9, 4, 0], jnp.int32)
  layers = {k: list(cache[k]) for k in ("k", "v")}
  fused = decode_params(cfg, p, jnp.float32, fuse=True)
  assert "w_qkv" in fused["layers"][0] and "wq" not in fused["layers"][0]
  want, want_cache = decode_forward(cfg, decode_params(cfg, p, jnp.float32),
                                    toks[jnp.arange(3), pos], pos, layers)
  got, got_cache = decode_forward(cfg, fused, toks[jnp.arange(3), pos], pos, layers)
  np.testing.assert_allclose(got, want, atol=1e-5)
  for k in ("k", "v"):
    np.testing.assert_allclose(jnp.stack(got_cache[k]), jnp.stack(want_cache[k]), atol=1e-5)
