"""Demonstration trajectories for the format warm start, built from the corpus with the real
retriever (no model involved).

A small model (the embedded SmolLM2-135M) never writes the game's tags on its own, so no stage of
SSP ever happens. The warm start shows it the *format* of each role it plays, once, before
self-play begins; the demonstrations are deliberately plain:

* proposer: a search for the answer it was given, then (when the rule filters require two
  searches, `ssp.filters.min_searches`) a second search about the article where it read the
  answer, then a fill-in-the-blank question made from a sentence of what the
  first search returned (a sentence that holds the answer, the answer replaced by a blank),
  inside `<question>`. Every step uses only what the trajectory has seen: the query is the given
  answer, the quoted sentence is in the first `<information>` block as the policy sees it
  (after the observation cap);
* RAG verifier: the materials the verifier would get (the proposer's documents, mixed with
  another demonstration's as `ssp.rag.noise_docs` mixes other proposals') and the question; the
  answer in `<answer>`;
* solver: one search for the quoted statement, the real `<information>`, the answer in
  `<answer>` (kept only when the observation shows the answer, so the demonstration never
  answers from nowhere).

Every proposer demonstration passes the game's own rule filters (`ssp_jax.ssp.filters`). The
trajectories are `ssp_jax.types.Trajectory` objects tokenized exactly as the rollout engine
lays out a search rollout: policy text up to `</search>`, then the observation tokens
(`ssp_jax.rollout.observations.observation_ids`, loss-masked), then the next policy segment.

This is not part of the SSP paper (its 7B policy needs no warm start); it is off in the paper
configs (`warmstart.enabled`, docs/training.md). Inspect what is built with
  python -m ssp_jax.ssp.warmstart.demos --out /tmp/demos.jsonl
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import re
import sys
from typing import Optional, Sequence

import numpy as np

from ssp_jax import prompts_format as pf
from ssp_jax.metrics import normalize_answer
from ssp_jax.rollout.observations import run_searches
from ssp_jax.ssp import filters, prompts, rag
from ssp_jax.types import Trajectory

KIND_WORDS = {"person": "person", "place": "place", "date": "date", "number": "number"}
_SENT_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


@dataclasses.dataclass
class Source:
  """An answer of the answer set (what the proposer is given)."""
  answer: str
  hops: int
  kind: str


@dataclasses.dataclass
class Demo:
  role: str              # "proposer" | "solver" | "verifier"
  traj: Trajectory
  answer: str
  question: str


def sentences(text: str) -> list[str]:
  return [s.strip() for s in _SENT_RE.split(text) if s.strip()]


def _contains(text: str, answer: str) -> bool:
  a = normalize_answer(answer)
  return bool(a) and f" {a} " in f" {normalize_answer(text)} "


def answer_pattern(answer: str) -> re.Pattern:
  """The answer as a case-insensitive literal with word boundaries (the blank replaces exactly
  the answer's words)."""
  return re.compile(r"(?<!\w)" + re.escape(answer) + r"(?!\w)", re.IGNORECASE)


def find_sentence(answer: str, docs: Sequence[dict], visible: str,
                  exclude_ids: Sequence[str] = ()) -> Optional[tuple[str, str]]:
  """(title, sentence) of the first sentence of `docs` that states `answer` once, has 8-45
  words and appears whole in `visible` (the observation text the policy sees), from a document
  not in `exclude_ids`; or None."""
  pat, excluded = answer_pattern(answer), set(map(str, exclude_ids))
  for d in docs:
    if str(d.get("id", "")) in excluded:
      continue
    title, text = pf.doc_title_text(d)
    for s in sentences(text):
      if len(pat.findall(s)) == 1 and 8 <= len(s.split()) <= 45 and s in visible:
        return title, s
  return None


def blank(sentence: str, answer: str) -> str:
  return answer_pattern(answer).sub("___", sentence, count=1)


def keywords(text: str, n: int = 10) -> str:
  """A search query: the first `n` words of `text` without the blank and punctuation."""
  words = [w.strip(".,;:!?\"'()") for w in text.replace("___", " ").split()]
  return " ".join([w for w in words if w][:n])


def make_question(answer: str, kind: str, title: str, sentence: str) -> str:
  kind = KIND_WORDS.get(kind, "word or name")
  about = "" if _contains(title, answer) or not title else f" about {title}"
  return (f"Which {kind} fills the blank in this statement from an encyclopedia "
          f"article{about}: \"{blank(sentence, answer)}\"?")


# --------------------------------------------------------------------------------------------
# Tokenized trajectories
# --------------------------------------------------------------------------------------------
def assemble(tokenizer, prompt_msgs, segments: Sequence[tuple[str, object]]) -> Trajectory:
  """A Trajectory from (kind, value) segments: ("text", str) are policy tokens, ("obs",
  SearchResult) are spliced observations. Queries and docs are recorded per search."""
  prompt_ids = tokenizer.prompt_ids(prompt_msgs)
  ids, mask, texts, queries, docs = [], [], [], [], []
  for kind, value in segments:
    if kind == "text":
      t = tokenizer.encode(value)
      ids += t
      mask += [1] * len(t)
      texts.append(value)
    else:
      ids += value.obs_ids
      mask += [0] * len(value.obs_ids)
      texts.append(tokenizer.decode(value.obs_ids))
      queries.append(value.query)
      docs.append(value.docs)
  last = segments[-1][1] if segments and segments[-1][0] == "text" else ""
  stop = "question" if pf.QUESTION_CLOSE in last else "answer" if pf.ANSWER_CLOSE in last else "stop"
  return Trajectory(prompt_ids=prompt_ids, response_ids=ids, loss_mask=mask,
                    logprobs=[0.0] * len(ids), text="".join(texts), queries=queries, docs=docs,
                    num_searches=len(queries), stop_reason=stop)


def _search(retriever, tokenizer, queries, topk, max_obs_tokens):
  return run_searches(retriever, tokenizer, queries, topk=topk, max_obs_tokens=max_obs_tokens,
                      timeout_s=120.0)


def _visible(tokenizer, result) -> str:
  return tokenizer.decode(result.obs_ids)


def build_demos(sources: Sequence[Source], retriever, tokenizer, *, topk: int,
                max_obs_tokens: int, filter_cfg: filters.FilterConfig,
                examples: Sequence[str] = (), exclude_ids: Sequence[str] = (),
                want: int = 0, noise_docs: int = 0, seed: int = 0,
                want_solvers: int = 0) -> list[Demo]:
  """Proposer, verifier and solver demonstrations (see the module docstring) for the first
  `want` sources (0: all) that yield a proposer demonstration, and solver demonstrations for
  the first `want_solvers` sources (0: as many as proposers; the solver's are the shortest
  demonstrations); sources whose answer search shows no usable sentence are skipped."""
  first = _search(retriever, tokenizer, [s.answer for s in sources], topk, max_obs_tokens)
  picks = []                      # (source, first result, title, sentence)
  for s, r in zip(sources, first):
    found = find_sentence(s.answer, r.docs, _visible(tokenizer, r), exclude_ids)
    if found is not None:
      picks.append((s, r, *found))
  second_q = []
  for s, r, title, sent in picks:
    q2 = title if title and not _contains(title, s.answer) else keywords(
        blank(sent, s.answer).split("___")[-1] or blank(sent, s.answer), 8)
    second_q.append(q2 if normalize_answer(q2) != normalize_answer(s.answer) else
                    keywords(blank(sent, s.answer), 8))
  second = _search(retriever, tokenizer, second_q, topk, max_obs_tokens)
  solver_r = _search(retriever, tokenizer,
                     [keywords(blank(sent, s.answer), 14) for s, _, _, sent in picks],
                     topk, max_obs_tokens)
  two = filter_cfg.min_searches >= 2   # the demonstration makes as many searches as required
  proposers, verifiers_for, solvers = [], [], []
  for (s, a, title, sent), b, c in zip(picks, second, solver_r):
    need_prop = not want or len(proposers) < want
    need_solv = len(solvers) < want_solvers if want_solvers else need_prop
    if not (need_prop or need_solv):
      break
    q = make_question(s.answer, s.kind, title, sent)
    segs = [("text", f"<think> The answer is {s.answer}. I will search for it. </think>\n"
                     f"<search> {a.query} </search>"), ("obs", a)]
    if two:
      segs += [("text", f"<think> I will search for more about {title or 'this topic'}. </think>\n"
                        f"<search> {b.query} </search>"), ("obs", b)]
    segs += [("text", f"<think> A document says: {sent} </think>\n<question> {q} </question>")]
    tr = assemble(tokenizer, prompts.proposer_messages(s.answer, s.hops, examples), segs)
    if filters.check_proposal(tr, s.answer, filter_cfg)[1] is not None:
      continue
    if need_prop:
      proposers.append(Demo("proposer", tr, s.answer, q))
      verifiers_for.append((s, q, rag.format_docs(tr.all_docs)))
    if need_solv and _contains(_visible(tokenizer, c), s.answer):
      segs = [("text", f"<think> I will search for this statement. </think>\n"
                       f"<search> {c.query} </search>"), ("obs", c),
              ("text", f"<think> The documents say the blank is {s.answer}. </think>\n"
                       f"<answer> {s.answer} </answer>")]
      solvers.append(Demo("solver", assemble(tokenizer, prompts.solver_messages(q), segs),
                          s.answer, q))
  materials = rag.mix_noise([m for _, _, m in verifiers_for], noise_docs,
                            np.random.default_rng(seed))
  verifiers = [Demo("verifier", assemble(tokenizer, prompts.verifier_messages(q, m), [
      ("text", f"<answer> {s.answer} </answer>")]), s.answer, q)
      for (s, q, _), m in zip(verifiers_for, materials)]
  return proposers + verifiers + solvers


# --------------------------------------------------------------------------------------------
# Sources from an answer set
# --------------------------------------------------------------------------------------------
def load_sources(answers_path: str, *, default_hops: int = 2, limit: int = 0,
                 seed: int = 0) -> list[Source]:
  """The answers of an answer-set JSONL in a seeded random order (the first `limit`; 0: all),
  read by the answer loader's own line parser (`ssp_jax.ssp.answers.parse_line`), so bad lines
  are skipped here as there (undecodable, no ground truth, hops outside 1..MAX_HOPS)."""
  from ssp_jax.ssp.answers import parse_line
  rows = []
  opener = gzip.open if answers_path.endswith(".gz") else open
  with opener(answers_path, "rb") as f:
    for raw in f:
      try:
        line = raw.decode("utf-8")
        item = parse_line(line, default_hops)
      except ValueError:                 # UnicodeDecodeError is a ValueError too
        continue
      gt = item.ground_truth
      answer = (gt if isinstance(gt, str) else gt[0]).strip()
      rows.append(Source(answer, item.hops, str(json.loads(line).get("category", ""))))
  out = [rows[i] for i in np.random.default_rng(seed).permutation(len(rows))]
  return out[:limit] if limit else out


def eval_support_ids(paths: Sequence[str]) -> set[str]:
  """Passage ids that support held-out evaluation questions (`supporting_ids` fields)."""
  from retrieval.corpus import iter_jsonl
  ids: set[str] = set()
  for p in paths:
    for _, rec in iter_jsonl(p):
      ids.update(str(x) for x in rec.get("supporting_ids") or [])
  return ids


def to_record(d: Demo, tokenizer) -> dict:
  t = d.traj
  return {"role": d.role, "answer": d.answer, "question": d.question,
          "prompt": tokenizer.decode(t.prompt_ids), "response": t.text, "queries": t.queries,
          "policy_tokens": int(sum(t.loss_mask)), "tokens": len(t.prompt_ids) + len(t.response_ids)}


def main(argv=None) -> int:
  """Writes the default config's demonstrations as JSONL for inspection."""
  from ssp_jax import config_loader
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  config_loader.add_config_arguments(ap, default="configs/tiny.py")
  ap.add_argument("--out", required=True)
  args = ap.parse_args(sys.argv[1:] if argv is None else argv)
  from ssp_jax.ssp.warmstart.run import demos_for_config
  config = config_loader.config_from_args(args)
  demos, tok = demos_for_config(config)
  with open(args.out, "w", encoding="utf-8") as f:
    for d in demos:
      f.write(json.dumps(to_record(d, tok), ensure_ascii=False) + "\n")
  counts = {r: sum(d.role == r for d in demos) for r in ("proposer", "solver", "verifier")}
  print(f"wrote {len(demos)} demonstrations to {args.out}: {counts}", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
