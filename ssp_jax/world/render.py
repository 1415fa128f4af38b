"""Wikipedia-style articles of a world's entities, split into ~100-word passages.

Each sentence carries the facts it states, so the builder knows, for every fact, the passages
that hold it (a question's `support`). A fact is a key ("a", entity, attribute) or
("r", subject, relation, object). Articles state every fact of their entity once, in varied
phrasing and random order, plus inverse mentions (a city lists people born there, an author's
article their books), and distractors: true facts about similarly named entities ("not to be
confused with ...") and near-miss numbers that are no attribute (a census figure of the
founding era, the year filming began).
"""
from __future__ import annotations

import collections
from typing import Callable

from ssp_jax.world.graph import Entity, Graph
from ssp_jax.world.schema import display, rng_for

Fact = tuple
TARGET_WORDS = 100          # a passage closes at the first sentence end past this many words
NOUN = {"city": "the city", "region": "the region", "country": "the country",
        "company": "the company", "university": "the university", "band": "the band",
        "book": "the book", "film": "the film", "album": "the album", "battle": "the battle",
        "festival": "the festival", "treaty": "the treaty"}
MAX_LISTED = 3              # inverse mentions per list sentence


class Article:
  """Sentences of one entity's article, each with the facts it states."""

  def __init__(self, g: Graph, e: Entity, r):
    self.g, self.e, self.r = g, e, r
    self.lead: list[tuple[str, list[Fact]]] = []
    self.body: list[tuple[str, list[Fact]]] = []

  def name(self, i: int) -> str:
    return self.g.entities[i].name

  def ref(self) -> str:
    """How the article refers to its subject: the name, an alias, or a short noun."""
    e, x = self.e, self.r.random()
    if x < 0.2 and e.aliases:
      return e.aliases[0]
    if x < 0.4:
      return e.name.split()[-1] if e.type == "person" else NOUN[e.type]
    return e.name

  def say(self, options: list[str], facts: list[Fact], lead: bool = False, **kw) -> None:
    text = self.r.choice(options).format(S=self.ref(), N=self.e.name, **kw)
    (self.lead if lead else self.body).append((text[0].upper() + text[1:], facts))

  def attr(self, a: str, i: int = -1) -> str:
    i = self.e.idx if i < 0 else i
    return display(a, self.g.entities[i].attrs[a])

  def inbound(self, rel: str) -> list[int]:
    return [s for s in self.g.inbound.get((self.e.idx, rel), ())][:MAX_LISTED]

  def listed(self, items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]

  def sentences(self) -> list[tuple[str, list[Fact]]]:
    self.r.shuffle(self.body)
    return self.lead + self.body


def A(i: int, a: str) -> Fact:
  return ("a", i, a)


def R(s: int, rel: str, o: int) -> Fact:
  return ("r", s, rel, o)


# -- per type ---------------------------------------------------------------------------------
def _person(t: Article) -> None:
  e, g, i = t.e, t.g, t.e.idx
  d = e.attrs.get("death_year")
  occ = e.attrs["occupation"]
  article = "an" if occ[0] in "aeiou" else "a"
  facts = [A(i, "birth_year"), A(i, "occupation")] + ([A(i, "death_year")] if d else [])
  if d:
    t.say(["{N} ({b}–{d}) was {art} {occ}.", "{N} was {art} {occ} who lived from {b} to {d}.",
           "Born in {b}, {N} worked as {art} {occ} until their death in {d}."], facts, True,
          b=e.attrs["birth_year"], d=d, occ=occ, art=article)
  else:
    t.say(["{N} (born {b}) is {art} {occ}.", "{N} is {art} {occ}, born in {b}."], facts, True,
          b=e.attrs["birth_year"], occ=occ, art=article)
  c = g.obj(i, "born_in")
  reg = g.obj(c, "located_in")
  if t.r.random() < 0.5:
    t.say(["{S} was born in {C}, a city in {Rg}.", "{S} was born in {C} in the region of {Rg}."],
          [R(i, "born_in", c), R(c, "located_in", reg)], C=t.name(c), Rg=t.name(reg))
  else:
    t.say(["{S} was born in {C}.", "{C} was the birthplace of {S}.",
           "{S}'s birthplace was {C}."], [R(i, "born_in", c)], C=t.name(c))
  for rel, opts in (("spouse", ["{S} was married to {O}.", "{S} married {O}.",
                                "{O} was the spouse of {S}."]),
                    ("parent", ["{S} was a child of {O}.", "{O} was the parent of {S}.",
                                "{S}'s parent was {O}."]),
                    ("employer", ["{S} worked for {O}.", "{S} was employed by {O}.",
                                  "For much of their career {S} was employed at {O}."]),
                    ("educated_at", ["{S} studied at {O}.", "{S} was educated at {O}.",
                                     "{S} graduated from {O}."]),
                    ("member_of", ["{S} was a member of {O}.", "{S} played in {O}."])):
    o = g.obj(i, rel)
    if o is not None:
      t.say(opts, [R(i, rel, o)], O=t.name(o))
  for s in t.inbound("founded_by"):
    t.say(["{S} founded {O} in {y}.", "In {y}, {S} founded {O}."],
          [R(s, "founded_by", i), A(s, "founding_year")], O=t.name(s), y=t.attr("founding_year", s))
  for rel, attr, opts in (("written_by", "publication_year", ["{S} wrote {O} ({y})."]),
                          ("directed_by", "release_year", ["{S} directed {O}, released in {y}."])):
    for s in t.inbound(rel):
      t.say(opts, [R(s, rel, i), A(s, attr)], O=t.name(s), y=t.attr(attr, s))
  t.say(["A younger sibling of {S} was born in {y}.", "{S} first left home in {y2}."], [],
        y=e.attrs["birth_year"] + t.r.randint(1, 4), y2=e.attrs["birth_year"] + t.r.randint(14, 19))


def _city(t: Article) -> None:
  g, i = t.g, t.e.idx
  reg = g.obj(i, "located_in")
  cty = g.obj(reg, "located_in")
  t.say(["{N} is a city in {Rg}, {Ct}.", "{N} is a city of {Ct}, in the region of {Rg}."],
        [R(i, "located_in", reg), R(reg, "located_in", cty)], True, Rg=t.name(reg), Ct=t.name(cty))
  t.say(["{S} has a population of {v}.", "{v} people live in {S}.",
         "{S} is home to {v} inhabitants."], [A(i, "population")], v=t.attr("population"))
  t.say(["{S} was founded in {v}.", "The settlement that became {N} dates from {v}."],
        [A(i, "founding_year")], v=t.attr("founding_year"))
  t.say(["{S} lies at an elevation of {v}.", "{S} sits {v} above sea level."],
        [A(i, "elevation_m")], v=t.attr("elevation_m"))
  for c in t.inbound("capital"):
    t.say(["{S} is the capital of {O}.", "{S} serves as the capital of {O}."],
          [R(c, "capital", i)], O=t.name(c))
  people = t.inbound("born_in")
  if people:
    t.say(["Notable people born in {S} include {L}.", "{L} were born in {S}."
           if len(people) > 1 else "{L} was born in {S}."],
          [R(p, "born_in", i) for p in people], L=t.listed([t.name(p) for p in people]))
  for rel, opts in (("headquartered_in", ["{O} is headquartered in {S}."]),
                    ("located_in", ["{S} is home to {O}."])):
    for s in t.inbound(rel):
      t.say(opts, [R(s, rel, i)], O=t.name(s))
  for s in t.inbound("held_in"):
    if "date" in g.entities[s].attrs:
      t.say(["The {O} took place in {S} on {v}."], [R(s, "held_in", i), A(s, "date")],
            O=t.name(s), v=t.attr("date", s))
    else:
      t.say(["{S} hosts the {O}."], [R(s, "held_in", i)], O=t.name(s))
  t.say(["In {y}, the settlement had only {v} inhabitants."], [],
        y=t.e.attrs["founding_year"] + t.r.randint(20, 80),
        v=f"{t.r.randint(60, 900):,}")


def _region(t: Article) -> None:
  g, i = t.g, t.e.idx
  cty = g.obj(i, "located_in")
  t.say(["{N} is a region of {Ct}.", "{N} is one of the regions of {Ct}."],
        [R(i, "located_in", cty)], True, Ct=t.name(cty))
  t.say(["{S} has a population of {v}.", "About {v} people live in {S}."],
        [A(i, "population")], v=t.attr("population"))
  t.say(["{S} covers {v}.", "The region has an area of {v}."], [A(i, "area_km2")],
        v=t.attr("area_km2"))
  cities = t.inbound("located_in")
  if cities:
    t.say(["Cities in {S} include {L}."], [R(c, "located_in", i) for c in cities],
          L=t.listed([t.name(c) for c in cities]))


def _country(t: Article) -> None:
  g, i = t.g, t.e.idx
  cap = g.obj(i, "capital")
  t.say(["{N} is a country whose capital is {C}.", "{N} is a country; its capital is {C}."],
        [R(i, "capital", cap)], True, C=t.name(cap))
  t.say(["{S} became independent in {v}.", "{S} was founded as a state in {v}."],
        [A(i, "founding_year")], v=t.attr("founding_year"))
  t.say(["{S} has a population of {v}.", "{v} people live in {S}."], [A(i, "population")],
        v=t.attr("population"))
  regions = t.inbound("located_in")
  if regions:
    t.say(["Regions of {S} include {L}."], [R(x, "located_in", i) for x in regions],
          L=t.listed([t.name(x) for x in regions]))


def _company(t: Article) -> None:
  g, i, a = t.g, t.e.idx, t.e.attrs
  f = g.obj(i, "founded_by")
  art = "an" if a["industry"][0] in "aeiou" else "a"
  t.say(["{N} is {art} {ind} company founded in {y} by {F}.",
         "{N} is {art} {ind} company; {F} founded it in {y}."],
        [A(i, "industry"), A(i, "founding_year"), R(i, "founded_by", f)], True, art=art,
        ind=a["industry"], y=t.attr("founding_year"), F=t.name(f))
  c = g.obj(i, "headquartered_in")
  t.say(["{S} is headquartered in {C}.", "The head office of {N} is in {C}."],
        [R(i, "headquartered_in", c)], C=t.name(c))
  t.say(["{S} employs {v} people.", "{S} has {v} employees."], [A(i, "employees")],
        v=t.attr("employees"))
  for rel in ("published_by", "produced_by"):
    for s in t.inbound(rel):
      t.say([f"{{S}} {rel.split('_')[0]} {{O}}."], [R(s, rel, i)], O=t.name(s))
  t.say(["By {y} it employed about {v} people."], [],
        y=min(2020, a["founding_year"] + t.r.randint(5, 30)),
        v=f"{max(3, a['employees'] * t.r.randint(20, 70) // 100):,}")


def _university(t: Article) -> None:
  g, i = t.g, t.e.idx
  c, f = g.obj(i, "located_in"), g.obj(i, "founded_by")
  t.say(["{N} is a university in {C}, founded in {y} by {F}.",
         "{N} is a university located in {C}; {F} founded it in {y}."],
        [R(i, "located_in", c), A(i, "founding_year"), R(i, "founded_by", f)], True,
        C=t.name(c), y=t.attr("founding_year"), F=t.name(f))
  t.say(["{S} has {v} students.", "About {v} students are enrolled at {S}."],
        [A(i, "students")], v=t.attr("students"))
  alumni = t.inbound("educated_at")
  if alumni:
    t.say(["Alumni of {S} include {L}."], [R(p, "educated_at", i) for p in alumni],
          L=t.listed([t.name(p) for p in alumni]))


def _band(t: Article) -> None:
  g, i, a = t.g, t.e.idx, t.e.attrs
  f = g.obj(i, "founded_by")
  t.say(["{N} is a {gen} band formed in {y} by {F}.", "{F} formed the {gen} band {N} in {y}."],
        [A(i, "genre"), A(i, "founding_year"), R(i, "founded_by", f)], True, gen=a["genre"],
        y=t.attr("founding_year"), F=t.name(f))
  members = [p for p in t.inbound("member_of")]
  if members:
    t.say(["Members of {S} have included {L}."], [R(p, "member_of", i) for p in members],
          L=t.listed([t.name(p) for p in members]))
  albums = t.inbound("performed_by")
  if albums:
    t.say(["Albums by {S} include {L}."],
          [R(x, "performed_by", i) for x in albums] + [A(x, "release_year") for x in albums],
          L=t.listed([f"{t.name(x)} ({t.attr('release_year', x)})" for x in albums]))


def _book(t: Article) -> None:
  g, i, a = t.g, t.e.idx, t.e.attrs
  w, p = g.obj(i, "written_by"), g.obj(i, "published_by")
  t.say(["{N} is a {gen} by {W}, published in {y}.", "{N} is a {gen} that {W} wrote in {y}."],
        [A(i, "genre"), R(i, "written_by", w), A(i, "publication_year")], True, gen=a["genre"],
        W=t.name(w), y=t.attr("publication_year"))
  t.say(["{S} was published by {P}.", "{P} published {S}."], [R(i, "published_by", p)],
        P=t.name(p))
  t.say(["{S} runs to {v} pages.", "The first edition had {v} pages."], [A(i, "pages")],
        v=t.attr("pages"))
  t.say(["{W} began writing it in {y}."], [], W=t.name(w),
        y=a["publication_year"] - t.r.randint(1, 6))


def _film(t: Article) -> None:
  g, i, a = t.g, t.e.idx, t.e.attrs
  d, p = g.obj(i, "directed_by"), g.obj(i, "produced_by")
  t.say(["{N} is a {y} {gen} directed by {D}.", "{N} is a {gen} by {D}, released in {y}."],
        [A(i, "release_year"), A(i, "genre"), R(i, "directed_by", d)], True, gen=a["genre"],
        y=t.attr("release_year"), D=t.name(d))
  t.say(["{S} was produced by {P}.", "{P} produced {S}."], [R(i, "produced_by", p)],
        P=t.name(p))
  t.say(["{S} runs {v}.", "The film has a running time of {v}."], [A(i, "runtime_min")],
        v=t.attr("runtime_min"))
  t.say(["Filming began in {y}."], [], y=a["release_year"] - 1)


def _album(t: Article) -> None:
  g, i, a = t.g, t.e.idx, t.e.attrs
  b = g.obj(i, "performed_by")
  t.say(["{N} is an album by {B}, released in {y}.", "{B} released the album {N} in {y}."],
        [R(i, "performed_by", b), A(i, "release_year")], True, B=t.name(b),
        y=t.attr("release_year"))
  t.say(["{S} is a {v} record.", "Critics describe {S} as {v}."], [A(i, "genre")], v=a["genre"])
  t.say(["{S} contains {v} tracks.", "{S} has {v} tracks."], [A(i, "tracks")],
        v=t.attr("tracks"))


def _event(t: Article) -> None:
  g, i, e = t.g, t.e.idx, t.e
  c = g.obj(i, "held_in")
  if e.type == "festival":
    f = g.obj(i, "founded_by")
    t.say(["The {N} is an annual festival held in {C}.", "The {N} takes place every year in {C}."],
          [R(i, "held_in", c)], True, C=t.name(c))
    t.say(["{F} founded the festival in {y}.", "It was first held in {y}, founded by {F}."],
          [R(i, "founded_by", f), A(i, "founding_year")], F=t.name(f), y=t.attr("founding_year"))
    t.say(["About {v} people attend it each year.", "{S} draws {v} visitors a year."],
          [A(i, "attendance")], v=t.attr("attendance"))
    return
  verb = "fought" if e.type == "battle" else "signed"
  t.say([f"The {{N}} was {verb} in {{C}} on {{v}}.", f"On {{v}}, the {{N}} was {verb} in {{C}}."],
        [R(i, "held_in", c), A(i, "date")], True, C=t.name(c), v=t.attr("date"))
  year = int(e.attrs["date"][:4])
  t.say(["Preparations had begun in {y}.", "Talks leading up to it started in {y}."], [],
        y=year - t.r.randint(1, 2))


ARTICLES: dict[str, Callable[[Article], None]] = {
    "person": _person, "city": _city, "region": _region, "country": _country,
    "company": _company, "university": _university, "band": _band, "book": _book,
    "film": _film, "album": _album, "battle": _event, "festival": _event, "treaty": _event}


def _confusable(g: Graph, t: Article, neighbour: int) -> None:
  """A true fact about a similarly named entity of the same type (its own attribute)."""
  o = g.entities[neighbour]
  attr = next(iter(o.attrs))
  t.say(["{N} should not be confused with {O} ({a}: {v}).",
         "Not to be confused with {O} ({a}: {v})."], [A(neighbour, attr)], O=o.name,
        a=attr.replace("_", " "), v=t.attr(attr, neighbour))


def render(g: Graph) -> tuple[list[dict], dict]:
  """(passages [{"id", "contents"}], fact -> [passage ids]) of the whole world; the key
  ("e", entity) lists the passages of the entity's own article."""
  r = rng_for(g.seed, "render")
  by_name = sorted(range(len(g.entities)), key=lambda i: (g.entities[i].type,
                                                          g.entities[i].name.lower(), i))
  next_of = {a: b for a, b in zip(by_name, by_name[1:])
             if g.entities[a].type == g.entities[b].type}
  passages: list[dict] = []
  where: dict = collections.defaultdict(list)
  for e in g.entities:
    t = Article(g, e, r)
    ARTICLES[e.type](t)
    if e.idx in next_of and r.random() < 0.3:
      _confusable(g, t, next_of[e.idx])
    chunk, words = [], 0
    sentences = t.sentences()
    for k, (text, facts) in enumerate(sentences):
      chunk.append((text, facts))
      words += len(text.split())
      left = sum(len(s.split()) for s, _ in sentences[k + 1:])
      if k == len(sentences) - 1 or (words >= TARGET_WORDS and left >= 30):
        pid = str(len(passages))
        body = " ".join(s for s, _ in chunk)
        passages.append({"id": pid, "contents": f"\"{e.name}\"\n{body}"})
        where[("e", e.idx)].append(pid)
        for _, fs in chunk:
          for f in fs:
            if pid not in where[f]:
              where[f].append(pid)
        chunk, words = [], 0
  return passages, where
