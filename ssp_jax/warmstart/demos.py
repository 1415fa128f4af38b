"""Demonstration trajectories for the format warm start, built from the corpus with the real
retriever (no model involved).

A small model (the embedded SmolLM2-135M) never writes the game's tags on its own, so no stage of
SSP ever happens. The warm start shows it the *format* of each role it plays, once, before
self-play begins; the demonstrations are deliberately plain:

* proposer: two searches whose `<information>` blocks are what the retriever really returns for
  those queries, then a fill-in-the-blank question made from the sentence of the answer's
  passage that holds the answer (the answer replaced by a blank), inside `<question>`;
* solver: one search for that statement, the real `<information>`, the answer in `<answer>`
  (kept only when the retrieved documents contain the answer, so the demonstration never answers
  from nowhere);
* RAG verifier: the materials and the question, the answer in `<answer>`.

Every proposer demonstration passes the game's own rule filters (`ssp_jax.ssp.filters`). The
trajectories are `ssp_jax.types.Trajectory` objects tokenized exactly as the rollout engine
lays out a search rollout: policy text up to `</search>`, then the observation tokens
(`ssp_jax.rollout.observations.observation_ids`, loss-masked), then the next policy segment.

This is not part of the SSP paper (its 7B policy needs no warm start); it is off in the paper
configs (`warmstart.enabled`, docs/training.md). Inspect what is built with
  python -m ssp_jax.warmstart.demos --out /tmp/demos.jsonl
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
  """An answer and a corpus passage that states it."""
  answer: str
  hops: int
  kind: str
  title: str
  sentence: str          # the passage sentence that contains the answer


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


def find_source(answer: str, passages: Sequence[dict]) -> Optional[tuple[str, str]]:
  """(title, sentence) of the first passage sentence that states `answer` (case-insensitive
  literal match, so the blank replaces exactly the answer's words), or None."""
  pat = re.compile(r"(?<!\w)" + re.escape(answer) + r"(?!\w)", re.IGNORECASE)
  for p in passages:
    title, text = pf.doc_title_text(p)
    for s in sentences(text):
      if pat.search(s) and 8 <= len(s.split()) <= 45:
        return title, s
  return None


def blank(sentence: str, answer: str) -> str:
  pat = re.compile(r"(?<!\w)" + re.escape(answer) + r"(?!\w)", re.IGNORECASE)
  return pat.sub("___", sentence, count=1)


def keywords(text: str, n: int = 10) -> str:
  """A search query: the first `n` words of `text` without the blank and punctuation."""
  words = [w.strip(".,;:!?\"'()") for w in text.replace("___", " ").split()]
  return " ".join([w for w in words if w][:n])


def make_question(src: Source) -> str:
  kind = KIND_WORDS.get(src.kind, "word or name")
  about = "" if _contains(src.title, src.answer) else f" about {src.title}"
  return (f"Which {kind} fills the blank in this statement from an encyclopedia "
          f"article{about}: \"{blank(src.sentence, src.answer)}\"?")


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


def build_demos(sources: Sequence[Source], retriever, tokenizer, *, topk: int,
                max_obs_tokens: int, filter_cfg: filters.FilterConfig,
                examples: Sequence[str] = ()) -> list[Demo]:
  """Proposer, solver and verifier demonstrations (see the module docstring) for `sources`."""
  questions = [make_question(s) for s in sources]
  q1 = [keywords(blank(s.sentence, s.answer), 12) for s in sources]
  q2 = [s.title if not _contains(s.title, s.answer) else keywords(
      blank(s.sentence, s.answer).split("___")[-1] or s.sentence, 8) for s in sources]
  r1 = _search(retriever, tokenizer, q1, topk, max_obs_tokens)
  r2 = _search(retriever, tokenizer, q2, topk, max_obs_tokens)
  rs = _search(retriever, tokenizer, [keywords(blank(s.sentence, s.answer), 14) for s in sources],
               topk, max_obs_tokens)
  out: list[Demo] = []
  for s, q, a, b, c in zip(sources, questions, r1, r2, rs):
    hit = next((d for d in a.docs + b.docs if _contains(pf.doc_title_text(d)[1], s.answer)), None)
    quote = blank(s.sentence, s.answer)
    # proposer: search, read, search again, write the question
    segs = [("text", f"<think> The answer is {s.answer}. I will search for facts that lead to "
                     f"it. </think>\n<search> {a.query} </search>"), ("obs", a),
            ("text", f"<think> I need one more fact about the topic. </think>\n"
                     f"<search> {b.query} </search>"), ("obs", b),
            ("text", f"<think> A document says: {quote} The blank is {s.answer}. </think>\n"
                     f"<question> {q} </question>")]
    msgs = prompts.proposer_messages(s.answer, s.hops, examples)
    tr = assemble(tokenizer, msgs, segs)
    if hit is not None and filters.check_proposal(tr, s.answer, filter_cfg)[1] is None:
      out.append(Demo("proposer", tr, s.answer, q))
      materials = rag.format_docs(tr.all_docs)
      vmsgs = prompts.verifier_messages(q, materials)
      out.append(Demo("verifier", assemble(tokenizer, vmsgs, [(
          "text", f"The materials give the blank: {s.answer}.\n"
                  f"<answer> {s.answer} </answer>")]), s.answer, q))
    # solver: search the statement, answer from the documents
    if any(_contains(pf.doc_title_text(d)[1], s.answer) for d in c.docs):
      segs = [("text", f"<think> I need to find this statement. </think>\n"
                       f"<search> {c.query} </search>"), ("obs", c),
              ("text", f"<think> The documents say the blank is {s.answer}. </think>\n"
                       f"<answer> {s.answer} </answer>")]
      out.append(Demo("solver", assemble(tokenizer, prompts.solver_messages(q), segs),
                      s.answer, q))
  return out


# --------------------------------------------------------------------------------------------
# Sources from an answer set
# --------------------------------------------------------------------------------------------
def load_sources(answers_path: str, corpus_path: str, *, retriever=None,
                 exclude_ids: Sequence[str] = (), default_hops: int = 2,
                 limit: int = 0, seed: int = 0) -> list[Source]:
  """Answers of an answer-set JSONL paired with a passage sentence stating them: the line's
  `source_id` passage when it has one, else the retriever's top documents for the answer.
  Passages in `exclude_ids` (held-out evaluation support) are never used."""
  from retrieval.corpus import iter_corpus, to_doc
  excluded = set(map(str, exclude_ids))
  by_id = {r["id"]: to_doc(r) for r in iter_corpus(corpus_path)}
  rows = []
  opener = gzip.open if answers_path.endswith(".gz") else open
  with opener(answers_path, "rb") as f:  # bad lines are skipped (the answer loader counts them)
    for raw in f:
      try:
        rec = json.loads(raw.decode("utf-8"))
      except ValueError:                 # JSONDecodeError and UnicodeDecodeError
        continue
      if isinstance(rec, dict):
        rows.append(rec)
  order = np.random.default_rng(seed).permutation(len(rows))
  out = []
  for i in order:
    rec = rows[i]
    gt = rec.get("ground_truth")
    answer = gt if isinstance(gt, str) else (gt or [""])[0]
    if not str(answer).strip():
      continue
    sid = str(rec.get("source_id", ""))
    if sid in excluded:
      continue
    cands = [by_id[sid]] if sid in by_id else []
    if not cands and retriever is not None:
      cands = [d for d in retriever.search([answer], 5)[0] if str(d.get("id")) not in excluded]
    found = find_source(answer, cands)
    if found is None:
      continue
    out.append(Source(answer, int(rec.get("search_turns") or default_hops),
                      str(rec.get("category", "")), *found))
    if limit and len(out) >= limit:
      break
  return out


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
  from ssp_jax.warmstart.run import demos_for_config
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
