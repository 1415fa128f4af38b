"""Derives the answer set of the tiny config from the shipped corpus.

  python -m ssp_jax.tools.make_answer_set [--corpus retrieval/data/wiki_sample.jsonl.gz]
      [--out ssp_jax/data/answers_wiki_sample.jsonl] [--size 400] [--seed 0]

The paper samples 50k ground-truth answers from public QA training data, covering people, dates,
places, numbers, music and sports. Here every answer is a span of the embedded Wikipedia sample, so
the proposer can always find documents about it with the shipped retriever. Categories (mixed in
fixed proportions, deterministic for a seed):
  person  titles of biography articles (a birth-death date range or "born" in the first passage)
          and names introduced by "by <Name Name>" that occur at least twice in the corpus;
  place   titles of articles about countries, states, provinces, continents and oceans,
          birthplaces ("born in X") and capitals;
  date    full dates ("April 15, 1865", "17 August 1945");
  number  numbers with 1-3 thousands separators (populations, areas).
Each line: {"ground_truth": str, "search_turns": hops, "category": str, "source_id": str}.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import sys

from retrieval.base import split_contents
from retrieval.corpus import default_corpus_path, iter_corpus

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                           "answers_wiki_sample.jsonl")
MIX = {"person": 0.35, "place": 0.25, "date": 0.2, "number": 0.2}
HOPS = (1, 2, 3, 4)
HOP_WEIGHTS = (0.15, 0.4, 0.3, 0.15)

_MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|"
           "December")
_NAME = r"[A-Z][a-z]+(?: [A-Z]\.)? [A-Z][a-z]+"
_BIO_RE = re.compile(r"^[^.]{0,160}\([^)]*(\d{4}\s*[–-]\s*\w*\s*\d{0,2},? ?\d{3,4}|born)")
_PLACE_RE = re.compile(r"\bis (?:a|an|the)(?: \w+){0,4} (?:country|state|province|continent|"
                       r"ocean|oceanic divisions|sovereign state|U\.S\. state)\b")
_ROLES = ("composer|writer|author|novelist|poet|philosopher|director|[Pp]resident|artist|painter|"
          "astronaut|physicist|mathematician|scientist|historian|general|king|emperor|singer|"
          "actor|actress|economist|psychologist|anthropologist|astronomer|chemist|biologist|"
          "inventor|explorer|engineer|politician|sociologist|playwright|architect|linguist")
_VERBS = ("written|directed|composed|founded|painted|invented|discovered|produced|designed|"
          "proposed|developed|created|illustrated|commanded|coined|introduced|edited")
_BY_RE = re.compile(rf"\b(?:(?:{_VERBS}) by (?:the )?(?:[A-Z][a-z]+ )?(?:[a-z]+ )?|"
                    rf"(?:{_ROLES}) )({_NAME})\b")
_NOT_PERSON = {"States", "War", "Court", "Sea", "Ocean", "Island", "Times", "Road", "Line",
               "Department", "Movement", "Foundation", "Farm", "Census", "Council", "Africa",
               "Legislature", "International", "Kong", "Christians", "Ordinance", "Party",
               "Republic", "Union", "Army", "Church", "University", "Society", "Institute",
               "Award", "Awards", "Academy", "Kingdom", "Empire", "Press", "Company", "Act",
               "Congress", "Ministry", "General"}
_BORN_IN_RE = re.compile(r"\bborn in (?:the city of )?([A-Z][a-z]+(?: [A-Z][a-z]+)?)")
_DATE_RE = re.compile(rf"\b(?:(?:{_MONTHS}) \d{{1,2}}, \d{{4}}|\d{{1,2}} (?:{_MONTHS}) \d{{4}})\b")
_NUMBER_RE = re.compile(r"(?<![\d,.])\d{1,3}(?:,\d{3}){1,3}(?![\d,])")
_CAPITAL_RE = re.compile(r"\b(?:capital(?: city)?(?: and largest city)? (?:is|was)|capital,|"
                         r"in the city of|capital city of \w+,) ([A-Z][a-z]+(?: [A-Z][a-z]+)?)")


def candidates(corpus: str) -> dict[str, dict[str, str]]:
  """category -> {answer: source doc id}, in corpus order."""
  out = {c: {} for c in MIX}
  first_passage_seen, by_names, counts = set(), {}, collections.Counter()
  for rec in iter_corpus(corpus):
    title, text = split_contents(rec["contents"])
    counts.update(re.findall(_NAME, text))
    if title not in first_passage_seen:
      first_passage_seen.add(title)
      if _BIO_RE.search(text) and re.fullmatch(r"[A-Z][\w.]+(?: [A-Z][\w.]+){1,3}", title) \
          and not set(title.split()) & _NOT_PERSON:
        out["person"].setdefault(title, rec["id"])
      elif _PLACE_RE.search(text[:300]) and "(" not in title and " of " not in title:
        out["place"].setdefault(title, rec["id"])
    for name in _BY_RE.findall(text):
      by_names.setdefault(name, rec["id"])
    for place in _BORN_IN_RE.findall(text) + _CAPITAL_RE.findall(text):
      out["place"].setdefault(place, rec["id"])
    for date in _DATE_RE.findall(text):
      out["date"].setdefault(date, rec["id"])
    for num in _NUMBER_RE.findall(text):
      out["number"].setdefault(num, rec["id"])
  for name, doc in by_names.items():
    if counts[name] >= 2 and not set(name.split()) & _NOT_PERSON:
      out["person"].setdefault(name, doc)
  return out


def build(corpus: str, size: int, seed: int) -> list[dict]:
  rng = random.Random(seed)
  cands = candidates(corpus)
  rows = []
  for cat, frac in MIX.items():
    items = sorted(cands[cat].items())
    rng.shuffle(items)
    for answer, doc in items[:max(1, round(size * frac))]:
      hops = rng.choices(HOPS, HOP_WEIGHTS)[0]
      rows.append({"ground_truth": answer, "search_turns": hops, "category": cat,
                   "source_id": doc})
  rng.shuffle(rows)
  return rows


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--corpus", default=default_corpus_path())
  ap.add_argument("--out", default=DEFAULT_OUT)
  ap.add_argument("--size", type=int, default=400)
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args(argv)
  rows = build(args.corpus, args.size, args.seed)
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w", encoding="utf-8") as f:
    for r in rows:
      f.write(json.dumps(r, ensure_ascii=False) + "\n")
  mix = collections.Counter(r["category"] for r in rows)
  print(f"wrote {len(rows)} answers to {args.out}: {dict(mix)}", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
