"""Range checks of numeric config fields: one line naming the field, its value and the valid
range, raised before any model is loaded (the sections' own `check_*_config` functions use it;
`ssp_jax.run.validate.check_sections` runs them for SSP and SvS alike)."""
from __future__ import annotations

import math
from typing import Optional


class RangeError(ValueError):
  """A config field outside its valid range; the message names it, the value and the range."""


def check_range(section: str, cfg, name: str, low: Optional[float] = None,
                high: Optional[float] = None, *, low_open: bool = False,
                high_open: bool = False, note: str = "", optional: bool = False) -> None:
  """Raises RangeError unless low <= cfg[name] <= high (an open end excludes the bound; None is
  no bound). `optional`: None is allowed (a field that None turns off). `note` says what the
  edge values mean, e.g. "0 = off"."""
  value = cfg.get(name) if hasattr(cfg, "get") else getattr(cfg, name)
  if value is None and optional:
    return
  where = f"config.{section}.{name}={value!r}"
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    raise RangeError(f"{where} is not a number")
  lo = "" if low is None else f"{low} {'<' if low_open else '<='} "
  hi = "" if high is None else f" {'<' if high_open else '<='} {high}"
  rng = f"{lo}{name}{hi}" + (f" ({note})" if note else "")
  bad = math.isnan(value)
  if low is not None:
    bad = bad or value < low or (low_open and value == low)
  if high is not None:
    bad = bad or value > high or (high_open and value == high)
  if bad:
    raise RangeError(f"{where} is out of range: valid is {rng}")
