"""Checks of output paths given on the command line, made before any work is spent."""
from __future__ import annotations

import os


def check_out_dir(out: str, what: str, flag: str = "--out") -> None:
  """`out` must be a directory or a path that can become one: a file there, a file on the way
  to it or an unwritable directory is one ValueError naming it (nothing is created here, so a
  command that fails later leaves no empty directory). `what`: what the directory is for."""
  if os.path.exists(out) and not os.path.isdir(out):
    raise ValueError(f"{flag} {out!r} is a file; give a directory for {what}")
  parent = os.path.abspath(out)
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise ValueError(f"{flag} {out!r} cannot be created: {parent!r} is a file; give a directory "
                     f"for {what}")
  if not os.access(parent, os.W_OK | os.X_OK):
    raise ValueError(f"{flag} {out!r}: {parent!r} is not writable; give a directory you can "
                     f"write to for {what}")
