"""The multi-turn search rollout engine with continuous refill of the decode batch.

    engine = RolloutEngine(model_cfg, tokenizer, get_rollout_config(), retriever, sharder)
    trajs = engine.generate(params, prompts, jax.random.key(0))

B slots (cache rows) decode together in one jitted `lax.while_loop` (sampling/loop.py). Rows are
independent (slot == position per row), so the host can, between calls, (1) fill a free slot with
the next pending prompt, (2) splice an observation into a row that stopped on `</search>`; both
prefill only that row's new chunk. A call returns once `refill_fraction` of its rows finished, so
waiting or finished rows never hold the others back for long and never force a recompute.
"""
from __future__ import annotations

import collections
import dataclasses
import math
import time
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from models.config import ModelConfig
from models.sharding import Sharder
from ssp_jax import prompts_format as pf
from ssp_jax import sampling as S
from ssp_jax.rollout import compiles, multihost
from ssp_jax.rollout.config import get_rollout_config
from ssp_jax.rollout.observations import SearchResult, run_searches
from ssp_jax.rollout.pages import PageAllocator
from ssp_jax.sampling.stops import PAD
from ssp_jax.tokenizer import Prompt, Tokenizer
from ssp_jax.types import Trajectory


@dataclasses.dataclass
class _Row:
  """Host-side state of one running trajectory."""
  index: int
  prompt_ids: list[int]
  budget: int                          # response tokens left (observations included)
  pending: list[int]                   # tokens to put in the cache; the last one becomes tok_B
  pos: int = 0                         # position of pending[0] (then of the device's tok_B)
  response: list[int] = dataclasses.field(default_factory=list)
  mask: list[int] = dataclasses.field(default_factory=list)
  logprobs: list[float] = dataclasses.field(default_factory=list)
  segment: bytearray = dataclasses.field(default_factory=bytearray)  # generated since last chunk
  queries: list[str] = dataclasses.field(default_factory=list)
  docs: list[list[dict]] = dataclasses.field(default_factory=list)
  failed: int = 0
  open_prefix: str = ""                # prompt text from an unclosed search_open (assistant prefill)
  meta: dict = dataclasses.field(default_factory=dict)
  admitted: int = 0                    # admission order (paged: the youngest is preempted first)
  blocked: bool = False                # paged: no pages for its next step this call
  resume_segment: Optional[bytes] = None  # paged: segment bytes to restore after a preemption


def _pow2(n: int) -> int:
  return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def _chunk_bucket(n: int, cap: int) -> int:
  """The padded length a prefill piece of n tokens compiles at: 16, 32, 64, then powers of two
  and 3/4 of them (96, 128, 192, 256, 384, 512, ...), at most cap (a power of two). Pieces pad
  by at most 1.33x above 64 tokens (2x with powers of two alone) for about twice the shapes."""
  p = max(16, _pow2(n))
  if p >= 128 and 3 * p // 4 >= n:
    p = 3 * p // 4
  return min(p, cap)


def _put(x, dtype=None) -> jax.Array:
  """A host array on the default device. (jnp.asarray of a numpy array compiles a small
  program per new shape; device_put does not.)"""
  return jax.device_put(np.asarray(x, dtype))


def _row_parts(rows: list[int], cap: int) -> list[list[int]]:
  """rows split into power-of-two groups (the shapes prefill compiles): padded (repeating the
  first row) when that wastes at most a quarter of the group, else the largest power of two
  below goes alone and the rest is split again (37 rows: 32 + 4 + 1, not 64). At most cap
  rows a group (the slot count, which need not be a power of two)."""
  parts = []
  while rows:
    n, p = len(rows), min(_pow2(len(rows)), cap)
    if p - n <= p // 4:
      parts.append(rows + [rows[0]] * (p - n))
      break
    h = _pow2(n) // 2   # < n
    parts.append(rows[:h])
    rows = rows[h:]
  return parts


class RolloutEngine:
  """Batched multi-turn generation with a search tool. See docs/rollout.md."""

  def __init__(self, model_cfg: ModelConfig, tokenizer: Tokenizer, rollout_cfg=None,
               retriever=None, sharder: Optional[Sharder] = None):
    self.model_cfg = model_cfg
    self.tok = tokenizer
    self.cfg = rollout_cfg if rollout_cfg is not None else get_rollout_config()
    self.retriever = retriever
    self.sharder = sharder
    self.dtype = jnp.dtype(self.cfg.dtype)
    self.cache_dtype = jnp.dtype(self.cfg.cache_dtype)
    self._tables: dict[tuple[str, ...], S.StopTables] = {}
    # bytes of every id the model can sample (ids past the tokenizer's vocab have none)
    self._token_bytes = list(tokenizer.token_bytes) + [b""] * (
        model_cfg.vocab_size - tokenizer.vocab_size)
    self.stats: dict[str, Any] = {}
    if self.cfg.kv_layout not in ("dense", "paged"):
      raise ValueError(f"rollout.kv_layout={self.cfg.kv_layout!r} unknown; use 'dense' or 'paged'")
    self.paged = self.cfg.kv_layout == "paged"
    if int(self.cfg.tail_min_batch) < 0:
      raise ValueError(f"rollout.tail_min_batch={self.cfg.tail_min_batch} must be >= 0 "
                       f"(the smallest batch the tail shrinks to; 0 = never shrink)")
    if tokenizer.vocab_size > model_cfg.vocab_size:
      raise ValueError(f"tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size "
                       f"is {model_cfg.vocab_size}; use the tokenizer of this checkpoint")

  # -- public API ----------------------------------------------------------------------------
  def generate(self, params, prompts: Sequence[Prompt], rng: jax.Array, *,
               stop: Optional[Sequence[str]] = None, use_search: Optional[bool] = None,
               temperature: Optional[float] = None, top_p: Optional[float] = None,
               top_k: Optional[int] = None,
               max_new_tokens: Optional[int | Sequence[int]] = None,
               metas: Optional[Sequence[dict]] = None) -> list[Trajectory]:
    """One Trajectory per prompt, in order. Prompts are raw strings, chat message lists or
    token-id lists; None arguments (and max_new_tokens=0) take the rollout config's values.
    max_new_tokens may also be one budget per prompt (a sequence as long as `prompts`)."""
    c = self.cfg
    run = _Run(
        stops=tuple(c.stop if stop is None else stop),
        use_search=c.use_search if use_search is None else use_search,
        sampling=S.SamplingParams(
            float(c.temperature if temperature is None else temperature),
            float(c.top_p if top_p is None else top_p), int(c.top_k if top_k is None else top_k)),
        max_new=0)
    if isinstance(max_new_tokens, (list, tuple, np.ndarray)):
      if len(max_new_tokens) != len(prompts):
        raise ValueError(f"max_new_tokens has {len(max_new_tokens)} budgets for "
                         f"{len(prompts)} prompts; give one per prompt or a single int")
      budgets = [int(m or c.max_response_tokens) for m in max_new_tokens]
    else:
      budgets = [int(max_new_tokens or c.max_response_tokens)] * len(prompts)  # None / 0: config
    if any(m < 0 for m in budgets):
      raise ValueError(f"max_new_tokens must be positive, got {min(budgets)}")
    run.max_new = max(budgets, default=0)
    queue = collections.deque()
    for i, p in enumerate(prompts):
      ids, truncated = self._prompt_ids(p)
      meta = dict(metas[i]) if metas else {}
      meta["prompt_truncated"] = truncated
      queue.append(_Row(i, ids, budgets[i], list(ids), meta=meta,
                        open_prefix=self._open_prefix(ids)))
    params = jax.tree.map(  # cast once, not on every decode step
        lambda x: x.astype(self.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, params)
    return self._loop(params, queue, len(prompts), rng, run)

  # -- setup helpers -------------------------------------------------------------------------
  def _prompt_ids(self, prompt: Prompt) -> tuple[list[int], bool]:
    ids = self.tok.prompt_ids(prompt)
    if not ids:
      raise ValueError("empty prompt: a prompt needs at least one token")
    cap = int(self.cfg.max_prompt_tokens)
    return (ids[-cap:], True) if len(ids) > cap else (ids, False)

  def _open_prefix(self, ids: list[int]) -> str:
    """The prompt's tail from its last `search_open` when that block is still open (a prompt
    that pre-fills `<search>` in the assistant turn), else ""."""
    text = self.tok.decode(ids[-256:])
    o, c = text.rfind(self.cfg.search_open), text.rfind(self.cfg.search_close)
    return text[o:] if o >= 0 and o > c else ""

  def stop_tables(self, stops: tuple[str, ...]) -> S.StopTables:
    if stops not in self._tables:
      self._tables[stops] = S.build_stop_tables(self._token_bytes, stops).to_device()
    return self._tables[stops]

  def _batch_size(self, n: int) -> int:
    B = int(self.cfg.batch_size)
    data = self.sharder.axis_size("act_batch") if self.sharder is not None else 1
    if B % data:
      raise ValueError(f"rollout.batch_size={B} must be divisible by the data axes ({data})")
    return B if n >= B else min(B, max(_pow2(n), data))

  def _cache_len(self, need: int, current: int, cap: int) -> int:
    size = max(int(self.cfg.cache_min_len), current)
    while size < need:
      size *= 2
    return min(size, cap) if need <= cap else size

  # -- the main loop -------------------------------------------------------------------------
  def _loop(self, params, queue, n, rng, run: "_Run") -> list[Trajectory]:
    c = self.cfg
    B = self._batch_size(n)
    tables = self.stop_tables(run.stops)
    eos_E = jnp.asarray(list(self.tok.eos_ids) or [-1], jnp.int32)
    steps = int(c.steps_per_call)  # fixed: one compiled loop whatever max_new_tokens is
    run.cap = int(c.max_prompt_tokens) + run.max_new + int(c.prefill_chunk) + 1
    # fused q/k/v and gate/up GEMMs when unsharded (decode_step.decode_params)
    dparams = S.make_decode_params(self.model_cfg, params, self.dtype, self.sharder is None)
    window = tables.prefix_VM.shape[1]
    if self.paged:
      st = self._init_paged(B, run, window)
    else:
      st = S.init_state(self.model_cfg, B, self._cache_len(0, 0, run.cap), window,
                        self.cache_dtype, self.sharder)
    rows: list[Optional[_Row]] = [None] * B
    out: list[Optional[Trajectory]] = [None] * n
    stats = collections.Counter()
    run.stats = stats
    self._run = run
    compiles.install()
    compiled0 = compiles.snapshot()
    t0, call = time.perf_counter(), 0
    while True:
      tp = time.perf_counter()
      if self.paged:
        self._plan_pages(rows, queue, run, steps)
      else:
        for b in range(B):
          if rows[b] is None and queue:
            rows[b] = queue.popleft()
      live = [b for b in range(B) if rows[b] is not None]
      if live and not queue:
        st, rows = self._shrink(st, rows, live, run)
        B = len(rows)
        live = [b for b in range(B) if rows[b] is not None]
      stats["plan_s"] += time.perf_counter() - tp
      if not live:
        break
      tp = time.perf_counter()
      st = self._prefill_pending(params, st, rows, run)
      jax.block_until_ready(st.tok_B)   # so that prefill_s holds the prefill's device time
      stats["prefill_s"] += time.perf_counter() - tp
      tp = time.perf_counter()
      limit = np.array([self._limit(b, r, run, steps) for b, r in enumerate(rows)], np.int32)
      need = max(rows[b].pos + int(limit[b]) + 1 for b in live)
      st = self._fit_cache(st, need, run)
      exit_after = max(1, math.ceil(float(c.refill_fraction) * len(live)))
      pos0 = np.array([r.pos if r is not None else 0 for r in rows], np.int64)
      stats["plan_s"] += time.perf_counter() - tp
      td = time.perf_counter()
      st, res = S.decode(self.model_cfg, st, dparams, tables, eos_E, _put(limit > 0),
                         _put(limit), jnp.int32(exit_after), jax.random.fold_in(rng, call),
                         num_steps=steps, sampling=run.sampling, dtype=self.dtype,
                         sharder=self.sharder, attn_impl=str(c.decode_attention))
      jax.block_until_ready(res.steps)
      stats["decode_s"] += time.perf_counter() - td
      td = time.perf_counter()
      res = jax.device_get(res)
      stats["transfer_s"] += time.perf_counter() - td
      stats["decode_calls"] += 1
      stats["decode_steps"] += int(res.steps)
      stats["slot_steps"] += int(res.steps) * B
      stats["policy_tokens"] += int(res.count_B.sum())
      # slot-steps without a token: a row that finished (stop, eos, limit) before the call
      # ended waits for it; an empty (or page-blocked) slot makes nothing for the whole call
      ran = limit > 0
      stats["wait_slot_steps"] += int(((int(res.steps) - res.count_B) * ran).sum())
      stats["empty_slot_steps"] += int(res.steps) * int((~ran).sum())
      self._count_kv_reads(st, pos0, ran, res, stats)
      call += 1
      ta = time.perf_counter()
      searching = self._absorb(rows, res, run, out)
      stats["absorb_s"] += time.perf_counter() - ta
      if searching:
        self._search(rows, searching, run, out, stats)
    stats["wall_s"] = time.perf_counter() - t0
    n, secs, by_fn = compiles.since(compiled0)
    stats["compiles"], stats["compile_s"] = n, secs
    self.compiled_functions = by_fn
    self.stats = _summary(stats)
    return out

  def _shrink(self, st, rows, live: list[int], run: "_Run"):
    """With no prompt queued and at most half the slots holding rows, halves the batch (again
    while that holds) down to rollout.tail_min_batch rows (0: never): the live rows move to the
    first slots (dense: their cache rows are copied; paged: only table rows move) and the next
    decode calls run on the smaller batch, whose steps cost less. Each batch size compiles its
    own programs once. Outputs are unchanged (greedy rollouts equal, tests/test_rollout_shrink.py);
    sampled tokens draw other random numbers, as any change of slot would."""
    floor = int(self.cfg.tail_min_batch)
    B = B2 = len(rows)
    data = self.sharder.axis_size("act_batch") if self.sharder is not None else 1
    while floor and B2 % 2 == 0 and B2 // 2 >= max(floor, len(live)) and (B2 // 2) % data == 0:
      B2 //= 2
    if B2 == B:
      return st, rows
    pad = B2 - len(live)
    if self.paged:
      assert all(run.alloc.owned[b] == 0 for b in range(B) if rows[b] is None)
      run.alloc.take_rows(live, B2)
    st = S.take_rows(st, _put(live + [live[0]] * pad, np.int32),
                     _put([True] * len(live) + [False] * pad, bool), sharder=self.sharder)
    run.stats["batch_shrinks"] += 1
    run.stats["batch_min"] = B2
    return st, [rows[b] for b in live] + [None] * pad

  def _count_kv_reads(self, st, pos0, ran, res, stats) -> None:
    """KV slots the decode attention read in this call (`kv_read_slot_steps`) against the slots
    the rows that made a token needed (`kv_used_slot_steps`: pos + 1 at each of their steps).
    Dense attention reads B x S slots a step (counted so for "cudnn" too, whose kernel may skip
    blocks past a row's length); paged "gather" B x (its table columns x
    page_size); paged "pallas" each row's own pos + 1 (a row that is done stays at its last
    position; an empty slot is counted as one slot). A count, not a timing: the same on every
    backend."""
    n, steps = res.count_B.astype(np.int64), int(res.steps)
    n = n * ran
    stats["kv_used_slot_steps"] += int((n * (pos0 + 1) + n * (n - 1) // 2).sum())
    B = len(pos0)
    if not self.paged:
      stats["kv_read_slot_steps"] += steps * B * int(st.cache["k"][0].shape[2])
    elif str(self.cfg.decode_attention) == "pallas":
      # a row's length grows while it runs, then stays: sum over steps of pos0 + min(i, n) + 1
      grown = n * (n - 1) // 2 + (steps - n) * n
      stats["kv_read_slot_steps"] += int((steps * (pos0 + 1) + grown).sum())
    else:
      stats["kv_read_slot_steps"] += steps * B * int(st.cache["table"].shape[1]) * int(
          self.cfg.page_size)

  def _limit(self, b: int, r: Optional[_Row], run: "_Run", steps: int) -> int:
    """Tokens row b may generate in the next call (0: inactive)."""
    if r is None or r.blocked:
      return 0
    lim = min(r.budget, steps)
    if self.paged:   # the row's pages must hold slots up to pos + limit (see _plan_pages)
      lim = min(lim, run.alloc.capacity(b) - r.pos - 1)
    return max(lim, 0)

  # -- paged KV cache (docs/rollout.md, "Paged KV cache") --------------------------------------
  def _init_paged(self, B: int, run: "_Run", window: int) -> S.DecodeState:
    c = self.cfg
    ps = int(c.page_size)
    cols = _pow2(-(-run.cap // ps))   # a power of two: every attended width divides evenly
    max_tokens = int(c.kv_max_tokens) or B * run.cap
    max_pages = 1 + -(-max_tokens // ps)
    first = min(max_pages, 1 + -(-B * int(c.cache_min_len) // ps))
    run.alloc = PageAllocator(B, ps, cols, max(first, 2), max(max_pages, 2))
    run.admitted = 0
    return S.init_paged_state(self.model_cfg, B, run.alloc.num_pages, ps, 1, window,
                              self.cache_dtype, self.sharder)

  def _ensure(self, alloc: PageAllocator, b: int, tokens: int) -> bool:
    """Pages for `tokens` slots of row b, growing the pool (doubling, up to its cap) if short."""
    while not alloc.ensure(b, tokens):
      if alloc.num_pages >= alloc.max_pages:
        return False
      alloc.grow(2 * alloc.num_pages)
    return True

  def _plan_pages(self, rows, queue, run: "_Run", steps: int) -> None:
    """Gives every live row pages for its next call (prefill of its pending tokens plus up to
    `steps` decode steps, at least one step), preempting the youngest rows while no row can go
    on; then admits queued prompts into free slots while the pool has pages for them."""
    alloc = run.alloc
    while True:
      live = sorted((b for b, r in enumerate(rows) if r is not None), key=lambda b: rows[b].admitted)
      for b in live:
        r = rows[b]
        at = r.pos + max(len(r.pending) - 1, 0)        # position of tok_B after the prefill
        full = self._ensure(alloc, b, at + min(r.budget, steps) + 1)
        r.blocked = not (full or self._ensure(alloc, b, at + 2))
      if not live or not all(rows[b].blocked for b in live):
        break
      if len(live) == 1:
        raise ValueError(
            f"rollout.kv_max_tokens={self.cfg.kv_max_tokens} holds fewer tokens than one row "
            f"needs ({rows[live[0]].pos + len(rows[live[0]].pending) + 1}); raise it or set 0")
      self._preempt(rows, live[-1], queue, run)
    for b in range(len(rows)):
      if rows[b] is None and queue:
        r = queue[0]
        if not self._ensure(alloc, b, len(r.pending) + min(r.budget, steps)):
          if not any(x is not None for x in rows):
            raise ValueError(f"rollout.kv_max_tokens={self.cfg.kv_max_tokens} holds fewer "
                             f"tokens than one prompt needs; raise it or set 0")
          break
        rows[b] = queue.popleft()
        rows[b].admitted = run.admitted
        run.admitted += 1
    run.stats["kv_pages_peak"] = max(run.stats["kv_pages_peak"], alloc.pages_in_use)

  def _preempt(self, rows, b: int, queue, run: "_Run") -> None:
    """Frees row b's pages and puts it back at the head of the queue; when it is admitted again
    its whole sequence so far is prefilled (recomputed) and it continues where it was."""
    r = rows[b]
    if not r.pending:       # mid-generation: keep the stop-string segment
      r.resume_segment = bytes(r.segment)
    r.pending = r.prompt_ids + r.response
    r.pos = 0
    r.blocked = False
    run.alloc.release(b)
    rows[b] = None
    queue.appendleft(r)
    run.stats["preemptions"] += 1

  def _sync_pages(self, st: S.DecodeState, tokens: int, run: "_Run") -> S.DecodeState:
    """Device pool grown to the allocator's size; page table installed with enough columns for
    `tokens` slots and every owned page (a power of two, so few shapes compile)."""
    alloc = run.alloc
    cols = max(alloc.pages_for(tokens), max(alloc.owned), 1)
    cols = min(_pow2(cols), alloc.table.shape[1])
    table = _put(alloc.table[:, :cols])
    if st.cache["k"][0].shape[1] < alloc.num_pages:
      return S.grow_pages(st, table, num_pages=alloc.num_pages, sharder=self.sharder)
    return S.set_table(st, table)

  def _fit_cache(self, st: S.DecodeState, need: int, run: "_Run") -> S.DecodeState:
    if self.paged:
      return self._sync_pages(st, need, run)
    S_now = st.cache["k"][0].shape[2]          # dense: L buffers [B, K, S, H]
    if need <= S_now:
      return st
    return S.resize_cache(st, new_len=self._cache_len(need, S_now, run.cap),
                          sharder=self.sharder)

  def _prefill_pending(self, params, st, rows, run: "_Run") -> S.DecodeState:
    """Puts every row's pending tokens but the last in the cache; the last becomes tok_B."""
    todo = [b for b, r in enumerate(rows) if r is not None and r.pending and not r.blocked]
    if not todo:
      return st
    chunk = int(self.cfg.prefill_chunk)
    fed = {b: rows[b].pending[:-1] for b in todo}
    pieces = {b: [fed[b][i:i + chunk] for i in range(0, len(fed[b]), chunk)] for b in todo}
    bucket = lambda n: _chunk_bucket(n, _pow2(chunk))   # chunk lengths that compile
    for k in range(max([len(p) for p in pieces.values()] + [0])):
      # Rows are grouped by the bucket of their own piece's length, one call per bucket: a
      # 100-token observation is not padded to the 512 of another row's (rows never interact).
      by_T: dict[int, list[int]] = {}
      for b in todo:
        if len(pieces[b]) > k:
          by_T.setdefault(bucket(len(pieces[b][k])), []).append(b)
      for T, group in sorted(by_T.items()):
        starts = [rows[b].pos + k * chunk for b in group]
        st = self._fit_cache(st, max(starts) + T, run)
        for idx in _row_parts(group, len(rows)):
          st = self._prefill_call(params, st, rows, pieces, k, chunk, T, idx, group, run)
    tok = {b: rows[b].pending[-1] for b in todo}
    for b in todo:
      rows[b].pos += len(rows[b].pending) - 1
      rows[b].pending = []
      rows[b].segment = bytearray()
    # Row lists padded to all B slots (repeating the first row with its own values), so that
    # set_rows / set_windows compile once, not once per count of rows.
    idx = todo + [todo[0]] * (len(rows) - len(todo))
    st = S.set_rows(st, _put(idx, np.int32), _put([tok[b] for b in idx], np.int32),
                    _put([rows[b].pos for b in idx], np.int32), _put(np.ones((len(idx),), bool)))
    resumed = [b for b in todo if rows[b].resume_segment is not None]
    if resumed:   # rows preempted mid-generation: restore their segment and stop window
      M = st.window_BM.shape[1]
      win = {}
      for b in resumed:
        seg = rows[b].resume_segment
        rows[b].segment = bytearray(seg)
        rows[b].resume_segment = None
        tail = np.frombuffer(seg[-M:], np.uint8) if M else np.zeros(0, np.uint8)
        win[b] = np.full((M,), PAD, np.int16)
        win[b][M - len(tail):] = tail
      idx = resumed + [resumed[0]] * (len(rows) - len(resumed))
      st = S.set_windows(st, _put(idx, np.int32), _put(np.stack([win[b] for b in idx])))
    return st

  def _prefill_call(self, params, st, rows, pieces, k, chunk, T, idx, group, run):
    """One prefill_rows call: piece k of the rows in idx (a power of two of them, the first
    repeated as padding), padded to T tokens."""
    toks = np.zeros((len(idx), T), np.int32)
    for i, b in enumerate(idx):
      piece = pieces[b][k]
      toks[i, :len(piece)] = piece
    start = np.array([rows[b].pos + k * chunk for b in idx], np.int32)
    st = S.prefill_rows(self.model_cfg, st, params, _put(idx, np.int32), _put(toks),
                        _put(start), dtype=self.dtype, sharder=self.sharder)
    run.stats["prefill_calls"] += 1
    run.stats["prefill_tokens"] += sum(len(pieces[b][k]) for b in set(idx))
    run.stats["prefill_computed"] += len(idx) * T
    return st

  def _absorb(self, rows, res: S.DecodeOut, run: "_Run", out) -> list[int]:
    """Appends each row's new tokens; finalizes finished rows; returns rows waiting to search."""
    searching = []
    tb = self._token_bytes
    for b, r in enumerate(rows):
      if r is None:
        continue
      n = int(res.count_B[b])
      toks = res.tokens_BN[b, :n].tolist()
      r.response += toks
      r.mask += [1] * n
      r.logprobs += res.logprobs_BN[b, :n].tolist()
      r.segment += b"".join(tb[t] for t in toks)
      r.budget -= n
      r.pos += n
      why = int(res.reason_B[b])
      if why == S.EOS:
        self._finish(rows, b, "eos", out)
      elif why == S.STOPPED:
        _, s = S.first_stop_end(bytes(r.segment), run.stops)
        if s == self.cfg.search_close and run.use_search:
          if len(r.queries) >= int(self.cfg.max_searches):
            self._finish(rows, b, "max_searches", out)
          elif r.budget <= 0:
            self._finish(rows, b, "length", out)
          else:
            searching.append(b)
        else:
          self._finish(rows, b, pf.STOP_REASON_OF.get(s, "stop"), out)
      elif r.budget <= 0:
        self._finish(rows, b, "length", out)
    return searching

  def _search(self, rows, searching: list[int], run: "_Run", out, stats) -> None:
    c = self.cfg
    tq = time.perf_counter()
    queries = [pf.extract_query(rows[b].open_prefix + self.tok.decode(rows[b].response),
                                c.search_open, c.search_close) for b in searching]
    ts = time.perf_counter()
    stats["splice_s"] += ts - tq
    results = self._run_searches(queries)
    stats["search_s"] += time.perf_counter() - ts
    stats["searches"] += len(searching)
    ts = time.perf_counter()
    for b, res in zip(searching, results):
      r = rows[b]
      r.queries.append(res.query)
      r.docs.append(res.docs)
      r.failed += int(res.failed)
      if len(res.obs_ids) >= r.budget:  # no room to continue after the observation
        self._finish(rows, b, "length", out)
        continue
      r.pending = [r.response[-1]] + res.obs_ids   # the stop token is not in the cache yet
      r.response += res.obs_ids
      r.mask += [0] * len(res.obs_ids)
      r.logprobs += [0.0] * len(res.obs_ids)
      r.budget -= len(res.obs_ids)
      stats["obs_tokens"] += len(res.obs_ids)
    stats["splice_s"] += time.perf_counter() - ts

  def _run_searches(self, queries: list[Optional[str]]) -> list[SearchResult]:
    """One batched retriever call; on several processes process 0 makes it and broadcasts the
    results, so every process splices the same observations (a timeout or a retried HTTP
    call could otherwise differ between processes)."""
    c = self.cfg
    search = lambda: [dataclasses.asdict(r) for r in run_searches(
        self.retriever, self.tok, queries, topk=int(c.topk),
        max_obs_tokens=int(c.max_obs_tokens), timeout_s=float(c.search_timeout_s))]
    return [SearchResult(**r) for r in multihost.broadcast_from_first(search)]

  def _finish(self, rows, b: int, reason: str, out) -> None:
    r = rows[b]
    if self.paged:
      self._run.alloc.release(b)
    out[r.index] = Trajectory(
        prompt_ids=r.prompt_ids, response_ids=r.response, loss_mask=r.mask,
        logprobs=r.logprobs, text=self.tok.decode(r.response, skip_special=True),
        queries=r.queries, docs=r.docs, num_searches=len(r.queries),
        num_failed_searches=r.failed, stop_reason=reason, meta=r.meta)
    rows[b] = None


def _summary(stats) -> dict:
  """engine.stats: the counters plus derived figures (docs/rollout.md, "engine.stats")."""
  out = dict(stats)
  timed = sum(out.get(k, 0.0) for k in ("plan_s", "prefill_s", "decode_s", "transfer_s",
                                         "absorb_s", "search_s", "splice_s"))
  out["other_s"] = max(out["wall_s"] - timed, 0.0)
  if out.get("decode_steps"):
    out["decode_ms_per_step"] = 1000.0 * out["decode_s"] / out["decode_steps"]
    out["occupancy"] = out.get("policy_tokens", 0) / out["slot_steps"]
  if out.get("kv_used_slot_steps"):
    out["kv_read_over_used"] = out["kv_read_slot_steps"] / out["kv_used_slot_steps"]
  return out


@dataclasses.dataclass
class _Run:
  """Settings of one `generate` call."""
  stops: tuple[str, ...]
  use_search: bool
  sampling: S.SamplingParams
  max_new: int
  cap: int = 0
  alloc: Optional[PageAllocator] = None   # paged layout only
  admitted: int = 0
  stats: Any = None
