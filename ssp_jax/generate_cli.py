"""`ssp-jax generate`: sample from a checkpoint, one JSON object per prompt on stdout.

  ssp-jax generate --prompt "What is the capital of France?"            # embedded SmolLM2
  ssp-jax generate --checkpoint /ckpts/Qwen2.5-3B-Instruct --prompt "..." --temperature 0
  ssp-jax generate --checkpoint model.gguf --raw --prompt "Once upon a time" --stop "."

  ssp-jax generate --checkpoint runs/tiny --prompt "..."                # a training run's latest
  ssp-jax generate --index-dir DIR --prompt "Who wrote Hamlet?"          # a search agent

--checkpoint is an HF directory, a .gguf file, or a training run (its workdir, checkpoints/ or
one checkpoints/<step> directory, resolved as `ssp-jax eval` does; the tokenizer and chat format
are those of the model the run started from, its config.json's `model`).
Without --raw a prompt is one user message rendered with the checkpoint's chat template.
Searches run only with --index-dir or --retriever-url. Then each prompt is by default the
question of the SSP solver's search-agent prompt (`ssp_jax/ssp/prompts.py`, the Search-R1
instruction: think, `<search>`, `<answer>`; `--search-prompt none` sends the prompt alone,
`--search-prompt FILE` a template of yours), the stops are `</answer>` (unless --stop gives
others) and `</search>` (always: it is what triggers the retriever), and a response that the
token limit cuts right after a search keeps that search's observation, cut to the limit
(`"last_observation": true`).
A prompt longer than --max-prompt-tokens is refused naming the limit, or with
--long-prompt truncate its user content is cut (its beginning kept, the chat template and system
message intact) and the output line says "truncated": true.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional

SOLVER = "solver"   # --search-prompt: the SSP solver's search-agent prompt


def add_arguments(p: argparse.ArgumentParser) -> None:
  p.add_argument("--checkpoint", default=None,
                 help="HF directory, .gguf file, or a training run (workdir, checkpoints/ or "
                      "checkpoints/<step>) (default: the embedded SmolLM2-135M-Instruct)")
  p.add_argument("--tokenizer", default=None,
                 help="with a training run: HF directory or .gguf of its tokenizer (default: "
                      "model.path of the run's config.json)")
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
  p.add_argument("--search-prompt", default=SOLVER, metavar="solver|none|FILE",
                 help="with a retriever: solver (default) puts each prompt as the question of "
                      "the SSP solver's search-agent prompt; none sends it alone; FILE is a "
                      "text file whose {question} is replaced by the prompt (a user message)")
  p.add_argument("--max-prompt-tokens", type=int, default=4096,
                 help="longest prompt in tokens, template included (default 4096)")
  p.add_argument("--long-prompt", choices=("error", "truncate"), default="error",
                 help="a longer prompt: refuse it (default) or cut its user content")


def search_template(spec: str) -> Optional[str]:
  """The user-message template of `--search-prompt`: None for "none", SOLVER for the solver's,
  else the text of the file (it must contain {question})."""
  if spec in ("none", SOLVER):
    return None if spec == "none" else SOLVER
  if not os.path.isfile(spec):
    raise ValueError(f"--search-prompt {spec!r} is neither solver, none nor a file")
  with open(spec, encoding="utf-8") as f:
    text = f.read()
  if "{question}" not in text:
    raise ValueError(f"--search-prompt {spec!r} has no {{question}} placeholder for the prompt")
  return text


def chat_prompt(text: str, system: Optional[str], template: Optional[str]) -> list[dict]:
  """The chat messages of one prompt: plain (template None), the solver's search-agent prompt
  (SOLVER; --system replaces its system message) or a user template with {question}."""
  from ssp_jax.ssp.prompts import solver_messages
  if template == SOLVER:
    msgs = solver_messages(text)
    if system:
      msgs[0] = {"role": "system", "content": system}
    return msgs
  content = text if template is None else template.replace("{question}", text.strip())
  return ([{"role": "system", "content": system}] if system else []) + [
      {"role": "user", "content": content}]


def stop_strings(stop: Optional[list[str]], searching: bool, search_close: str) -> tuple:
  """--stop, else `</answer>` when searching; with search, `</search>` always (it runs the
  retriever)."""
  from ssp_jax.prompts_format import ANSWER_CLOSE
  stops = list(stop) if stop else ([ANSWER_CLOSE] if searching else [])
  if searching and search_close not in stops:
    stops.append(search_close)
  return tuple(stops)


def with_last_observation(tok, traj, max_obs_tokens: int) -> tuple[str, list[int], bool]:
  """(text, token ids, kept): whether a response that the token limit cut right after a search
  shows that search's observation. The engine keeps it (spliced, cut to the budget); a
  trajectory without it (from another source) gets it appended, as it would have been
  spliced, so the user sees what was found."""
  from ssp_jax import prompts_format as pf
  from ssp_jax.rollout.observations import observation_ids
  mask = traj.loss_mask
  if traj.stop_reason == "length" and traj.num_searches and mask and mask[-1] == 0:
    return traj.text, list(traj.response_ids), True    # the engine kept it
  spliced = sum(1 for i, m in enumerate(mask) if m == 0 and (i == 0 or mask[i - 1] != 0))
  if traj.stop_reason != "length" or not traj.docs or spliced >= traj.num_searches:
    return traj.text, list(traj.response_ids), False
  docs = traj.docs[-1]
  body = pf.render_docs(docs) if docs else pf.SEARCH_FAILED.format(reason="no documents")
  ids = observation_ids(tok, body, max_obs_tokens)
  return traj.text + tok.decode(ids), list(traj.response_ids) + ids, True


def load_policy(checkpoint: Optional[str], tokenizer: Optional[str], dtype, chat_format: str):
  """(model config, params, tokenizer) of an HF dir / .gguf / the default model, or of a
  training run's checkpoint (restored in its saved dtype, cast to `dtype`)."""
  import jax

  import models
  from ssp_jax.eval.build import resolve_checkpoint
  from ssp_jax.tokenizer import load_tokenizer
  where = resolve_checkpoint(checkpoint) if checkpoint else None
  if where is None:
    if checkpoint and not os.path.exists(checkpoint) and \
        not models.registry.is_registry_spec(checkpoint):   # joined from its packages on use
      raise FileNotFoundError(f"--checkpoint {checkpoint!r} does not exist (give an HF "
                              "directory, a .gguf file, a registry: model or a training run's "
                              "workdir)")
    cfg, params, tok_dir = models.load_checkpoint(checkpoint, dtype=dtype)
    return cfg, params, load_tokenizer(tok_dir, chat_format)
  from ssp_jax import checkpointing
  ckpt_dir, step = where
  _, cfg, params = checkpointing.restore_policy(ckpt_dir, step)
  from ssp_jax.workdir import run_tokenizer_source
  source = tokenizer if tokenizer is not None else run_tokenizer_source(ckpt_dir)
  if chat_format == "auto":
    chat_format = _run_chat_format(ckpt_dir)
  params = jax.tree.map(lambda p: p.astype(dtype), params)
  return cfg, params, load_tokenizer(checkpointing.tokenizer_dir(source), chat_format)


def _run_chat_format(ckpt_dir: str) -> str:
  """`model.chat_format` of the run's config.json ("auto" when absent)."""
  path = os.path.join(os.path.dirname(os.path.abspath(ckpt_dir)), "config.json")
  try:
    with open(path, encoding="utf-8") as f:
      return (json.load(f).get("model") or {}).get("chat_format") or "auto"
  except (OSError, ValueError):
    return "auto"


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

  from ssp_jax.rollout import RolloutEngine, get_rollout_config

  if args.max_prompt_tokens < 1:
    raise ValueError(f"--max-prompt-tokens={args.max_prompt_tokens} must be >= 1")
  searching = bool(args.index_dir or args.retriever_url)
  template = search_template(args.search_prompt) if searching else None
  cfg, params, tok = load_policy(args.checkpoint, args.tokenizer, jnp.dtype(args.dtype),
                                 args.chat_format)
  retriever = _retriever(args)
  rc = get_rollout_config()
  rc.update(dict(dtype=args.dtype, cache_dtype=args.dtype, max_searches=args.max_searches,
                 batch_size=min(rc.batch_size, max(1, len(args.prompt))), cache_min_len=256,
                 max_response_tokens=args.max_new_tokens, steps_per_call=64,
                 max_prompt_tokens=args.max_prompt_tokens))
  prompts, truncated = [], []
  for i, text in enumerate(args.prompt, 1):
    prompt = text if args.raw else chat_prompt(text, args.system, template)
    prompt, cut = fit_prompt(tok, prompt, args.max_prompt_tokens, args.long_prompt,
                             f"prompt {i}")
    prompts.append(prompt)
    truncated.append(cut)
  stops = stop_strings(args.stop, retriever is not None, rc.search_close)
  engine = RolloutEngine(cfg, tok, rc, retriever)
  trajs, _ = engine.generate(params, prompts, jax.random.key(args.seed), stop=stops,
                             use_search=retriever is not None, temperature=args.temperature,
                             top_p=args.top_p, top_k=args.top_k,
                             max_new_tokens=args.max_new_tokens)
  for text, tr, cut in zip(args.prompt, trajs, truncated):
    out_text, ids, added = with_last_observation(tok, tr, int(rc.max_obs_tokens))
    print(json.dumps({"prompt": text, "text": out_text, "token_ids": ids,
                      "stop_reason": tr.stop_reason, "num_prompt_tokens": len(tr.prompt_ids),
                      "truncated": cut, "num_searches": tr.num_searches,
                      "queries": tr.queries, "last_observation": added}, ensure_ascii=False))
  return 0
