"""Invented names: words built from syllables, so that no pretrained model can recall a fact about
them, unique across the whole world (case-insensitively), and their aliases.

`NameMaker(rng)` hands out names per entity type; `alias_candidates(type, name)` lists the
aliases a name may have (the builder drops any alias that two entities would share).
"""
from __future__ import annotations

import random
import re

from ssp_jax.metrics import normalize_answer

_ONSETS = ("b", "br", "d", "dr", "f", "fl", "g", "gl", "gr", "h", "k", "kr", "l", "m", "n", "p",
           "pl", "qu", "r", "s", "sk", "sl", "st", "t", "th", "tr", "v", "vr", "w", "z", "zh",
           "ch", "j", "kv", "ts")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ai", "ei", "ia", "io", "ou", "y", "a", "e", "o")
_CODAS = ("n", "r", "l", "s", "th", "nd", "rn", "lk", "m", "x", "rd", "lv", "nt")

_GIVEN_ENDS = ("a", "o", "en", "is", "ia", "ar", "ine", "el", "us", "ette", "an", "ov")
_FAMILY_ENDS = ("sen", "ridge", "wick", "ander", "ova", "elli", "quist", "dt", "mann", "ard",
                "ley", "orn", "ek", "ez")
_CITY_ENDS = ("holm", "mere", "vik", "dor", "ford", "stad", "burg", "wyn", "ora", "gate",
              "port", "ham", "ria", "sk")
_REGION_ENDS = ("land", "mark", "shire", "vale", "moor", "reach", "fell", "marsh")
_COUNTRY_ENDS = ("ia", "ovia", "eria", "and", "onia", "ara", "estan", "ium")
_BAND_ENDS = ("ers", "ites", "ettes", "ons", "ards")

INDUSTRY_WORDS = {"publishing": ("Press", "Books", "Publishing"),
                  "film production": ("Pictures", "Studios", "Films"),
                  "shipping": ("Shipping", "Lines"), "mining": ("Mining", "Collieries"),
                  "textiles": ("Textiles", "Mills"), "chemicals": ("Chemicals", "Dyes"),
                  "railways": ("Railways", "Rail"), "brewing": ("Brewing", "Breweries"),
                  "instruments": ("Instruments", "Optics"),
                  "engineering": ("Engines", "Foundry", "Machines")}
_COMPANY_SUFFIX = ("Company", "Group", "Corporation", "Holdings", "Partners", "Limited")
_NOUNS = ("Lantern", "River", "Orchard", "Mirror", "Harbour", "Winter", "Garden", "Tower",
          "Compass", "Shadow", "Letter", "Bridge", "Sparrow", "Ember", "Tide", "Anchor", "Crown",
          "Meadow", "Signal", "Thread", "Glass", "Hollow", "Ledger", "Voyage")
_ADJS = ("Silent", "Last", "Crimson", "Hidden", "Distant", "Quiet", "Bright", "Broken", "Golden",
         "Long", "Northern", "Pale", "Second", "Wandering")
_FESTIVALS = ("Lantern Festival", "Harvest Fair", "Music Festival", "Film Festival",
              "Book Fair", "Folk Festival", "Light Festival")


class NameMaker:
  """Unique invented names, drawn from one seeded stream."""

  def __init__(self, rng: random.Random):
    self.rng = rng
    self.taken: set[str] = set()     # lower-cased names handed out (membership only)

  def word(self, syllables: tuple[int, int] = (2, 3), end: tuple[str, ...] = ()) -> str:
    """One capitalised invented word of 5..12 letters (no run of 4 consonants or 3 vowels; short
    words are too often real ones)."""
    r = self.rng
    while True:
      n = r.randint(*syllables)
      parts = [r.choice(_ONSETS) + r.choice(_VOWELS) + (r.choice(_CODAS) if r.random() < 0.3
                                                         else "") for _ in range(n)]
      if end:
        tail = r.choice(end)
        last = parts[-1].rstrip("aeiouy") if tail[0] in "aeiouy" else parts[-1]
        parts[-1] = (last if last[-1:] not in "aeiouy" or tail[0] not in "aeiouy"
                     else last.rstrip("aeiouy")) + tail
      w = "".join(parts)
      if 5 <= len(w) <= 12 and not re.search(r"(.)\1\1|[aeiouy]{3}|[^aeiouy]{4}", w):
        return w.capitalize()

  def claim(self, name: str) -> bool:
    """Takes `name` if no entity has it yet (case-insensitive)."""
    key = name_key(name)
    if not key or key in self.taken:
      return False
    self.taken.add(key)
    return True

  def unique(self, make) -> str:
    """Calls `make()` until it returns a name nobody has."""
    for _ in range(10_000):
      name = make()
      if self.claim(name):
        return name
    raise RuntimeError("name space exhausted; lower --size")

  # -- per type -------------------------------------------------------------------------------
  def given(self) -> str:
    return self.word((1, 2), _GIVEN_ENDS)

  def family(self) -> str:
    return self.word((1, 2), _FAMILY_ENDS)

  def person(self, family: str) -> str:
    return self.unique(lambda: f"{self.given()} {family}")

  def city(self) -> str:
    return self.unique(lambda: self.word((1, 2), _CITY_ENDS))

  def region(self) -> str:
    return self.unique(lambda: self.word((1, 2), _REGION_ENDS))

  def country(self) -> str:
    return self.unique(lambda: self.word((1, 2), _COUNTRY_ENDS))

  def company(self, industry: str) -> str:
    words = INDUSTRY_WORDS[industry]
    return self.unique(lambda: f"{self.word()} {self.rng.choice(words)} "
                               f"{self.rng.choice(_COMPANY_SUFFIX)}")

  def university(self, city: str) -> str:
    first = f"University of {city}"
    if self.claim(first):
      return first
    return self.unique(lambda: f"{self.word()} Institute of "
                               f"{self.rng.choice(('Technology', 'Science', 'Arts'))}")

  def band(self) -> str:
    r = self.rng
    kinds = ("Collective", "Quartet", "Ensemble")
    return self.unique(lambda: r.choice((f"The {self.word((1, 2), _BAND_ENDS)}",
                                         f"{self.word()} {r.choice(kinds)}")))

  def book(self) -> str:
    r = self.rng
    return self.unique(lambda: r.choice((
        f"The {r.choice(_NOUNS)}s of {self.word()}", f"{self.word()}'s {r.choice(_NOUNS)}",
        f"A {r.choice(_ADJS)} {r.choice(_NOUNS)} in {self.word()}")))

  def film(self) -> str:
    r = self.rng
    return self.unique(lambda: r.choice((
        f"{r.choice(_ADJS)} {self.word()}", f"Return to {self.word()}",
        f"{self.word()} Rising", f"The {r.choice(_NOUNS)} of {self.word()}")))

  def album(self) -> str:
    r = self.rng
    return self.unique(lambda: r.choice((
        f"{self.word()} {r.choice(_NOUNS)}s", f"Songs from {self.word()}",
        f"{r.choice(_ADJS)} {r.choice(_NOUNS)} over {self.word()}")))

  def battle(self) -> str:
    return self.unique(lambda: f"Battle of {self.word()}")

  def festival(self) -> str:
    return self.unique(lambda: f"{self.word()} {self.rng.choice(_FESTIVALS)}")

  def treaty(self) -> str:
    return self.unique(lambda: f"Treaty of {self.word()}")


def name_key(name: str) -> str:
  """The form two names are compared in: the EM normaliser's (case, punctuation and articles
  ignored), so that no two entities' names or aliases count as the same answer."""
  return normalize_answer(name)


def acronym(name: str) -> str:
  return "".join(w[0] for w in name.split() if w[:1].isupper())


def alias_candidates(type_: str, name: str) -> list[str]:
  """Aliases a name may have: a person's initial + family name, an organisation's acronym, a
  country's formal name, a treaty's or battle's short form."""
  words = name.split()
  if type_ == "person":
    return [f"{words[0][0]}. {' '.join(words[1:])}"]
  if type_ == "country":
    return [f"Republic of {name}"]
  if type_ == "company":
    return [acronym(name)] if len(acronym(name)) >= 3 else []
  if type_ == "university":
    if name.startswith("University of "):
      return [f"{name[len('University of '):]} University"]
    return [acronym(name)] if "Institute" in name else []
  if type_ == "treaty":
    return [f"{words[-1]} Treaty"]
  if type_ == "region":
    return [f"{name} Province"]
  return []
