"""Questions with exact answers from a world's graph, the train / held-out split and the SSP
answer set.

  1 hop    an attribute or relation of a named entity ("Who directed X?")
  2 hops   a bridge ("In which year was the founder of X born?") or a comparison of two named
           entities ("Which was founded earlier, A or B?")
  3 hops   a chain of two relations and a final attribute or relation

Every relation in the schema is functional, so each chain names one answer; a question whose
text contains its own answer (e.g. "In which city is the University of X?") is skipped, as is a
text that another chain already produced. `path` lists the chain's [subject id, relation or
attribute, object id or value] steps, `support` the passages that state each step.
"""
from __future__ import annotations

import collections
import json

from ssp_jax.metrics import contains_answer
from ssp_jax.world import phrasing
from ssp_jax.world.graph import Graph
from ssp_jax.world.names import name_key
from ssp_jax.world.schema import COMPARABLE, answer_forms, is_generic, rng_for

HELDOUT_FRACTION = 0.3
PER_HOP = 0.8             # questions per hop count, per entity of the world
COMPARISON_SHARE = 0.25   # of the 2-hop questions
MAX_SHARED_VALUE = 2      # an attribute value held by more facts is no SSP answer (too generic)


def _golden_entity(g: Graph, i: int) -> list[str]:
  e = g.entities[i]
  return [e.name, *e.aliases]


def _support(where: dict, facts: list[tuple]) -> list[list[str]]:
  return [sorted(where.get(f, ()), key=int) for f in facts]


class _Maker:
  def __init__(self, g: Graph, where: dict, seed: int):
    self.g, self.where = g, where
    self.r = rng_for(seed, "questions")
    self.records: list[dict] = []
    self.texts: set[str] = set()
    self.paths: set[str] = set()

  def add(self, text: str, golden: list[str], hops: int, kind: str, path: list, facts: list,
          **extra) -> bool:
    key = json.dumps(path, sort_keys=True)
    if text in self.texts or key in self.paths:
      return False
    if kind != "comparison" and contains_answer(text, golden):
      return False
    self.texts.add(text)
    self.paths.add(key)
    self.records.append({"question": text, "golden_answers": golden, "hops": hops, "kind": kind,
                         "path": path, "support": _support(self.where, facts), **extra})
    return True

  def name_of(self, i: int) -> str:
    e = self.g.entities[i]
    shown = e.aliases[0] if e.aliases and self.r.random() < 0.2 else e.name
    return phrasing.mention(shown, e.type)

  def chain(self, hops: int) -> bool:
    """A random walk of hops-1 relations from a random entity, then a final attribute or
    relation, never revisiting an entity."""
    g, r = self.g, self.r
    start = r.randrange(len(g.entities))
    cur, seen = start, {start}
    path, facts = [], []
    phrase = self.name_of(start)
    for _ in range(hops - 1):
      rels = [(rel, o) for rel, o in g.out.get(cur, {}).items() if o not in seen]
      if not rels:
        return False
      rel, o = r.choice(rels)
      path.append([g.entities[cur].id, rel, g.entities[o].id])
      facts.append(("r", cur, rel, o))
      phrase = phrasing.pick(phrasing.NP, rel, g.entities[cur].type, r).format(X=phrase)
      cur = o
      seen.add(o)
    e = g.entities[cur]
    finals = [("a", a) for a in e.attrs] + [("r", rel) for rel, o in g.out.get(cur, {}).items()
                                             if o not in seen]
    what, name = r.choice(finals)
    if what == "a":
      value = e.attrs[name]
      golden = answer_forms(name, value)
      path.append([e.id, name, value])
      facts.append(("a", cur, name))
      text = phrasing.pick(phrasing.ATTR_Q, name, e.type, r)
    else:
      o = g.out[cur][name]
      golden = _golden_entity(g, o)
      path.append([e.id, name, g.entities[o].id])
      facts.append(("r", cur, name, o))
      text = phrasing.pick(phrasing.REL_Q, name, e.type, r)
    kind = ("attribute" if what == "a" else "relation") if hops == 1 else \
        ("bridge" if hops == 2 else "chain")
    return self.add(phrasing.sentence(text.format(S=phrase)), golden, hops, kind, path, facts)

  def comparison(self) -> bool:
    g, r = self.g, self.r
    attr = r.choice(sorted(COMPARABLE))
    types, best = COMPARABLE[attr]
    pool = [i for t in types for i in g.by_type[t] if attr in g.entities[i].attrs]
    if len(pool) < 2:
      return False
    a, b = r.sample(pool, 2)
    ea, eb = g.entities[a], g.entities[b]
    if ea.type != eb.type or ea.attrs[attr] == eb.attrs[attr]:
      return False
    win = min((a, b), key=lambda i: g.entities[i].attrs[attr] * (1 if best == "min" else -1))
    text = phrasing.pick(phrasing.COMPARE_Q, attr, ea.type, r).format(
        A=self.name_of(a), B=self.name_of(b))
    path = [[ea.id, attr, ea.attrs[attr]], [eb.id, attr, eb.attrs[attr]]]
    return self.add(phrasing.sentence(text), _golden_entity(g, win), 2, "comparison", path,
                    [("a", a, attr), ("a", b, attr)], compare=best)


def make_questions(g: Graph, where: dict, seed: int) -> list[dict]:
  """All questions of the world, each with `split` ("train" | "heldout") and `id`."""
  m = _Maker(g, where, seed)
  target = max(60, int(PER_HOP * g.size))
  plan = [(1, "chain", target), (2, "chain", target - int(COMPARISON_SHARE * target)),
          (2, "comparison", int(COMPARISON_SHARE * target)), (3, "chain", target)]
  for hops, how, n in plan:
    made = tries = 0
    while made < n and tries < 40 * n:
      tries += 1
      made += m.chain(hops) if how == "chain" else m.comparison()
  return _split(m.records, seed)


def _split(records: list[dict], seed: int) -> list[dict]:
  """Seeded held-out split by chain: all wordings of one chain (and both orders of one
  comparison) land on the same side, so no held-out text or chain appears in train."""
  r = rng_for(seed, "split")
  side: dict[str, str] = {}
  counts: collections.Counter = collections.Counter()
  for rec in records:
    key = json.dumps(sorted(rec["path"]) if rec["kind"] == "comparison" else rec["path"])
    if key not in side:
      side[key] = "heldout" if r.random() < HELDOUT_FRACTION else "train"
    rec["split"] = side[key]
    rec["id"] = f"world{seed}-{rec['split']}-{counts[rec['split']]:06d}"
    counts[rec["split"]] += 1
  return records


def answer_set(g: Graph, records: list[dict], seed: int) -> list[dict]:
  """The SSP answer set from the train questions' answers (comparisons left out: their answer
  is named in the question). One line per distinct answer, its hop budget one of the chain
  lengths that reach it (seeded choice); generic values (categories, numbers below 100, values
  that more than MAX_SHARED_VALUE facts share) are left out."""
  shared = collections.Counter(name_key(answer_forms(a, v)[0])
                               for e in g.entities for a, v in e.attrs.items())
  r = rng_for(seed, "answers")
  hops: dict[str, list[int]] = {}
  first: dict[str, dict] = {}
  for rec in records:
    if rec["split"] != "train" or rec["kind"] == "comparison":
      continue
    subj, what, obj = rec["path"][-1]
    is_attr = what in g.entities[int(subj[1:])].attrs
    if is_attr and (is_generic(what, obj) or
                    shared[name_key(rec["golden_answers"][0])] > MAX_SHARED_VALUE):
      continue
    key = name_key(rec["golden_answers"][0])
    hops.setdefault(key, []).append(rec["hops"])
    if key not in first:
      cat = ("date" if what == "date" else "year" if what.endswith("year") else "number") \
          if is_attr else g.entities[int(obj[1:])].kind
      first[key] = {"ground_truth": rec["golden_answers"], "category": cat}
  out = []
  for key, item in first.items():
    hs = sorted(set(hops[key]))
    out.append({**item, "search_turns": r.choice(hs)})
  return out
