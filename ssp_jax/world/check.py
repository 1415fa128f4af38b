"""Ground truth for a proposed (question, answer) pair in a world.

  checker = WorldChecker(world_dir)           # indexes built once (~1 s at the default size)
  checker.check(question, answer, documents=None) -> {
      "grounded": bool,     every entity the question names exists AND the answer is reachable
                            from them in the graph within `max_hops`
      "hops": int | None,   the shortest such chain (0: the answer is itself named)
      "leak": bool,         the answer, or any name the world gives the answer entity, appears
                            in the question (EM normalisation, the rule filter's own check)
      "copy8": bool,        the question repeats >= 8 consecutive words of a corpus passage (or
                            of one of `documents`), compared after EM normalisation
      "entities": [str],    the names found (longest match, case-insensitive, on word
                            boundaries, aliases included)
      "unknown": [str],     name-like spans that are no entity of the world
      "reason": str | None} why not grounded: unknown_entity | no_entity | unknown_answer |
                            unreachable

Reachability walks relations in both directions ("Which film did X direct?" goes from X to the
film against the directed_by edge); an attribute value is one hop beyond the entity holding it.
A name-like span is a run of >= 2 capitalised words outside every match and outside the common
question words, or one capitalised word that no passage of the corpus contains.
"""
from __future__ import annotations

import json
import os
import re
import unicodedata
from typing import Optional, Sequence, Union

from ssp_jax.metrics import aliases as answer_aliases
from ssp_jax.metrics import contains_answer, normalize_answer
from ssp_jax.world.build import CORPUS, WORLD
from ssp_jax.world.names import name_key
from ssp_jax.world.schema import answer_forms

NGRAM = 8
MAX_HOPS = 4
_WORD_RE = re.compile(r"[^\W_]+")
_BREAK_RE = re.compile(r"[.?!:;\n]")
STOP = frozenset("""a an the and or but of in on at to for from by with as is are was were be been
did does do has have had which what who whom whose when where why how whether name give list this
that these those it its their there than then both either neither each all any one two after
before during since until between among into onto about over under per yes no not""".split())

Answer = Union[str, Sequence[str]]


def _tokens(text: str) -> list[re.Match]:
  return list(_WORD_RE.finditer(unicodedata.normalize("NFKC", text)))


def _ngrams(text: str) -> list[int]:
  """Hashes of the normalised text's 8-word windows (in-process only: `hash` is salted per
  process, which is fine for a set that lives and dies with the checker)."""
  words = normalize_answer(text).split()
  return [hash(" ".join(words[i:i + NGRAM])) for i in range(len(words) - NGRAM + 1)]


class WorldChecker:
  def __init__(self, world_dir: str, max_hops: int = MAX_HOPS):
    path = os.path.join(os.path.expanduser(world_dir), WORLD)
    if not os.path.isfile(path):
      raise FileNotFoundError(f"{path} does not exist: not a world directory (make one with "
                              "`ssp-jax world build --seed 0 --out DIR`)")
    with open(path, encoding="utf-8") as f:
      world = json.load(f)
    self.max_hops = int(max_hops)
    ents = world["entities"]
    self.names = [e["name"] for e in ents]
    self.all_names = [[e["name"], *e["aliases"]] for e in ents]
    index = {e["id"]: i for i, e in enumerate(ents)}
    self.mentions: dict[tuple, int] = {}       # lower-cased token tuple -> entity
    self.by_answer: dict[str, list[int]] = {}  # name_key of a name or alias -> entities
    self.holders: dict[str, list[int]] = {}    # name_key of a value form -> entities holding it
    for i, e in enumerate(ents):
      for n in [e["name"], *e["aliases"]]:
        toks = tuple(m.group().lower() for m in _tokens(n))
        self.mentions.setdefault(toks, i)
        if toks[:1] == ("the",) and len(toks) > 1:
          self.mentions.setdefault(toks[1:], i)
        self.by_answer.setdefault(name_key(n), []).append(i)
      for a, v in e["attributes"].items():
        for form in answer_forms(a, v):
          self.holders.setdefault(name_key(form), []).append(i)
    self.max_len = max(len(k) for k in self.mentions)
    self.adj: list[list[int]] = [[] for _ in ents]
    for r in world["relations"]:
      s, o = index[r["subject"]], index[r["object"]]
      self.adj[s].append(o)
      self.adj[o].append(s)
    self.vocab: set[str] = set()
    self.grams: set[int] = set()
    corpus = os.path.join(os.path.dirname(path), CORPUS)
    if os.path.isfile(corpus):
      with open(corpus, encoding="utf-8") as f:
        for line in f:
          text = json.loads(line)["contents"]
          self.vocab.update(m.group().lower() for m in _tokens(text))
          self.grams.update(_ngrams(text))

  # -- parts ----------------------------------------------------------------------------------
  def find_entities(self, question: str) -> tuple[list[int], list[str]]:
    """(entities named, name-like spans that match no entity)."""
    text = unicodedata.normalize("NFKC", question)
    toks = list(_WORD_RE.finditer(text))
    low = [m.group().lower() for m in toks]
    found, covered = [], [False] * len(toks)
    i = 0
    while i < len(toks):
      for n in range(min(self.max_len, len(toks) - i), 0, -1):
        e = self.mentions.get(tuple(low[i:i + n]))
        if e is not None:
          if e not in found:
            found.append(e)
          covered[i:i + n] = [True] * n
          i += n
          break
      else:
        i += 1
    unknown, run = [], []
    for k, m in enumerate(toks + [None]):
      name_like = (m is not None and not covered[k] and m.group()[:1].isupper()
                   and low[k] not in STOP)
      joined = run and m is not None and not _BREAK_RE.search(text[toks[k - 1].end():m.start()])
      if name_like and (not run or joined):
        run.append(m)
        continue
      if len(run) >= 2 or (len(run) == 1 and run[0].group().lower() not in self.vocab):
        unknown.append(" ".join(t.group() for t in run))
      run = [m] if name_like else []
    return found, unknown

  def targets(self, answer: Answer) -> tuple[set[int], set[int]]:
    """(entities that are the answer, entities holding an attribute value that is)."""
    ents, holders = set(), set()
    try:
      given = answer_aliases(answer)
    except ValueError:                # no non-empty alias: nothing can be the answer
      given = []
    for a in given:
      k = name_key(a)
      ents.update(self.by_answer.get(k, ()))
      holders.update(self.holders.get(k, ()))
    return ents, holders

  def shortest(self, start: list[int], ents: set[int], holders: set[int]) -> Optional[int]:
    """Breadth-first: hops from the named entities to the answer, None beyond max_hops."""
    seen, level, depth = set(start), list(start), 0
    while level and depth <= self.max_hops:
      if any(i in ents for i in level):
        return depth
      if depth + 1 <= self.max_hops and any(i in holders for i in level):
        return depth + 1
      nxt = []
      for i in level:
        for j in self.adj[i]:
          if j not in seen:
            seen.add(j)
            nxt.append(j)
      level, depth = nxt, depth + 1
    return None

  def copies(self, question: str, documents: Optional[Sequence[str]] = None) -> bool:
    grams = _ngrams(question)
    if any(h in self.grams for h in grams):
      return True
    if documents:
      doc = set()
      for d in documents:
        doc.update(_ngrams(str(d)))
      return any(h in doc for h in grams)
    return False

  # -- the check ------------------------------------------------------------------------------
  def check(self, question: str, answer: Answer,
            documents: Optional[Sequence[str]] = None) -> dict:
    found, unknown = self.find_entities(question)
    ents, holders = self.targets(answer)
    hops, reason = None, None
    if unknown:
      reason = "unknown_entity"
    elif not found:
      reason = "no_entity"
    elif not ents and not holders:
      reason = "unknown_answer"
    else:
      hops = self.shortest(found, ents, holders)
      reason = None if hops is not None else "unreachable"
    # the answer's own aliases and, when it is an entity, every name the world gives it
    forms = [answer] if isinstance(answer, str) else list(answer)
    forms += [n for i in sorted(ents) for n in self.all_names[i]]
    return {"grounded": reason is None, "hops": hops, "reason": reason,
            "leak": _leaks(question, forms), "copy8": self.copies(question, documents),
            "entities": [self.names[i] for i in found], "unknown": unknown}


def _leaks(question: str, answer: Answer) -> bool:
  try:
    return contains_answer(question, answer)
  except ValueError:                  # an answer without a non-empty alias leaks nothing
    return False
