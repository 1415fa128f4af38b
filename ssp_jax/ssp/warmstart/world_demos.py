"""Warm-start demonstrations built from a world's graph (`warmstart.demos = "world"`).

The default demonstrations (`ssp_jax/ssp/warmstart/demos.py`) teach one question form, a sentence
of a retrieved passage with the answer blanked out; a proposer warm-started on them writes only
that form, its questions are easy to search, and its reward stays near zero (docs/results.md).
On a world (`ssp-jax world build`, docs/world.md) the labeled train questions have many forms
(attribute, bridge, comparison) and 1 to 3 hops, and each records the chain of facts it follows
(`path`: [subject id, relation or attribute, object id or value] steps). A demonstration here
replays that chain with the real retriever:

* proposer (given the answer and a hop budget, as in the game): a search for the answer, then
  one search for each entity of the chain from the answer's end back to the entity the question
  names (stopping as soon as the observations show every entity of the chain, and never before
  `ssp.filters.min_searches`), then the train question in `<question>`. Each demonstration passes the game's rule
  filters (`ssp_jax.ssp.filters`) and makes at most `rollout.max_searches` searches;
* RAG verifier: the proposer's documents (mixed with another demonstration's as
  `ssp.rag.noise_docs` mixes other proposals') and the question, the answer in `<answer>`;
* solver: one search for each entity of the chain from the named entity forward, then the
  answer in `<answer>`, kept only when the last observation shows the answer.

Every search after the first looks up a name the previous observation showed (a comparison's
second entity aside: the question names both), so a demonstration only uses what its
trajectory has seen.

Only the world's train split (`qa_train.jsonl`) is used, never its held-out questions. This is a
difference from the paper (its 7B policy needs no warm start), like the warm start itself.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Sequence

import numpy as np

from ssp_jax.ssp import filters, prompts, rag
from ssp_jax.ssp.warmstart.demos import Demo, _contains, _search, _visible, assemble


@dataclasses.dataclass
class WorldSource:
  """A train question of a world with the entity names along its chain."""
  answer: str
  aliases: tuple[str, ...]
  hops: int
  kind: str
  question: str
  chain: tuple[str, ...]     # names of the chain's subjects, from the named entity forward


def _names(world_dir: str) -> dict[str, str]:
  with open(os.path.join(world_dir, "world.json"), encoding="utf-8") as f:
    world = json.load(f)
  ents = world.get("entities", [])
  if isinstance(ents, dict):
    ents = [dict(v, id=k) if isinstance(v, dict) else {"id": k, "name": v} for k, v in ents.items()]
  return {str(e["id"]): str(e["name"]) for e in ents if "id" in e and "name" in e}


def load_world_sources(world_dir: str, *, limit: int = 0, seed: int = 0) -> list[WorldSource]:
  """The world's train questions in a seeded random order (the first `limit`; 0: all)."""
  names = _names(world_dir)
  rows = []
  with open(os.path.join(world_dir, "qa_train.jsonl"), encoding="utf-8") as f:
    for line in f:
      rec = json.loads(line)
      golden = [str(g) for g in rec.get("golden_answers") or [] if str(g).strip()]
      path = rec.get("path") or []
      chain = []
      for step in path:
        name = names.get(str(step[0]))
        if name is None:
          break
        if name not in chain:
          chain.append(name)
      if not golden or not chain or len(chain) != len({str(s[0]) for s in path}):
        continue
      rows.append(WorldSource(golden[0], tuple(golden), int(rec.get("hops", len(path))),
                              str(rec.get("kind", "")), str(rec["question"]), tuple(chain)))
  order = np.random.default_rng(seed).permutation(len(rows))
  out = [rows[i] for i in order]
  return out[:limit] if limit else out


def _norm(q: str) -> str:
  return " ".join(q.lower().split())


def _queries_back(s: WorldSource) -> list[str]:
  """The proposer's queries: the answer, then the chain from the answer's end back."""
  out: list[str] = []
  for q in (s.answer, *reversed(s.chain)):
    if _norm(q) not in {_norm(x) for x in out}:
      out.append(q)
  return out


def _shows(tokenizer, result, s: WorldSource) -> bool:
  return any(_contains(_visible(tokenizer, result), a) for a in s.aliases)


def _follows(tokenizer, results, s: WorldSource) -> bool:
  """True when every query after the first names something the previous observation showed,
  so that a demonstration only uses what its trajectory has seen. A comparison names its two
  entities itself (the second is the proposer's pick of a comparable entity)."""
  return s.kind == "comparison" or all(_contains(_visible(tokenizer, a), b.query) for a, b in zip(results, results[1:]))


def _enough(tokenizer, results, s: WorldSource, min_searches: int):
  """The fewest leading searches (at least `min_searches`) whose observations show every name
  of the chain, so a proposal asks only about what it has read; None if all of them do not."""
  seen = ""
  for n, r in enumerate(results, 1):
    seen += " " + _visible(tokenizer, r)
    if n >= max(1, min_searches) and all(_contains(seen, name) for name in s.chain):
      return n
  return None


def build_world_demos(sources: Sequence[WorldSource], retriever, tokenizer, *, topk: int,
                      max_obs_tokens: int, filter_cfg: filters.FilterConfig,
                      max_searches: int, examples: Sequence[str] = (), want: int = 0,
                      want_solvers: int = 0, noise_docs: int = 0,
                      seed: int = 0) -> list[Demo]:
  """Proposer, verifier and solver demonstrations (module docstring) from the first sources
  that yield them: `want` proposers (0: every source) and `want_solvers` solvers (0: as many)."""
  plans = []
  for s in sources:
    back = _queries_back(s)
    if max(filter_cfg.min_searches, 1) <= len(back) <= max_searches:
      plans.append((s, back))
  # one batched retriever call for every search of every demonstration
  flat = [(k, j, q) for k, (_, back) in enumerate(plans) for j, q in enumerate(back)]
  fwd = [(k, j, q) for k, (s, _) in enumerate(plans) for j, q in enumerate(s.chain)]
  results = _search(retriever, tokenizer, [q for *_, q in flat + fwd], topk, max_obs_tokens)
  back_r: dict[int, list] = {}
  fwd_r: dict[int, list] = {}
  for (k, _, _), r in zip(flat, results[:len(flat)]):
    back_r.setdefault(k, []).append(r)
  for (k, _, _), r in zip(fwd, results[len(flat):]):
    fwd_r.setdefault(k, []).append(r)
  want_s = want_solvers or want
  proposers, verifiers_for, solvers = [], [], []
  for k, (s, back) in enumerate(plans):
    need_prop = not want or len(proposers) < want
    need_solv = not want_s or len(solvers) < want_s
    if not (need_prop or need_solv):
      break
    n = _enough(tokenizer, back_r[k], s, filter_cfg.min_searches)
    if need_prop and n is not None and _follows(tokenizer, back_r[k][:n], s):
      rs = back_r[k][:n]
      segs = [("text", f"<think> The answer is {s.answer}. I will search for it. </think>\n"
                       f"<search> {rs[0].query} </search>"), ("obs", rs[0])]
      prev = s.answer
      for r in rs[1:]:
        segs += [("text", f"<think> {prev} is linked to {r.query}. I will search for "
                          f"{r.query}. </think>\n<search> {r.query} </search>"), ("obs", r)]
        prev = r.query
      segs += [("text", f"<think> A {s.hops}-hop question from {s.chain[0]} leads to the "
                        f"answer. </think>\n<question> {s.question} </question>")]
      tr = assemble(tokenizer, prompts.proposer_messages(s.answer, s.hops, examples), segs)
      if filters.check_proposal(tr, list(s.aliases), filter_cfg)[1] is None:
        proposers.append(Demo("proposer", tr, s.answer, s.question))
        verifiers_for.append((s, rag.format_docs(tr.all_docs)))
    rs = fwd_r[k]
    if need_solv and len(rs) <= max_searches and _follows(tokenizer, rs, s) and \
        _shows(tokenizer, rs[-1], s):
      segs = []
      for j, r in enumerate(rs):
        why = "I will search for" if j == 0 else "The documents point to"
        segs += [("text", f"<think> {why} {r.query}. </think>\n<search> {r.query} </search>"),
                 ("obs", r)]
      segs += [("text", f"<think> The documents say the answer is {s.answer}. </think>\n"
                        f"<answer> {s.answer} </answer>")]
      solvers.append(Demo("solver", assemble(tokenizer, prompts.solver_messages(s.question),
                                             segs), s.answer, s.question))
  materials = rag.mix_noise([m for _, m in verifiers_for], noise_docs,
                            np.random.default_rng(seed))
  verifiers = [Demo("verifier", assemble(tokenizer, prompts.verifier_messages(s.question, m), [
      ("text", f"<answer> {s.answer} </answer>")]), s.answer, s.question)
      for (s, _), m in zip(verifiers_for, materials)]
  return proposers + verifiers + solvers
