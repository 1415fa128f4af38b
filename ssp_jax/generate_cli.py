"""`ssp-jax generate`: sample from a checkpoint, one JSON object per prompt on stdout.

  ssp-jax generate --prompt "What is the capital of France?"            # embedded SmolLM2
  ssp-jax generate --checkpoint /ckpts/Qwen2.5-3B-Instruct --prompt "..." --temperature 0
  ssp-jax generate --checkpoint model.gguf --raw --prompt "Once upon a time" --stop "."

Without --raw a prompt is one user message rendered with the checkpoint's chat template.
Searches run only with --index-dir or --retriever-url; then `</search>` always stays a stop
(it is what triggers the retriever), next to any --stop strings.
A prompt longer than --max-prompt-tokens is refused naming the limit, or with
--long-prompt truncate its user content is cut (its beginning kept, the chat template and system
message intact) and the output line says "truncated": true.
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
  p.add_argument("--max-prompt-tokens", type=int, default=4096,
                 help="longest prompt in tokens, template included (default 4096)")
  p.add_argument("--long-prompt", choices=("error", "truncate"), default="error",
                 help="a longer prompt: refuse it (default) or cut its user content")


def _retriever(args):
  if args.retriever_url:
    import retrieval
    return retrieval.HttpRetriever(args.retriever_url)
  if args.index_dir:
    import retrieval
    return retrieval.load_retriever(args.index_dir)
  return None


def fit_prompt(tok, prompt, cap: int, mode: str, what: str):
  """(prompt, truncated): `prompt` when it has <= cap tokens; else a ValueError naming the
  limit (mode "error"), or (mode "truncate") the prompt with the tail of its last user
  message cut so that the rendered prompt - template and system message kept - fits."""
  n = len(tok.prompt_ids(prompt))
  if n <= cap:
    return prompt, False
  if mode != "truncate":
    raise ValueError(f"{what} has {n} tokens, over the limit --max-prompt-tokens={cap}; "
                     "shorten it, raise the limit or pass --long-prompt truncate")
  if isinstance(prompt, str):
    ids = tok.encode(prompt)
    keep = len(ids) - (n - cap)
    make = lambda k: tok.decode(ids[:k])
  else:
    content = prompt[-1]["content"]
    ids = tok.encode(content)
    overhead = len(tok.prompt_ids(prompt[:-1] + [{"role": "user", "content": ""}]))
    keep = cap - overhead
    if keep < 1:
      raise ValueError(f"{what}: the chat template and system message alone take {overhead} "
                       f"tokens of --max-prompt-tokens={cap}; raise the limit")
    make = lambda k: prompt[:-1] + [{"role": "user", "content": tok.decode(ids[:k])}]
  keep = min(keep, len(ids))
  while keep > 0:   # re-tokenising the cut text can merge differently: shrink until it fits
    cut = make(keep)
    over = len(tok.prompt_ids(cut)) - cap
    if over <= 0:
      return cut, True
    keep -= max(1, over)
  raise ValueError(f"{what} cannot be cut to --max-prompt-tokens={cap}; raise the limit")


def run(args) -> int:
  import jax
  import jax.numpy as jnp

  import models
  from ssp_jax.rollout import RolloutEngine, get_rollout_config
  from ssp_jax.tokenizer import load_tokenizer

  if args.max_prompt_tokens < 1:
    raise ValueError(f"--max-prompt-tokens={args.max_prompt_tokens} must be >= 1")
  dtype = jnp.dtype(args.dtype)
  cfg, params, tok_dir = models.load_checkpoint(args.checkpoint, dtype=dtype)
  tok = load_tokenizer(tok_dir, args.chat_format)
  retriever = _retriever(args)
  rc = get_rollout_config()
  rc.update(dict(dtype=args.dtype, cache_dtype=args.dtype, max_searches=args.max_searches,
                 batch_size=min(rc.batch_size, max(1, len(args.prompt))), cache_min_len=256,
                 max_response_tokens=args.max_new_tokens, steps_per_call=64,
                 max_prompt_tokens=args.max_prompt_tokens))
  prompts, truncated = [], []
  for i, text in enumerate(args.prompt, 1):
    if args.raw:
      prompt = text
    else:
      sys_msg = [{"role": "system", "content": args.system}] if args.system else []
      prompt = sys_msg + [{"role": "user", "content": text}]
    prompt, cut = fit_prompt(tok, prompt, args.max_prompt_tokens, args.long_prompt,
                             f"prompt {i}")
    prompts.append(prompt)
    truncated.append(cut)
  stops = list(args.stop or [])
  if retriever is not None and rc.search_close not in stops:
    stops.append(rc.search_close)    # the stop that runs a search must survive --stop
  engine = RolloutEngine(cfg, tok, rc, retriever)
  trajs = engine.generate(params, prompts, jax.random.key(args.seed), stop=tuple(stops),
                          use_search=retriever is not None, temperature=args.temperature,
                          top_p=args.top_p, top_k=args.top_k, max_new_tokens=args.max_new_tokens)
  for text, tr, cut in zip(args.prompt, trajs, truncated):
    print(json.dumps({"prompt": text, "text": tr.text, "token_ids": tr.response_ids,
                      "stop_reason": tr.stop_reason, "num_prompt_tokens": len(tr.prompt_ids),
                      "truncated": cut, "num_searches": tr.num_searches,
                      "queries": tr.queries}, ensure_ascii=False))
  return 0
