"""A grading worker process: runs the symbolic stages of SvS answer checking, one job at a time.

  w = Worker()                            # starts `python -m ssp_jax.svs.grade_worker`
  ... w.ready (after its "ready" line) ... w.send(7, ("equiv", "x+1", "1+x", True))
  for msg in w.read(): ...                # {"id": 7, "score": 1.0, "notes": {}}
  w.kill()                                # on overrun: the only way to stop sympy's C code

grade_pool.py owns the workers and their deadlines; this file is the process and its pipe
protocol (one JSON object per line: jobs on stdin, results on stdout). The child imports sympy
and math_verify and grades one warm-up pair before it says "ready", so start-up is not charged
to the first answer's budget. It runs jobs in its main thread (math_verify's SIGALRM timeouts
apply), under an address-space limit of WORKER_MEMORY_BYTES (a huge integer fails with
MemoryError instead of swapping the host), in its own session (a Ctrl-C of the trainer does not
reach it), and exits when its stdin closes (the parent died or closed it).
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from typing import Iterator

WORKER_MEMORY_BYTES = 4 << 30       # address-space limit of a worker process
_WARM_UP = (("equiv", "x^2-1", "(x-1)(x+1)", True),
            ("equiv", "(\\frac{1}{2}, 0.25)", "(0.5, 1)", True),
            ("equiv", "[2, 3)", "x \\in [2,3)", True),
            ("equiv", "\\{3, 1\\}", "\\{1,3\\}", True),
            ("grade", "so 3 + 4 = 7", "7", True, True))
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Worker:
  """Parent-side handle of one worker process (not thread-safe: grade_pool.py locks)."""

  def __init__(self, start_deadline: float):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH", "")) if p)
    self.proc = subprocess.Popen([sys.executable, "-m", "ssp_jax.svs.grade_worker"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                 start_new_session=True)
    os.set_blocking(self.proc.stdout.fileno(), False)
    self.start_deadline = start_deadline   # monotonic time by which it must be ready
    self.ready = False
    self.dead = False
    self._buf = b""

  def fileno(self) -> int:
    return self.proc.stdout.fileno()

  def send(self, job_id: int, job: tuple) -> None:
    self.proc.stdin.write(json.dumps({"id": job_id, "job": list(job)}).encode() + b"\n")
    self.proc.stdin.flush()

  def read(self) -> Iterator[dict]:
    """The complete messages available now; sets `dead` at end of file."""
    while True:
      try:
        chunk = os.read(self.fileno(), 1 << 16)
      except BlockingIOError:
        break
      if not chunk:
        self.dead = True
        break
      self._buf += chunk
    *lines, self._buf = self._buf.split(b"\n")
    for line in lines:
      try:
        msg = json.loads(line)
      except ValueError:                       # not ours (a library writing to fd 1)
        continue
      if not isinstance(msg, dict):
        continue
      if msg.get("ready"):
        self.ready = True
      else:
        yield msg

  def kill(self) -> None:
    """Ends the process at once (SIGKILL) and reaps it."""
    self.dead = True
    try:
      self.proc.kill()
      self.proc.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
      pass
    for f in (self.proc.stdin, self.proc.stdout):
      try:
        f.close()
      except OSError:
        pass


def _serve() -> None:
  """The child's loop: read a job line, grade it with every stage, write the result line."""
  import collections
  import resource
  out = os.fdopen(os.dup(1), "w")          # the protocol channel; print() goes to stderr
  os.dup2(2, 1)
  try:
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, resource.RLIM_INFINITY))
  except (ValueError, OSError):
    pass
  for name in ("math_verify", "latex2sympy2_extended"):
    logging.getLogger(name).setLevel(logging.ERROR)    # its timeout warnings would flood logs
  from ssp_jax.svs import math_grader
  for job in _WARM_UP:                     # lazy imports of sympy's simplify, math_verify's
    math_grader.run_job(job, slow=True)    # grammar: not charged to the first real answer
  out.write('{"ready": true}\n')
  out.flush()
  for line in sys.stdin:
    req = json.loads(line)
    notes: collections.Counter = collections.Counter()
    try:
      score = math_grader.run_job(tuple(req["job"]), slow=True, notes=notes) or 0.0
    except MemoryError:
      score, notes["memory"] = 0.0, 1
    out.write(json.dumps({"id": req["id"], "score": score, "notes": dict(notes)}) + "\n")
    out.flush()


if __name__ == "__main__":
  _serve()
