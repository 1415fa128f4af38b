"""Slot and KV-memory planning of one `generate` call: which row sits in which decode slot, the
cache each row may fill, paged preemption, and the tail batch shrinking.

Dense layout (`rollout.kv_layout="dense"`): one cache row per slot, the cache length doubling
(from `cache_min_len`) as sequences grow. Paged layout: a pool of pages shared by all rows
(host allocator `ssp_jax.rollout.pages`, device side `ssp_jax.sampling.paged`); a row short of
pages waits, and when no row can go on the youngest is preempted (its pages freed, its sequence
recomputed when it is admitted again). docs/rollout.md, "Paged KV cache".
"""
from __future__ import annotations

import collections
from typing import Optional, Sequence

import numpy as np

from models.config import ModelConfig
from models.sharding import Sharder
from ssp_jax import sampling as S
from ssp_jax.rollout.pages import PageAllocator
from ssp_jax.rollout.rows import Row, pow2, put
from ssp_jax.sampling import paged as PG


def batch_size(cfg, sharder: Optional[Sharder], n: int) -> int:
  """Decode slots for n prompts: rollout.batch_size, or fewer (a power of two, at least the
  data axes) when fewer prompts come."""
  B = int(cfg.batch_size)
  data = sharder.axis_size("act_batch") if sharder is not None else 1
  if B % data:
    raise ValueError(f"rollout.batch_size={B} must be divisible by the data axes ({data})")
  return B if n >= B else min(B, max(pow2(n), data))


class SlotPlanner:
  """The slots of one `generate` call: B of them, sequences of at most `cap` tokens."""

  def __init__(self, cfg, model_cfg: ModelConfig, sharder: Optional[Sharder], cache_dtype,
               B: int, cap: int, steps: int, stats: collections.Counter,
               pool_sizes: Optional[dict] = None):
    self.cfg, self.model_cfg, self.sharder, self.cache_dtype = cfg, model_cfg, sharder, cache_dtype
    self.B, self.cap, self.steps, self.stats = B, cap, steps, stats
    # fixed pools of earlier calls, {(B, table columns): pages} (rollout.kv_pool_reuse)
    self.pool_sizes = pool_sizes
    self.paged = cfg.kv_layout == "paged"
    self.alloc: Optional[PageAllocator] = None
    self.admitted = 0
    self.columns: Optional[int] = None   # paged: the attended table width of the next calls

  def init_state(self, window: int, row_tokens: Sequence[int] = ()) -> S.DecodeState:
    """The decode state of B empty slots (stop windows of `window` bytes). row_tokens: the most
    tokens each row of the call can hold (prompt + budget), which size a "fixed" paged pool."""
    c = self.cfg
    if not self.paged:
      return S.init_state(self.model_cfg, self.B, self._cache_len(0, 0), window,
                          self.cache_dtype, self.sharder)
    ps = int(c.page_size)
    cols = pow2(-(-self.cap // ps))   # a power of two: every attended width divides evenly
    max_tokens = int(c.kv_max_tokens) or self.B * self.cap
    max_pages = 1 + -(-max_tokens // ps)
    if c.kv_pool == "grow":
      first = min(max_pages, 1 + -(-self.B * int(c.cache_min_len) // ps))
    else:   # "fixed": the B longest rows at their longest at once, so the pool never grows
      need = 1 + sum(sorted(-(-int(t) // ps) for t in row_tokens)[-self.B:])
      first = min(max_pages, pool_pages(need))
      first = max_pages = self._reuse_pool(first, (self.B, cols),
                                           max_pages if int(c.kv_max_tokens) else None)
    self.alloc = PageAllocator(self.B, ps, cols, max(first, 2), max(max_pages, 2))
    self.stats["kv_pool_pages"] = self.alloc.num_pages
    return S.init_paged_state(self.model_cfg, self.B, self.alloc.num_pages, ps, 1, window,
                              self.cache_dtype, self.sharder)

  def _reuse_pool(self, pages: int, key: tuple, limit: Optional[int]) -> int:
    """A fixed pool of `pages`, or the largest one an earlier call with the same slots and table
    columns compiled for (rollout.kv_pool_reuse), within `limit` (rollout.kv_max_tokens' pages,
    when set): its prefill and decode programs are compiled already, and the memory is what
    that call held. Calls whose prompts differ (the RAG verifier's documents) otherwise land on
    another of pool_pages' sizes now and then, and each new size recompiles every program of
    the call (likely the 16 programs, 37 s, of the RAG check at step 3 of
    configs/ssp_small_h200.py on an H200)."""
    if self.pool_sizes is None or not self.cfg.get("kv_pool_reuse", True):
      return pages
    seen = self.pool_sizes.get(key, 0)
    if pages <= seen and (limit is None or seen <= limit):
      self.stats["kv_pool_reused"] = 1
      return seen
    self.pool_sizes[key] = max(seen, pages)
    return pages

  # -- admission -------------------------------------------------------------------------------
  def admit(self, rows: list[Optional[Row]], queue: collections.deque) -> None:
    """Queued prompts into free slots (paged: while the pool has pages for them, after giving
    every live row pages for its next call)."""
    if self.paged:
      self._plan_pages(rows, queue)
      return
    for b in range(len(rows)):
      if rows[b] is None and queue:
        rows[b] = queue.popleft()

  def _ensure(self, b: int, tokens: int) -> bool:
    """Pages for `tokens` slots of row b, growing the pool (doubling, up to its cap) if short."""
    alloc = self.alloc
    while not alloc.ensure(b, tokens):
      if alloc.num_pages >= alloc.max_pages:
        return False
      alloc.grow(2 * alloc.num_pages)
    return True

  def _plan_pages(self, rows, queue) -> None:
    """Gives every live row pages for its next call (prefill of its pending tokens plus up to
    `steps` decode steps, at least one step), preempting the youngest rows while no row can go
    on; then admits queued prompts into free slots while the pool has pages for them."""
    steps = self.steps
    while True:
      live = sorted((b for b, r in enumerate(rows) if r is not None),
                    key=lambda b: rows[b].admitted)
      for b in live:
        r = rows[b]
        at = r.pos + max(len(r.pending) - 1, 0)        # position of tok_B after the prefill
        full = self._ensure(b, at + min(r.budget, steps) + 1)
        r.blocked = not (full or self._ensure(b, at + 2))
      if not live or not all(rows[b].blocked for b in live):
        break
      if len(live) == 1:
        raise ValueError(
            f"rollout.kv_max_tokens={self.cfg.kv_max_tokens} holds fewer tokens than one row "
            f"needs ({rows[live[0]].pos + len(rows[live[0]].pending) + 1}); raise it or set 0")
      self._preempt(rows, live[-1], queue)
    for b in range(len(rows)):
      if rows[b] is None and queue:
        r = queue[0]
        if not self._ensure(b, len(r.pending) + min(r.budget, steps)):
          if not any(x is not None for x in rows):
            raise ValueError(f"rollout.kv_max_tokens={self.cfg.kv_max_tokens} holds fewer "
                             f"tokens than one prompt needs; raise it or set 0")
          break
        rows[b] = queue.popleft()
        rows[b].admitted = self.admitted
        self.admitted += 1
    self.stats["kv_pages_peak"] = max(self.stats["kv_pages_peak"], self.alloc.pages_in_use)

  def _preempt(self, rows, b: int, queue) -> None:
    """Frees row b's pages and puts it back at the head of the queue; when it is admitted again
    its whole sequence so far is prefilled (recomputed) and it continues where it was."""
    r = rows[b]
    if not r.pending:       # mid-generation: keep the stop-string segment
      r.resume_segment = bytes(r.segment)
    r.pending = r.prompt_ids + r.response
    r.pos = 0
    r.blocked = False
    self.alloc.release(b)
    rows[b] = None
    queue.appendleft(r)
    self.stats["preemptions"] += 1

  def release(self, b: int) -> None:
    """Slot b's row finished: its pages go back to the pool."""
    if self.paged:
      self.alloc.release(b)

  # -- the tail ---------------------------------------------------------------------------------
  def shrink(self, st: S.DecodeState, rows: list[Optional[Row]]):
    """(state, rows): with no prompt queued and at most half the slots holding rows, halves the
    batch (again while that holds) down to rollout.tail_min_batch rows (0: never): the live rows
    move to the first slots (dense: their cache rows are copied; paged: only table rows move)
    and the next decode calls run on the smaller batch, whose steps cost less. Each batch size
    compiles its own programs once. Outputs are unchanged (greedy rollouts equal,
    tests/test_rollout_shrink.py); sampled tokens draw other random numbers, as any change of
    slot would."""
    live = [b for b, r in enumerate(rows) if r is not None]
    floor = int(self.cfg.tail_min_batch)
    B = B2 = len(rows)
    data = self.sharder.axis_size("act_batch") if self.sharder is not None else 1
    while floor and B2 % 2 == 0 and B2 // 2 >= max(floor, len(live)) and (B2 // 2) % data == 0:
      B2 //= 2
    if B2 == B:
      return st, rows
    pad = B2 - len(live)
    if self.paged:
      assert all(self.alloc.owned[b] == 0 for b in range(B) if rows[b] is None)
      self.alloc.take_rows(live, B2)
    st = S.take_rows(st, put(live + [live[0]] * pad, np.int32),
                     put([True] * len(live) + [False] * pad, bool), sharder=self.sharder)
    self.stats["batch_shrinks"] += 1
    self.stats["batch_min"] = B2
    return st, [rows[b] for b in live] + [None] * pad

  # -- per decode call --------------------------------------------------------------------------
  def limit(self, b: int, r: Optional[Row]) -> int:
    """Tokens row b may generate in the next call (0: inactive)."""
    if r is None or r.blocked:
      return 0
    lim = min(r.budget, self.steps)
    if self.paged:   # the row's pages must hold slots up to pos + limit (see _plan_pages)
      lim = min(lim, self.alloc.capacity(b) - r.pos - 1)
    return max(lim, 0)

  def fit_cache(self, st: S.DecodeState, need: int) -> S.DecodeState:
    """A cache that holds `need` slots a row (dense: grown by doubling; paged: the device pool
    grown to the allocator's and the page table installed)."""
    if self.paged:
      return self._sync_pages(st, need)
    S_now = st.cache["k"][0].shape[2]          # dense: L buffers [B, K, S, H]
    if need <= S_now:
      return st
    return S.resize_cache(st, new_len=self._cache_len(need, S_now), sharder=self.sharder)

  def _cache_len(self, need: int, current: int) -> int:
    size = max(int(self.cfg.cache_min_len), current)
    while size < need:
      size *= 2
    return min(size, self.cap) if need <= self.cap else size

  def _sync_pages(self, st: S.DecodeState, tokens: int) -> S.DecodeState:
    """Device pool grown to the allocator's size (kv_pool="grow"); page table installed with
    enough columns for `tokens` slots and every owned page (`table_width`; the Pallas kernel
    reads each row's own length, so it gets the whole table and its decode loop one shape)."""
    alloc = self.alloc
    C = alloc.table.shape[1]
    self.columns = table_width(max(alloc.pages_for(tokens), max(alloc.owned), 1), C)
    own = PG.reads_own_slots(self.cfg.decode_attention)
    table = put(alloc.table[:, :C if own else self.columns])
    if st.cache["k"][0].shape[1] < alloc.num_pages:
      self.stats["kv_pool_pages"] = alloc.num_pages
      return S.grow_pages(st, table, num_pages=alloc.num_pages, sharder=self.sharder)
    return S.set_table(st, table)


def table_width(pages: int, columns: int) -> int:
  """The page-table width the next calls attend for rows of up to `pages` pages, in a table of
  `columns` (a power of two): a power of two, at least columns / 8, so a call compiles at most
  four widths (a floor of 1 gave one per doubling: 8 to 128 columns for 8,192-token responses).
  Rows shorter than an eighth of the longest possible row read up to that eighth ("gather")."""
  return min(columns, max(columns // 8, pow2(pages)))


def pool_pages(need: int) -> int:
  """A fixed pool's page count for `need` pages: rounded up to a multiple of a sixteenth of the
  next power of two (at most 12.5% more), so that calls whose prompts differ a little share one
  pool size, hence one set of compiled programs."""
  step = max(1, pow2(need) // 16)
  return -(-need // step) * step
