"""What a world holds: entity types, their attributes and the relations between them, and how a
value is written as an answer. Shared by the generator, the renderer, the question maker and the
checker, so that they agree on every name and format.

Every relation here is *functional* in its subject (a film has one director, a city lies in one
region), which is what makes a chain of relations name exactly one answer.
"""
from __future__ import annotations

import datetime
import random
from typing import Any

VERSION = 1

# fine type -> coarse kind
KIND_OF = {
    "person": "person",
    "city": "place", "region": "place", "country": "place",
    "company": "organisation", "university": "organisation", "band": "organisation",
    "book": "work", "film": "work", "album": "work",
    "battle": "event", "festival": "event", "treaty": "event",
}
TYPES = tuple(KIND_OF)

# share of the world's entities per type (sums to 1)
TYPE_SHARE = {
    "person": 0.40, "city": 0.12, "region": 0.04, "country": 0.015,
    "company": 0.07, "university": 0.03, "band": 0.05,
    "book": 0.07, "film": 0.06, "album": 0.05,
    "battle": 0.03, "festival": 0.035, "treaty": 0.03,
}
MIN_COUNT = {"country": 2, "region": 3, "city": 6, "person": 20}

# attribute -> value format: year | count | metres | km2 | minutes | date | category
ATTR_FORMAT = {
    "birth_year": "year", "death_year": "year", "occupation": "category",
    "population": "count", "founding_year": "year", "elevation_m": "metres",
    "area_km2": "km2", "industry": "category", "employees": "count", "students": "count",
    "genre": "category", "publication_year": "year", "pages": "count",
    "release_year": "year", "runtime_min": "minutes", "tracks": "count", "date": "date",
    "attendance": "count",
}

# relation -> {subject type: object types}
RELATIONS = {
    "born_in": {"person": ("city",)},
    "spouse": {"person": ("person",)},
    "parent": {"person": ("person",)},
    "employer": {"person": ("company", "university")},
    "educated_at": {"person": ("university",)},
    "member_of": {"person": ("band",)},
    "located_in": {"city": ("region",), "region": ("country",), "university": ("city",)},
    "capital": {"country": ("city",)},
    "headquartered_in": {"company": ("city",)},
    "founded_by": {"company": ("person",), "university": ("person",), "band": ("person",),
                   "festival": ("person",)},
    "written_by": {"book": ("person",)},
    "published_by": {"book": ("company",)},
    "directed_by": {"film": ("person",)},
    "produced_by": {"film": ("company",)},
    "performed_by": {"album": ("band",)},
    "held_in": {"battle": ("city",), "festival": ("city",), "treaty": ("city",)},
}

# comparisons: attribute -> (types it is asked for, which end wins: "min" | "max")
COMPARABLE = {
    "founding_year": (("city", "country", "company", "university", "band", "festival"), "min"),
    "birth_year": (("person",), "min"),
    "population": (("city", "region", "country"), "max"),
    "publication_year": (("book",), "min"),
    "release_year": (("film", "album"), "min"),
    "elevation_m": (("city",), "max"),
    "students": (("university",), "max"),
    "runtime_min": (("film",), "max"),
}

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")


def rng_for(seed: int, stage: str) -> random.Random:
  """An independent, process-stable random stream per (seed, stage): a string seed goes through
  SHA-512 in `random.Random`, never through Python's salted `hash()`."""
  return random.Random(f"ssp-world:{int(seed)}:{stage}")


def date_of(iso: str) -> datetime.date:
  return datetime.date.fromisoformat(iso)


def answer_forms(attr: str, value: Any) -> list[str]:
  """The golden answers of an attribute value: the display form first, then the other ways a
  correct answer may be written (all distinct)."""
  fmt = ATTR_FORMAT[attr]
  if fmt == "date":
    d = date_of(value)
    forms = [f"{d.day} {MONTHS[d.month - 1]} {d.year}", f"{MONTHS[d.month - 1]} {d.day}, {d.year}",
             d.isoformat()]
  elif fmt in ("year", "category"):
    forms = [str(value)]
  else:
    v = int(value)
    unit = {"count": "", "metres": " metres", "km2": " square kilometres",
            "minutes": " minutes"}[fmt]
    short = {"metres": " m", "km2": " km2", "minutes": " min"}.get(fmt, "")
    forms = [f"{v:,}{unit}", str(v), f"{v}{unit}", f"{v:,}{short}", f"{v}{short}"]
  out: list[str] = []
  for f in forms:
    if f not in out:
      out.append(f)
  return out


def display(attr: str, value: Any) -> str:
  """How a value is written in a passage (the first golden form)."""
  return answer_forms(attr, value)[0]


def is_generic(attr: str, value: Any) -> bool:
  """A value too generic to be an SSP answer: a category shared by many entities, or a number
  below 100 (track counts and the like appear everywhere)."""
  fmt = ATTR_FORMAT[attr]
  if fmt == "category":
    return True
  if fmt == "date":
    return False
  return int(value) < 100
