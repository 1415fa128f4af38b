"""The one cache directory of ssp-jax and the checks made before anything is written into it.

Everything built once and reused (the default retrieval index, the warm start, GGUF tokenizer
exports, models joined from registry packages) lives under `cache_root()`:
`$SSP_JAX_CACHE`, else `$XDG_CACHE_HOME/ssp-jax`, else `~/.cache/ssp-jax`. Older versions also
wrote GGUF tokenizer exports to `~/.cache/ssp_jax`; that directory is no longer read (nothing is
moved: delete it when no older checkout needs it).

`ensure_writable(path, need_bytes, what)` is called before work whose result goes into the cache
(minutes of warm-start SFT, an index build, joining a model), so that a read-only, unwritable or
full cache is one `CacheError` naming the path and `SSP_JAX_CACHE` before the work, not an
OSError after it.
"""
from __future__ import annotations

import os
import shutil
import tempfile

ENV = "SSP_JAX_CACHE"
MARGIN_BYTES = 64 << 20   # metadata, temporary files and the other cache users


class CacheError(ValueError):
  """The cache directory cannot take what is about to be written; the message names the path
  and how to move the cache. (A ValueError: the CLI reports it in one line with exit 2.)"""


def cache_root() -> str:
  """$SSP_JAX_CACHE, else $XDG_CACHE_HOME/ssp-jax, else ~/.cache/ssp-jax."""
  return os.environ.get(ENV) or os.path.join(
      os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ssp-jax")


def cache_dir(*parts: str) -> str:
  """A path under the cache root (not created)."""
  return os.path.join(cache_root(), *parts)


def _reason(e: OSError) -> str:
  # Lower case on purpose: `ssp-jax train` recognises the OS's own texts ("Read-only file
  # system", ...) as a full or read-only *workdir*; this error is about the cache.
  return (e.strerror or str(e)).lower()


def move_hint() -> str:
  return (f"set {ENV} to a writable directory with free space (e.g. {ENV}=/scratch/ssp-jax-cache)")


def ensure_writable(path: str, need_bytes: int = 0, what: str = "the cache") -> None:
  """Creates `path` (a directory in the cache) and checks that a file can be written there and
  that `need_bytes` + MARGIN_BYTES are free; CacheError naming the path otherwise.

  The error is raised outside the `except` block on purpose: with no chained OSError the train
  command's disk-fault handler cannot mistake it for a fault of the workdir."""
  problem = None
  try:
    os.makedirs(path, exist_ok=True)
    with tempfile.NamedTemporaryFile(prefix=".probe-", dir=path):
      pass
    free = shutil.disk_usage(path).free
    need = int(need_bytes) + MARGIN_BYTES
    if free < need:
      problem = f"has {free >> 20} MiB free, {what} needs about {need >> 20} MiB"
  except OSError as e:
    problem = f"is not writable ({_reason(e)})"
  if problem:
    raise CacheError(f"cache directory {path!r} {problem}; {move_hint()}")


def write_failed(path: str, e: OSError, what: str) -> CacheError:
  """The one-line CacheError for an OSError met while writing `what` under `path` (the caller
  raises it outside its `except` block, see ensure_writable)."""
  return CacheError(f"cannot write {what} to {path!r} ({_reason(e)}); {move_hint()}")
