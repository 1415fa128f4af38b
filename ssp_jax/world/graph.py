"""The seeded knowledge graph of a world: entities with typed attributes and functional relations.

  g = generate(seed, size)   # g.entities[i] (type, name, aliases, attrs), g.triples, g.out

Deterministic: every draw comes from `schema.rng_for(seed, stage)` streams, containers are lists
and insertion-ordered dicts (sets only answer membership), so the same (seed, size) gives the same
graph in any process.
"""
from __future__ import annotations

import bisect
import collections
import dataclasses
import math
from typing import Any, Optional

from ssp_jax.world import names as names_lib
from ssp_jax.world.schema import KIND_OF, MIN_COUNT, RELATIONS, TYPE_SHARE, TYPES, rng_for

OCCUPATIONS = (("writer", 16), ("director", 8), ("musician", 16), ("painter", 7), ("chemist", 6),
               ("engineer", 8), ("politician", 8), ("merchant", 9), ("architect", 5),
               ("physician", 6), ("astronomer", 4), ("sculptor", 3), ("general", 4))
INDUSTRIES = tuple(names_lib.INDUSTRY_WORDS)
MUSIC_GENRES = ("chamber pop", "drone folk", "harbour blues", "glass jazz", "marsh rock",
                "lantern soul", "tide metal")
BOOK_GENRES = ("historical novel", "travel memoir", "poetry collection", "detective novel",
               "philosophical essay", "children's book", "family saga")
FILM_GENRES = ("war drama", "silent comedy", "documentary", "romantic comedy", "thriller",
               "costume drama", "animated film")


@dataclasses.dataclass
class Entity:
  idx: int
  type: str
  name: str = ""
  attrs: dict = dataclasses.field(default_factory=dict)
  aliases: list = dataclasses.field(default_factory=list)

  @property
  def id(self) -> str:
    return f"e{self.idx:06d}"

  @property
  def kind(self) -> str:
    return KIND_OF[self.type]


@dataclasses.dataclass
class Graph:
  seed: int
  size: int
  entities: list = dataclasses.field(default_factory=list)
  triples: list = dataclasses.field(default_factory=list)     # (subject idx, relation, object idx)
  out: dict = dataclasses.field(default_factory=dict)         # idx -> {relation: object idx}
  inbound: dict = dataclasses.field(default_factory=dict)     # (object, relation) -> [subjects]
  by_type: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(list))

  def add(self, type_: str, **attrs) -> Entity:
    e = Entity(len(self.entities), type_, attrs=dict(attrs))
    self.entities.append(e)
    self.by_type[type_].append(e.idx)
    return e

  def relate(self, s: int, rel: str, o: int) -> None:
    st, ot = self.entities[s].type, self.entities[o].type
    if ot not in RELATIONS[rel].get(st, ()):
      raise AssertionError(f"{rel}: {st} -> {ot} is not in the schema")
    if rel in self.out.setdefault(s, {}):
      raise AssertionError(f"{rel} of {s} set twice (relations are functional)")
    self.out[s][rel] = o
    self.inbound.setdefault((o, rel), []).append(s)
    self.triples.append((s, rel, o))

  def obj(self, s: int, rel: str) -> Optional[int]:
    return self.out.get(s, {}).get(rel)


def type_counts(size: int) -> dict[str, int]:
  """Entities per type: the shares of `size`, at least MIN_COUNT (or 1) each, persons absorbing
  the rounding so that the counts sum to `size`."""
  counts = {t: max(MIN_COUNT.get(t, 1), int(TYPE_SHARE[t] * size)) for t in TYPES}
  counts["person"] += size - sum(counts.values())
  if counts["person"] < MIN_COUNT["person"]:
    raise ValueError(f"size={size} is too small for a world; use --size >= 100")
  return counts


def _log_uniform(r, lo: int, hi: int) -> int:
  return int(round(math.exp(r.uniform(math.log(lo), math.log(hi)))))


def _date(r, lo: int, hi: int) -> str:
  y, m = r.randint(lo, hi), r.randint(1, 12)
  return f"{y:04d}-{m:02d}-{r.randint(1, 28):02d}"


def _pick(r, pool: list[int], fallback: list[int]) -> int:
  return r.choice(pool or fallback)


def generate(seed: int, size: int) -> Graph:
  counts = type_counts(size)
  g = Graph(seed, size)
  r = rng_for(seed, "graph")
  _places(g, r, counts)
  persons = _people(g, r, counts["person"])
  _organisations(g, r, counts, persons)
  _works_and_events(g, r, counts, persons)
  _name(g, names_lib.NameMaker(rng_for(seed, "names")))
  _aliases(g)
  return g


def _places(g: Graph, r, counts) -> None:
  countries = [g.add("country", population=_log_uniform(r, 400_000, 90_000_000),
                     founding_year=r.randint(1450, 1985)).idx for _ in range(counts["country"])]
  regions = []
  for i in range(counts["region"]):
    e = g.add("region", population=_log_uniform(r, 40_000, 6_000_000),
              area_km2=_log_uniform(r, 700, 95_000))
    g.relate(e.idx, "located_in", countries[i] if i < len(countries) else r.choice(countries))
    regions.append(e.idx)
  for i in range(counts["city"]):
    e = g.add("city", population=_log_uniform(r, 2_500, 3_500_000),
              founding_year=r.randint(700, 1890), elevation_m=r.randint(2, 2400))
    g.relate(e.idx, "located_in", regions[i] if i < len(regions) else r.choice(regions))
  cities_of = collections.defaultdict(list)
  for c in g.by_type["city"]:
    cities_of[g.entities[g.obj(g.obj(c, "located_in"), "located_in")].idx].append(c)
  for c in countries:
    g.relate(c, "capital", r.choice(cities_of[c]))


def _people(g: Graph, r, n: int) -> dict[str, list[int]]:
  occs, weights = zip(*OCCUPATIONS)
  by_occ: dict[str, list[int]] = {o: [] for o in occs}
  cities = g.by_type["city"]
  for _ in range(n):
    born = r.randint(1760, 1995)
    attrs: dict[str, Any] = {"birth_year": born, "occupation": r.choices(occs, weights)[0]}
    death = born + r.randint(35, 98)
    if death <= 2018:
      attrs["death_year"] = death
    e = g.add("person", **attrs)
    by_occ[attrs["occupation"]].append(e.idx)
    g.relate(e.idx, "born_in", r.choice(cities))
  people = sorted(g.by_type["person"], key=lambda i: (g.entities[i].attrs["birth_year"], i))
  years = [g.entities[i].attrs["birth_year"] for i in people]
  for child in people:
    if r.random() < 0.3:
      b = g.entities[child].attrs["birth_year"]
      lo, hi = bisect.bisect_left(years, b - 45), bisect.bisect_right(years, b - 20)
      if hi > lo:
        g.relate(child, "parent", people[r.randrange(lo, hi)])
  single = [i for i in people if r.random() < 0.4]
  for a, b in zip(single[::2], single[1::2]):
    if g.obj(a, "parent") != b and g.obj(b, "parent") != a and \
        abs(g.entities[a].attrs["birth_year"] - g.entities[b].attrs["birth_year"]) <= 12:
      g.relate(a, "spouse", b)
      g.relate(b, "spouse", a)
  return by_occ


def _organisations(g: Graph, r, counts, by_occ) -> None:
  everyone = g.by_type["person"]
  cities = g.by_type["city"]
  business = by_occ["merchant"] + by_occ["engineer"] + by_occ["chemist"]
  for i in range(counts["company"]):
    founder = _pick(r, business, everyone)
    industry = INDUSTRIES[i] if i < 2 else r.choice(INDUSTRIES)   # a publisher, a film studio
    e = g.add("company", industry=industry, employees=_log_uniform(r, 40, 120_000),
              founding_year=min(2015, g.entities[founder].attrs["birth_year"] + r.randint(22, 60)))
    g.relate(e.idx, "founded_by", founder)
    g.relate(e.idx, "headquartered_in", r.choice(cities))
  scholars = by_occ["physician"] + by_occ["astronomer"] + by_occ["politician"]
  for _ in range(counts["university"]):
    founder = _pick(r, scholars, everyone)
    e = g.add("university", students=_log_uniform(r, 800, 60_000),
              founding_year=min(2010, g.entities[founder].attrs["birth_year"] + r.randint(30, 70)))
    g.relate(e.idx, "founded_by", founder)
    g.relate(e.idx, "located_in", r.choice(cities))
  musicians = by_occ["musician"] or everyone
  for _ in range(counts["band"]):
    founder = r.choice(musicians)
    e = g.add("band", genre=r.choice(MUSIC_GENRES),
              founding_year=min(2018, g.entities[founder].attrs["birth_year"] + r.randint(16, 32)))
    g.relate(e.idx, "founded_by", founder)
    if g.obj(founder, "member_of") is None:
      g.relate(founder, "member_of", e.idx)
  bands = g.by_type["band"]
  orgs = g.by_type["company"] + g.by_type["university"]
  for p in everyone:
    occ = g.entities[p].attrs["occupation"]
    if occ == "musician" and g.obj(p, "member_of") is None and r.random() < 0.6:
      g.relate(p, "member_of", r.choice(bands))
    elif occ not in ("musician", "general") and r.random() < 0.45:
      g.relate(p, "employer", r.choice(orgs))
    if r.random() < 0.35:
      g.relate(p, "educated_at", r.choice(g.by_type["university"]))


def _works_and_events(g: Graph, r, counts, by_occ) -> None:
  everyone, cities = g.by_type["person"], g.by_type["city"]
  industry = lambda name: [c for c in g.by_type["company"]
                           if g.entities[c].attrs["industry"] == name]
  studios, presses = industry("film production"), industry("publishing")
  for _ in range(counts["book"]):
    author = _pick(r, by_occ["writer"], everyone)
    a = g.entities[author].attrs
    year = min(a.get("death_year", 2022), a["birth_year"] + r.randint(20, 75), 2022)
    e = g.add("book", genre=r.choice(BOOK_GENRES), pages=r.randint(90, 1200),
              publication_year=year)
    g.relate(e.idx, "written_by", author)
    g.relate(e.idx, "published_by", r.choice(presses))
  for _ in range(counts["film"]):
    director = _pick(r, by_occ["director"], everyone)
    year = min(2022, max(1895, g.entities[director].attrs["birth_year"] + r.randint(22, 70)))
    e = g.add("film", genre=r.choice(FILM_GENRES), runtime_min=r.randint(70, 200),
              release_year=year)
    g.relate(e.idx, "directed_by", director)
    g.relate(e.idx, "produced_by", r.choice(studios))
  for _ in range(counts["album"]):
    band = r.choice(g.by_type["band"])
    b = g.entities[band].attrs
    genre = b["genre"] if r.random() < 0.7 else r.choice(MUSIC_GENRES)
    e = g.add("album", genre=genre, tracks=r.randint(6, 18),
              release_year=min(2023, b["founding_year"] + r.randint(0, 25)))
    g.relate(e.idx, "performed_by", band)
  for _ in range(counts["battle"]):
    g.relate(g.add("battle", date=_date(r, 1100, 1945)).idx, "held_in", r.choice(cities))
  for _ in range(counts["festival"]):
    founder = r.choice(everyone)
    e = g.add("festival", attendance=_log_uniform(r, 2_000, 400_000),
              founding_year=min(2020, g.entities[founder].attrs["birth_year"] + r.randint(20, 60)))
    g.relate(e.idx, "founded_by", founder)
    g.relate(e.idx, "held_in", r.choice(cities))
  for _ in range(counts["treaty"]):
    g.relate(g.add("treaty", date=_date(r, 1500, 1990)).idx, "held_in", r.choice(cities))


def _name(g: Graph, maker: names_lib.NameMaker) -> None:
  """Names in entity order; a child takes its parent's family name (parents are older, and
  persons are named oldest first)."""
  family: dict[int, str] = {}
  persons = sorted(g.by_type["person"], key=lambda i: (g.entities[i].attrs["birth_year"], i))
  for p in persons:
    parent = g.obj(p, "parent")
    family[p] = family[parent] if parent is not None else maker.family()
  for e in g.entities:
    t = e.type
    if t == "person":
      e.name = maker.person(family[e.idx])
    elif t == "company":
      e.name = maker.company(e.attrs["industry"])
    elif t == "university":
      e.name = maker.university(g.entities[g.obj(e.idx, "located_in")].name)
    else:
      e.name = getattr(maker, t)()


def _aliases(g: Graph) -> None:
  """Keeps an alias only when no other entity has it as a name or an alias."""
  key = names_lib.name_key
  seen = collections.Counter(key(e.name) for e in g.entities)
  cands = [names_lib.alias_candidates(e.type, e.name) for e in g.entities]
  for c in cands:
    seen.update(key(a) for a in c)
  for e, c in zip(g.entities, cands):
    e.aliases = [a for a in c if seen[key(a)] == 1]
