"""Host-side page allocator of the paged KV cache (device side: ssp_jax/sampling/paged.py).

Pages are fixed blocks of `page_size` token slots in one pool shared by all rows. A row owns the
pages listed in its row of `table` (in position order); entries it does not own are the null
page 0, which no row ever owns. Freed pages go on a LIFO free list, so the next prompt reuses
them first. The pool can grow (new page ids appended) up to `max_pages`.
"""
from __future__ import annotations

import numpy as np

from ssp_jax.sampling.paged import NULL_PAGE


class PageAllocator:

  def __init__(self, rows: int, page_size: int, columns: int, num_pages: int, max_pages: int):
    if page_size < 1:
      raise ValueError(f"rollout.page_size must be >= 1, got {page_size}")
    if num_pages < 2 or max_pages < num_pages:
      raise ValueError(f"need 2 <= num_pages <= max_pages, got {num_pages}, {max_pages}")
    self.page_size = page_size
    self.max_pages = max_pages
    self.num_pages = num_pages                       # pool size incl. the null page
    self.table = np.zeros((rows, columns), np.int32)  # [B, C_max]
    self.owned = [0] * rows                          # pages owned per row (a table prefix)
    self.free: list[int] = list(range(num_pages - 1, 0, -1))   # pop() gives the lowest id first

  def pages_for(self, tokens: int) -> int:
    return -(-tokens // self.page_size)

  def capacity(self, row: int) -> int:
    """Token slots the row's pages hold."""
    return self.owned[row] * self.page_size

  def grow(self, num_pages: int) -> None:
    num_pages = min(num_pages, self.max_pages)
    self.free = list(range(num_pages - 1, self.num_pages - 1, -1)) + self.free
    self.num_pages = max(self.num_pages, num_pages)

  def ensure(self, row: int, tokens: int) -> bool:
    """Gives the row pages for `tokens` slots; all or nothing. False when the pool is short."""
    need = self.pages_for(tokens) - self.owned[row]
    if need <= 0:
      return True
    if need > len(self.free) or self.owned[row] + need > self.table.shape[1]:
      return False
    for _ in range(need):
      self.table[row, self.owned[row]] = self.free.pop()
      self.owned[row] += 1
    return True

  def release(self, row: int) -> None:
    """Frees the row's pages (the next `ensure` reuses them first)."""
    self.free.extend(int(p) for p in self.table[row, :self.owned[row]][::-1])
    self.table[row] = NULL_PAGE
    self.owned[row] = 0

  def take_rows(self, rows: list[int], size: int) -> None:
    """Keeps only `rows` (in this order) as rows 0.., in a table of `size` rows; the other
    rows of the new table own nothing (the batch shrinks; pages do not move)."""
    table = np.full((size, self.table.shape[1]), NULL_PAGE, np.int32)
    table[:len(rows)] = self.table[rows]
    self.owned = [self.owned[b] for b in rows] + [0] * (size - len(rows))
    self.table = table

  @property
  def pages_in_use(self) -> int:
    return sum(self.owned)
