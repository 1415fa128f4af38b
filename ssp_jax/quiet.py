"""Keeps libraries' start-up chatter out of a normal run's log; the project's own messages stay.

Called first thing by the `ssp-jax` CLI (and the index benchmark), before jax, faiss or
transformers are imported. What it hides, measured on a CPU run of `ssp-jax train`:
  - jax's backend probe ("Unable to initialize backend 'tpu' ...", INFO),
  - faiss's loader ("Loading faiss with AVX512 support.", "Could not load library ...", INFO),
  - transformers' "PyTorch was not found ..." advisory (a WARNING on installs without torch),
  - absl / XLA C++ INFO and WARNING lines (TF_CPP_MIN_LOG_LEVEL=2; errors still print),
  - absl's Python logger below WARNING (orbax logs every checkpoint step at INFO).
Real warnings of these libraries (WARNING and above from jax, faiss, absl's Python logger)
still print. SSP_JAX_DEBUG=1 turns all of this off. Settings the user already made (the
environment variables above) are kept.

`logs_above_bars` keeps the project's own INFO lines (a checkpoint written, an evaluation's
scores) from breaking a progress bar: while a bar runs they print through `tqdm.write`.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Callable

# logger name -> the lowest level that still prints
_LOGGERS = {
    "jax._src.xla_bridge": logging.WARNING,
    "faiss": logging.WARNING,
    "faiss.loader": logging.WARNING,
    "absl": logging.WARNING,
}
_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "2",               # C++ (XLA, absl) INFO and WARNING
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",  # "PyTorch was not found ..."
}


def quiet_libraries() -> None:
  """Raises the log levels of the libraries' noisy loggers (idempotent)."""
  if os.environ.get("SSP_JAX_DEBUG"):
    return
  for key, value in _ENV.items():
    os.environ.setdefault(key, value)
  for name, level in _LOGGERS.items():
    logger = logging.getLogger(name)
    if logger.level == logging.NOTSET or logger.level < level:
      logger.setLevel(level)


def logs_above_bars(enabled: bool = True) -> Callable[[], None]:
  """Routes the root logger's console handlers through `tqdm.write` while a progress bar runs,
  so that a log line (a checkpoint saved, an evaluation's scores) prints on its own line above
  the bar instead of being spliced into it and leaving a broken bar behind. Returns the function
  that restores the handlers (call it when the bar closes). A no-op when `enabled` is false (no
  bar is drawn) or when no console handler is configured."""
  root = logging.getLogger()
  console = [h for h in root.handlers if isinstance(h, logging.StreamHandler)
             and getattr(h, "stream", None) in (sys.stdout, sys.stderr)]
  if not enabled or not console:
    return lambda: None
  from tqdm.contrib.logging import logging_redirect_tqdm
  ctx = logging_redirect_tqdm([root])
  ctx.__enter__()
  return lambda: ctx.__exit__(None, None, None)
