"""Compiles a paged call's programs on host threads before they are needed (rollout.compile_ahead).

A multi-turn call on the paged layout with a fixed pool runs a small set of programs known when
the call starts: the paged prefill at three piece counts x at most four table widths
(rollout/prefill.py) and one decode loop per tail batch size (with "gather" attention also per
width). Compiled one at a time as each was first needed, they kept an 8,192-token call on an
H200 107 s longer cold than warm (bench/RESULTS.md, issue 26). XLA compiles with the GIL released, so the host's cores
can compile them side by side while the device runs the first ones.

`CompileAhead` lowers and compiles each program (`jit(...).lower(abstract args).compile()`: the
jitted call of the same shapes then finds it in JAX's in-memory cache) on a thread pool, in the
order the call is likely to need them. Before a jitted call the engine waits for that program
(`wait(key)`), so no program compiles twice. A program that fails to compile ahead is counted
(`ahead_errors`) and the jitted call compiles it as before; one compiled but never called is
counted in `ahead_unused`. Same programs, same outputs: only when they compile changes
(tests/test_rollout_ahead.py).
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import os
import sys
import threading
import time
from typing import Any, Callable, Hashable, Optional

import jax
import numpy as np

from ssp_jax.rollout.compiles import AHEAD_THREADS
from ssp_jax.rollout.rows import put
from ssp_jax.sampling import paged as PG


def threads(setting, backend: Optional[str] = None) -> int:
  """Compile threads for rollout.compile_ahead: -1 (auto) = min(4, host cores) on an
  accelerator (on a 16-core H200 host 4 threads beat 8: each compile slowed less) and 0 (off)
  on a CPU, where the compiles would take the cores the run itself computes on; an int >= 0 is
  taken as given (0 = off)."""
  try:
    n = int(setting)
  except (TypeError, ValueError):
    raise ValueError(f"rollout.compile_ahead={setting!r}: use a thread count, 0 = off or "
                     f"-1 = auto") from None
  if n == -1:
    backend = backend or jax.default_backend()
    return 0 if backend == "cpu" else max(1, min(4, os.cpu_count() or 1))
  if n < 0:
    raise ValueError(f"rollout.compile_ahead={n}: use a thread count, 0 = off or -1 = auto")
  return n


def spec(x) -> jax.ShapeDtypeStruct:
  """The abstract value a jitted call sees for array x: shape, dtype, weak type and, for a
  committed array, its sharding (an uncommitted one lowers without a sharding)."""
  return jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=bool(x.aval.weak_type),
                              sharding=x.sharding if x.committed else None)


def host_spec(shape, dtype) -> jax.ShapeDtypeStruct:
  """The abstract value of `rows.put(np.zeros(shape, dtype))`, as the engine passes host arrays."""
  return spec(put(np.zeros(shape, dtype)))


def resized(s: jax.ShapeDtypeStruct, *shape: int) -> jax.ShapeDtypeStruct:
  """s with another shape (same dtype, weak type and sharding)."""
  return jax.ShapeDtypeStruct(shape, s.dtype, weak_type=s.weak_type, sharding=s.sharding)


class CompileAhead:
  """A thread pool compiling jitted programs by key; `wait(key)` before the matching call."""

  def __init__(self, n_threads: int, stats: collections.Counter):
    self._pool = cf.ThreadPoolExecutor(n_threads, thread_name_prefix=AHEAD_THREADS)
    self._futures: dict[Hashable, cf.Future] = {}
    self._called: set = set()
    self._lock = threading.Lock()
    self._urgent: list[cf.Future] = []
    self._urgent_done = threading.Event()
    self._closed = False
    self.stats = stats

  def submit(self, key: Hashable, fn: Callable, *args: Any, urgent: bool = False,
             **kwargs: Any) -> None:
    """Compiles `fn` (a jax.jit function) for these abstract args, once per key. The others
    wait until every urgent one submitted before `start_rest()` is compiled: the programs the
    call needs first then compile on all the host's cores (on an H200 host, eight compiling
    at once took each about twice as long as one alone)."""
    if key in self._futures:
      return
    f = self._pool.submit(self._compile, key, fn, args, kwargs, urgent)
    self._futures[key] = f
    if urgent:
      self._urgent.append(f)

  def start_rest(self) -> None:
    """The non-urgent programs start once the urgent ones are compiled (or failed)."""
    if not self._urgent:
      self._urgent_done.set()
      return
    left = [len(self._urgent)]

    def one_done(_):
      with self._lock:
        left[0] -= 1
        if not left[0]:
          self._urgent_done.set()
    for f in self._urgent:
      f.add_done_callback(one_done)

  def _compile(self, key, fn, args, kwargs, urgent: bool) -> float:
    if not urgent:
      self._urgent_done.wait()
    if self._closed:   # the call ended while this one waited for the urgent ones
      return 0.0
    t0 = time.perf_counter()
    fn.lower(*args, **kwargs).compile()
    return time.perf_counter() - t0

  def wait(self, key: Hashable) -> None:
    """Blocks until the program of `key` is compiled (no-op for a key never submitted)."""
    f = self._futures.get(key)
    self._called.add(key)
    if f is None:
      return
    t0 = time.perf_counter()
    try:
      f.result()
    except Exception as e:   # the jitted call compiles it (and raises what a real error is)
      with self._lock:
        first = not self.stats["ahead_errors"]
        self.stats["ahead_errors"] += 1
      if first:
        print(f"rollout.compile_ahead: compiling {key} ahead failed ({type(e).__name__}: "
              f"{str(e).splitlines()[0] if str(e) else ''}); the call compiles it itself",
              file=sys.stderr)
    self.stats["ahead_wait_s"] += time.perf_counter() - t0

  def close(self) -> None:
    """Cancels what has not started; a compile under way finishes in the background."""
    done = [k for k, f in self._futures.items() if f.done() and not f.cancelled()
            and f.exception() is None]
    self.stats["ahead_compiled"] += len(done)
    self.stats["ahead_unused"] += len([k for k in done if k not in self._called])
    self._closed = True         # then release those waiting for the urgent ones: they skip
    self._urgent_done.set()
    self._pool.shutdown(wait=False, cancel_futures=True)


def tail_batches(B: int, floor: int, data: int) -> list[int]:
  """The decode batch sizes the tail shrinking can reach from B (slots.SlotPlanner.shrink)."""
  sizes = [B]
  while floor and B % 2 == 0 and B // 2 >= floor and (B // 2) % data == 0:
    B //= 2
    sizes.append(B)
  return sizes


def widths_upto(pages: int, columns: int) -> list[int]:
  """The table widths `slots.table_width` gives for rows of up to `pages` pages."""
  from ssp_jax.rollout.slots import table_width
  top = table_width(max(pages, 1), columns)
  w = table_width(1, columns)
  out = [w]
  while w < top:
    w *= 2
    out.append(w)
  return out


def plan_paged(ahead: CompileAhead, *, model_cfg, st, dparams, tables, eos_E, key, sampling,
               dtype, sharder, attn_impl: str, prefill_attn: str, steps: int, columns: int,
               unroll: int = 1, head: str = "xla", matmul: str = "xla",
               max_row_tokens: int, page_size: int, piece: int, piece_sizes: list[int],
               batches: list[int], first_width: int, first_sizes: list[int], prefill_fn: Callable,
               decode_fn: Callable) -> None:
  """Submits the call's prefill and decode programs, those needed first first: the prompts'
  prefill (`first_sizes` pieces a call at `first_width` columns) and the first decode loop as
  urgent, then the other sizes and wider widths, then the smaller tail batches. `st` is the
  call's initial paged state of batches[0] rows."""
  pools_k = [spec(x) for x in st.cache["k"]]
  pools_v = [spec(x) for x in st.cache["v"]]
  dspec = jax.tree.map(spec, dparams)
  widths = widths_upto(-(-(max_row_tokens + 1) // page_size), columns)
  widths = sorted(set(widths) | {first_width})
  i32 = np.int32

  def prefill(n: int, w: int, urgent: bool = False) -> None:
    ahead.submit(("prefill", n, w), prefill_fn, model_cfg, pools_k, pools_v, dspec,
                 host_spec((n, w), i32), host_spec((n, piece), i32), host_spec((n,), i32),
                 dtype=dtype, sharder=sharder, attn_impl=prefill_attn, urgent=urgent)

  tok, pos, win = spec(st.tok_B), spec(st.pos_B), spec(st.window_BM)
  fixed_width = PG.reads_own_slots(attn_impl)   # the Pallas kernels get the whole table

  def decode(b: int, w: int, urgent: bool = False) -> None:
    state = type(st)({"k": pools_k, "v": pools_v, "table": host_spec((b, w), i32)},
                     resized(tok, b), resized(pos, b), resized(win, b, win.shape[1]))
    ahead.submit(("decode", b, w), decode_fn, model_cfg, state, dspec,
                 jax.tree.map(spec, tables), spec(eos_E), host_spec((b,), bool),
                 host_spec((b,), i32), spec(jax.numpy.int32(1)), spec(key), num_steps=steps,
                 sampling=sampling, dtype=dtype, sharder=sharder, attn_impl=attn_impl,
                 unroll=unroll, head=head, matmul=matmul, urgent=urgent)

  for n in sorted(first_sizes, reverse=True):
    prefill(n, first_width, urgent=True)
  decode(batches[0], columns if fixed_width else first_width, urgent=True)
  ahead.start_rest()
  for w in widths:
    for n in sorted(piece_sizes, reverse=True):
      prefill(n, w)
    if not fixed_width:
      decode(batches[0], w)
  for b in batches[1:]:
    for w in ([columns] if fixed_width else widths[::-1]):
      decode(b, w)
