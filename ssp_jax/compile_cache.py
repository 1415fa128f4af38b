"""JAX's persistent compilation cache for the CLIs (`compile_cache` in every run config).

A run compiles dozens of programs before its first step (the rollout's prefill and decode
programs, the update, the warm start): 69 on an H200 for `configs/ssp_small_h200.py`, ~40 s of
the embedded default's first step on a 2-core CPU. With the cache a resumed or repeated run
loads them instead (the embedded default's compile time: 39.9 s -> 4.7 s in step 1).

`compile_cache`: "auto" = `$SSP_JAX_CACHE/xla/<host>` (models/cache.py's root), "" = off, any
other value = that directory. `<host>` names the backend and a digest of the CPU's instruction
set, so a cache on a shared home directory never hands a program to a machine that cannot run
it. A `JAX_COMPILATION_CACHE_DIR` set by the user wins over the config, and
`JAX_ENABLE_COMPILATION_CACHE=false` turns it off (the test suite does). Programs that compiled
in under a second are not stored (JAX's default).

JAX reads the setting at its first compile: `enable` must run before anything is jitted.
"""
from __future__ import annotations

import hashlib
import os
import platform
import tempfile
from typing import Optional

ENV = "JAX_COMPILATION_CACHE_DIR"


def host_tag(backend: str) -> str:
  """backend-machine-<digest of the CPU flags> (the CPU's features decide what XLA emits for the
  host, and on a CPU backend for everything)."""
  flags = ""
  try:
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
      for line in f:
        if line.startswith(("flags", "Features")):
          flags = " ".join(sorted(line.split(":", 1)[1].split()))
          break
  except OSError:
    flags = platform.processor()
  digest = hashlib.sha1(flags.encode()).hexdigest()[:10]
  return f"{backend}-{platform.machine() or 'unknown'}-{digest}"


def resolve(setting: str, backend: str) -> Optional[str]:
  """The directory `setting` names (see the module docstring), or None when off."""
  setting = str(setting or "").strip()
  if setting in ("", "off", "none", "false", "False"):
    return None
  if setting == "auto":
    from models.cache import cache_dir
    return cache_dir("xla", host_tag(backend))
  return os.path.expanduser(setting)


def enable(setting: str) -> Optional[str]:
  """Turns the cache on for this process (before the first compile); returns its directory, or
  None when off (or when `JAX_COMPILATION_CACHE_DIR` already chose one: JAX reads that itself).
  A directory that cannot be created or written to turns the cache off with one warning line:
  a cache must never stop a run."""
  import sys

  import jax
  if os.environ.get(ENV) or not jax.config.jax_enable_compilation_cache:
    return None   # the user's own cache directory, or JAX_ENABLE_COMPILATION_CACHE=false
  path = resolve(setting, jax.default_backend())
  if path is None:
    return None
  try:   # made and written to once here: JAX would warn at every program it cannot store
    os.makedirs(path, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
      pass
  except OSError as e:
    print(f"warning: compile_cache={setting!r}: cannot write to {path} ({e.strerror or e}); "
          "running without the compilation cache (set compile_cache to another directory, or "
          "'' to silence this)", file=sys.stderr)
    return None
  jax.config.update("jax_compilation_cache_dir", path)
  return path
