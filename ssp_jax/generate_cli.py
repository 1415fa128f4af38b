"""`ssp-jax generate`: sample from a checkpoint, one JSON object per prompt on stdout.

  ssp-jax generate --prompt "What is the capital of France?"            # embedded SmolLM2
  ssp-jax generate --checkpoint /ckpts/Qwen2.5-3B-Instruct --prompt "..." --temperature 0
  ssp-jax generate --checkpoint model.gguf --raw --prompt "Once upon a time" --stop "."

Without --raw a prompt is one user message rendered with the checkpoint's chat template.
Searches run only with --index-dir or --retriever-url (else `</search>` is an ordinary stop).
"""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
  p.add_argument("--checkpoint", default=None,
                 help="HF directory or .gguf file (default: the embedded SmolLM2-135M-Instruct)")
  p.add_argument("--prompt", action="append", required=True, help="a prompt (repeatable)")
  p.add_argument("--raw", action="store_true", help="feed prompts as plain text (no template)")
  p.add_argument("--system", default=None, help="system message (chat prompts only)")
  p.add_argument("--stop", action="append", default=None,
                 help="stop string (repeatable; default: eos / end-of-turn only)")
  p.add_argument("--max-new-tokens", type=int, default=256)
  p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
  p.add_argument("--top-p", type=float, default=1.0)
  p.add_argument("--top-k", type=int, default=0)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--dtype", default="float32", help="compute dtype (float32 | bfloat16)")
  p.add_argument("--chat-format", default="auto", help="auto (checkpoint) | chatml | llama3")
  p.add_argument("--index-dir", default=None, help="local retrieval index: enables search")
  p.add_argument("--retriever-url", default=None, help="retrieval server URL: enables search")
  p.add_argument("--max-searches", type=int, default=10)


def _retriever(args):
  if args.retriever_url:
    import retrieval
    return retrieval.HttpRetriever(args.retriever_url)
  if args.index_dir:
    import retrieval
    return retrieval.load_retriever(args.index_dir)
  return None


def run(args) -> int:
  import jax
  import jax.numpy as jnp

  import models
  from ssp_jax.rollout import RolloutEngine, get_rollout_config
  from ssp_jax.tokenizer import load_tokenizer

  dtype = jnp.dtype(args.dtype)
  cfg, params, tok_dir = models.load_checkpoint(args.checkpoint, dtype=dtype)
  tok = load_tokenizer(tok_dir, args.chat_format)
  retriever = _retriever(args)
  rc = get_rollout_config()
  rc.update(dict(dtype=args.dtype, cache_dtype=args.dtype, max_searches=args.max_searches,
                 batch_size=min(rc.batch_size, max(1, len(args.prompt))), cache_min_len=256,
                 max_response_tokens=args.max_new_tokens, steps_per_call=64))
  engine = RolloutEngine(cfg, tok, rc, retriever)
  prompts = []
  for text in args.prompt:
    if args.raw:
      prompts.append(text)
    else:
      sys_msg = [{"role": "system", "content": args.system}] if args.system else []
      prompts.append(sys_msg + [{"role": "user", "content": text}])
  trajs = engine.generate(params, prompts, jax.random.key(args.seed), stop=args.stop or (),
                          use_search=retriever is not None, temperature=args.temperature,
                          top_p=args.top_p, top_k=args.top_k, max_new_tokens=args.max_new_tokens)
  for text, tr in zip(args.prompt, trajs):
    print(json.dumps({"prompt": text, "text": tr.text, "token_ids": tr.response_ids,
                      "stop_reason": tr.stop_reason, "num_prompt_tokens": len(tr.prompt_ids),
                      "num_searches": tr.num_searches, "queries": tr.queries},
                     ensure_ascii=False))
  return 0
