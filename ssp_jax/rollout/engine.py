"""The multi-turn rollout engine with tools and continuous refill of the decode batch.

    engine = RolloutEngine(model_cfg, tokenizer, get_rollout_config(), retriever, sharder)
    trajs, stats = engine.generate(params, prompts, jax.random.key(0))

B slots (cache rows) decode together in one jitted `lax.while_loop` (sampling/loop.py). Rows are
independent (slot == position per row), so the host can, between calls, (1) fill a free slot with
the next pending prompt, (2) splice a tool's observation into a row that stopped on the tool's
trigger (`</search>`); both prefill only that row's new chunk. A call returns once
`refill_fraction` of its rows finished, so waiting or finished rows never hold the others back
for long and never force a recompute. Slot and page planning: rollout/slots.py; prefill:
rollout/prefill.py; tools: rollout/tools.py (search: rollout/search_tool.py); counters:
rollout/stats.py. Everything of one call lives in that call (`_Call`), nothing on the engine.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import math
import time
from typing import Any, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from models.config import ModelConfig
from models.sharding import Sharder
from ssp_jax import prompts_format as pf
from ssp_jax import sampling as S
from ssp_jax.rollout import ahead as ahead_mod, compiles, stats as rstats
from ssp_jax.rollout.config import get_rollout_config
from ssp_jax.rollout.prefill import piece_parts, piece_sizes, prefill_pending
from ssp_jax.rollout.rows import Row, put
from ssp_jax.rollout.search_tool import SearchTool
from ssp_jax.rollout.slots import SlotPlanner, batch_size, table_width
from ssp_jax.rollout.tools import Tool, ToolCall, tool_table
from ssp_jax.sampling import head_pallas as HP
from ssp_jax.sampling.decode_step import MATMULS
from ssp_jax.sampling.paged import PAGED_ATTN_IMPLS
from ssp_jax.sampling.paged_prefill import PREFILL_ATTN
from ssp_jax.tokenizer import Prompt, Tokenizer
from ssp_jax.types import Trajectory


class Rollout(NamedTuple):
  """What `generate` returns: `trajs, stats = engine.generate(...)`."""
  trajectories: list[Trajectory]   # one per prompt, in order
  stats: dict[str, Any]            # counters and timings of the call (docs/rollout.md);
                                   # "compiled_functions": {function name: compilations}


@dataclasses.dataclass
class _Call:
  """Settings and state of one `generate` call."""
  stops: tuple[str, ...]
  tools: dict[str, Tool]           # trigger -> tool ({} when tools are off for the call)
  sampling: S.SamplingParams
  stats: collections.Counter
  slots: Optional[SlotPlanner] = None


class RolloutEngine:
  """Batched multi-turn generation with tools (default: search). See docs/rollout.md.

  `tools`: the tools of every call (`ssp_jax.rollout.tools.Tool`); None: one `SearchTool` over
  `retriever`, configured by `rollout_cfg`."""

  def __init__(self, model_cfg: ModelConfig, tokenizer: Tokenizer, rollout_cfg=None,
               retriever=None, sharder: Optional[Sharder] = None,
               tools: Optional[Sequence[Tool]] = None):
    self.model_cfg = model_cfg
    self.tok = tokenizer
    self.cfg = rollout_cfg if rollout_cfg is not None else get_rollout_config()
    self.retriever = retriever
    self.sharder = sharder
    self.tools = tool_table(tools if tools is not None
                            else [SearchTool(retriever, tokenizer, self.cfg)])
    self.dtype = jnp.dtype(self.cfg.dtype)
    self.cache_dtype = jnp.dtype(self.cfg.cache_dtype)
    self._tables: dict[tuple[str, ...], S.StopTables] = {}   # a cache, the same for every call
    self._pool_sizes: dict[tuple[int, int, int], int] = {}   # fixed pools so far (slots.py)
    # bytes of every id the model can sample (ids past the tokenizer's vocab have none)
    self._token_bytes = list(tokenizer.token_bytes) + [b""] * (
        model_cfg.vocab_size - tokenizer.vocab_size)
    if "auto" in (str(self.cfg.kv_layout), str(self.cfg.decode_attention),
                  str(self.cfg.get("prefill_attention", "xla"))):
      self.cfg = self.cfg.copy_and_resolve_references()
      with self.cfg.unlocked():
        if str(self.cfg.kv_layout) == "auto":
          self.cfg.kv_layout = "paged" if self._pallas_here() else "dense"
        if str(self.cfg.decode_attention) == "auto":
          # RoPE in the dense kernel: its single-turn step 4% faster on one H100; the paged
          # kernel's multi-turn step was not faster with it (bench/RESULTS.md, 2026-12-06)
          rope = "pallas_rope" if self.cfg.kv_layout == "dense" else "pallas"
          self.cfg.decode_attention = rope if self._pallas_here() else "einsum"
        if str(self.cfg.get("prefill_attention", "xla")) == "auto":   # cuDNN takes bf16/fp16
          half = self.dtype in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
          self.cfg.prefill_attention = "cudnn" if self._pallas_here() and half else "xla"
    if self.cfg.get("prefill_attention", "xla") not in PREFILL_ATTN:
      raise ValueError(f"rollout.prefill_attention={self.cfg.prefill_attention!r} unknown; use "
                       f"one of {PREFILL_ATTN} or 'auto'")
    if self.cfg.kv_layout not in ("dense", "paged"):
      raise ValueError(f"rollout.kv_layout={self.cfg.kv_layout!r} unknown; use 'dense', 'paged' "
                       "or 'auto'")
    known = S.ATTN_IMPLS + (PAGED_ATTN_IMPLS if self.cfg.kv_layout == "paged" else ())
    if str(self.cfg.decode_attention) not in known:   # else a trace-time error, or (paged) gather
      raise ValueError(f"rollout.decode_attention={self.cfg.decode_attention!r} is not a decode "
                       f"attention of the {self.cfg.kv_layout} layout (rollout.kv_layout); use "
                       f"one of {sorted(set(known))} or 'auto'")
    if self.cfg.kv_pool not in ("fixed", "grow"):
      raise ValueError(f"rollout.kv_pool={self.cfg.kv_pool!r} unknown; use 'fixed' or 'grow'")
    if int(self.cfg.get("decode_unroll", 1)) < 1:
      raise ValueError(f"rollout.decode_unroll={self.cfg.decode_unroll} must be >= 1 (decode "
                       f"steps per while-loop iteration; 1 = one)")
    head = str(self.cfg.get("decode_head", "xla"))
    if head not in S.HEADS:
      raise ValueError(f"rollout.decode_head={head!r} unknown; use one of {S.HEADS}")
    if head == "pallas" and not self._unsplit("act_batch", "act_vocab", "vocab"):
      raise ValueError("rollout.decode_head='pallas' runs one unpartitioned kernel: the mesh "
                       "splits the rows or the vocabulary; use rollout.decode_head='xla'")
    if head == "pallas" and model_cfg.hidden_size % 16:
      raise ValueError(f"rollout.decode_head='pallas' needs a hidden size that is a multiple of "
                       f"16 (Triton's dots), not {model_cfg.hidden_size}; use "
                       f"rollout.decode_head='xla'")
    if head == "pallas" and jax.default_backend() not in ("gpu", "cpu"):
      raise ValueError(f"rollout.decode_head='pallas' is a Triton kernel (GPUs; interpret mode "
                       f"on a CPU), not for {jax.default_backend()!r}; use "
                       f"rollout.decode_head='xla'")
    matmul = str(self.cfg.get("decode_matmul", "xla"))
    if matmul not in MATMULS:
      raise ValueError(f"rollout.decode_matmul={matmul!r} unknown; use one of {MATMULS}")
    if matmul != "xla" and not self._unsplit("act_batch", "q_heads", "kv_heads", "mlp",
                                             "embed"):
      raise ValueError(f"rollout.decode_matmul={matmul!r} runs unpartitioned kernels: the mesh "
                       f"splits the rows, heads, MLP or hidden size; use "
                       f"rollout.decode_matmul='xla'")
    if matmul != "xla" and jax.default_backend() not in ("gpu", "cpu"):
      raise ValueError(f"rollout.decode_matmul={matmul!r} is a Triton kernel (GPUs; interpret "
                       f"mode on a CPU), not for {jax.default_backend()!r}; use "
                       f"rollout.decode_matmul='xla'")
    if int(self.cfg.tail_min_batch) < 0:
      raise ValueError(f"rollout.tail_min_batch={self.cfg.tail_min_batch} must be >= 0 "
                       f"(the smallest batch the tail shrinks to; 0 = never shrink)")
    if tokenizer.vocab_size > model_cfg.vocab_size:
      raise ValueError(f"tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size "
                       f"is {model_cfg.vocab_size}; use the tokenizer of this checkpoint")

  # -- public API ----------------------------------------------------------------------------
  def _pallas_here(self) -> bool:
    """Whether the "auto" settings take the Pallas kernels: on a GPU when no mesh axis splits
    the rows or heads. Then decode_attention="auto" is "pallas" ("pallas_rope" on the dense
    layout; else the batched GEMMs, "einsum"; "gather" for the paged layout) and
    kv_layout="auto" is "paged" (else "dense").
    On one H200 the dense kernel's step was 1.23x the einsum one at 0.5B and 1.11x at 7B, and
    the paged layout with its kernel the fastest multi-turn one (bench/RESULTS.md)."""
    one = self._unsplit("act_batch", "q_heads", "kv_heads", "mlp")
    return one and jax.default_backend() == "gpu"

  def _can_fuse(self) -> bool:
    """Fused q/k/v and gate/up decode weights (decode_step.decode_params) unless the heads or
    the MLP are split over a mesh axis (a one-device mesh splits nothing)."""
    return self._unsplit("q_heads", "kv_heads", "mlp")

  def _unsplit(self, *axes: str) -> bool:
    """No mesh axis splits these logical axes (no sharder, or each of them of size 1)."""
    return self.sharder is None or all(self.sharder.axis_size(a) == 1 for a in axes)

  def generate(self, params, prompts: Sequence[Prompt], rng: jax.Array, *,
               stop: Optional[Sequence[str]] = None, use_search: Optional[bool] = None,
               temperature: Optional[float] = None, top_p: Optional[float] = None,
               top_k: Optional[int] = None,
               max_new_tokens: Optional[int | Sequence[int]] = None,
               metas: Optional[Sequence[dict]] = None) -> Rollout:
    """A Rollout: one Trajectory per prompt, in order, and the call's stats. Prompts are raw
    strings, chat message lists or token-id lists; None arguments (and max_new_tokens=0) take
    the rollout config's values. max_new_tokens may also be one budget per prompt (a sequence
    as long as `prompts`). use_search=False turns the tools off: their triggers just stop."""
    c = self.cfg
    on = c.use_search if use_search is None else use_search
    call = _Call(
        stops=tuple(c.stop if stop is None else stop), tools=self.tools if on else {},
        sampling=S.SamplingParams(
            float(c.temperature if temperature is None else temperature),
            float(c.top_p if top_p is None else top_p), int(c.top_k if top_k is None else top_k),
            str(c.get("sampler", "inverse_cdf"))),
        stats=collections.Counter())
    if (str(c.get("decode_head", "xla")) == "pallas"
        and not HP.eligible(call.sampling, self.model_cfg.hidden_size)):
      raise ValueError(f"rollout.decode_head='pallas' draws without top-k / top-p and with "
                       f"rollout.sampler='inverse_cdf' (this call: {call.sampling}); use "
                       f"rollout.decode_head='xla'")
    budgets = self._budgets(max_new_tokens, len(prompts))
    queue = collections.deque()
    for i, p in enumerate(prompts):
      ids, truncated = self._prompt_ids(p)
      meta = dict(metas[i]) if metas else {}
      meta["prompt_truncated"] = truncated
      queue.append(Row(i, ids, budgets[i], list(ids), meta=meta))
    params = jax.tree.map(  # cast once, not on every decode step
        lambda x: x.astype(self.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, params)
    compiles.install()
    compiled0 = compiles.snapshot()
    t0 = time.perf_counter()
    trajs = self._loop(params, queue, len(prompts), max(budgets, default=0), rng, call)
    call.stats["wall_s"] = time.perf_counter() - t0
    n, secs, by_fn = compiles.since(compiled0)
    call.stats["compiles"], call.stats["compile_s"] = n, secs
    return Rollout(trajs, dict(rstats.summary(call.stats), compiled_functions=by_fn))

  # -- setup helpers -------------------------------------------------------------------------
  def _budgets(self, max_new_tokens, n: int) -> list[int]:
    c = self.cfg
    if isinstance(max_new_tokens, (list, tuple, np.ndarray)):
      if len(max_new_tokens) != n:
        raise ValueError(f"max_new_tokens has {len(max_new_tokens)} budgets for "
                         f"{n} prompts; give one per prompt or a single int")
      budgets = [int(m or c.max_response_tokens) for m in max_new_tokens]
    else:
      budgets = [int(max_new_tokens or c.max_response_tokens)] * n  # None / 0: config
    if any(m < 0 for m in budgets):
      raise ValueError(f"max_new_tokens must be positive, got {min(budgets)}")
    return budgets

  def _prompt_ids(self, prompt: Prompt) -> tuple[list[int], bool]:
    ids = self.tok.prompt_ids(prompt)
    if not ids:
      raise ValueError("empty prompt: a prompt needs at least one token")
    cap = int(self.cfg.max_prompt_tokens)
    return (ids[-cap:], True) if len(ids) > cap else (ids, False)

  def stop_tables(self, stops: tuple[str, ...]) -> S.StopTables:
    if stops not in self._tables:
      self._tables[stops] = S.build_stop_tables(self._token_bytes, stops).to_device()
    return self._tables[stops]

  # -- the main loop -------------------------------------------------------------------------
  def _loop(self, params, queue, n: int, max_new: int, rng, call: _Call) -> list[Trajectory]:
    c, stats = self.cfg, call.stats
    tables = self.stop_tables(call.stops)
    eos_E = jnp.asarray(list(self.tok.eos_ids) or [-1], jnp.int32)
    steps = int(c.steps_per_call)  # fixed: one compiled loop whatever max_new_tokens is
    cap = int(c.max_prompt_tokens) + max_new + int(c.prefill_chunk) + 1
    slots = call.slots = SlotPlanner(c, self.model_cfg, self.sharder, self.cache_dtype,
                                     batch_size(c, self.sharder, n), cap, steps, stats,
                                     self._pool_sizes)
    st = slots.init_state(tables.prefix_VM.shape[1], [len(r.pending) + r.budget for r in queue])
    # fused q/k/v and gate/up GEMMs when unsharded (decode_step.decode_params)
    dparams = S.make_decode_params(self.model_cfg, params, self.dtype, self._can_fuse())
    ahead = self._compile_ahead(st, dparams, tables, eos_E, rng, call, queue)
    try:
      return self._calls(params, dparams, st, tables, eos_E, queue, n, rng, call, ahead)
    finally:
      if ahead is not None:
        ahead.close()

  def _compile_ahead(self, st, dparams, tables, eos_E, rng, call: _Call,
                     queue) -> Optional[ahead_mod.CompileAhead]:
    """Starts compiling the call's paged prefill and decode programs on host threads
    (rollout.compile_ahead, rollout/ahead.py); None when off, dense or with a growing pool."""
    c, slots = self.cfg, call.slots
    n_threads = ahead_mod.threads(c.get("compile_ahead", -1))
    if not n_threads or not slots.paged or c.kv_pool != "fixed" or not queue:
      return None
    ahead = ahead_mod.CompileAhead(n_threads, call.stats)
    piece = int(c.prefill_piece)
    cap = max(1, int(c.prefill_tokens) // piece)
    data = self.sharder.axis_size("act_batch") if self.sharder is not None else 1
    # the first call's prefill: the first B prompts (all but their last token), each row with
    # pages for its prompt and its first decode call (slots._plan_pages)
    first = list(itertools.islice(queue, slots.B))
    alloc = slots.alloc
    pages = max(alloc.pages_for(len(r.pending) - 1 + min(r.budget, int(c.steps_per_call)) + 1)
                for r in first)
    n_pieces = sum(-(-(len(r.pending) - 1) // piece) for r in first)
    ahead_mod.plan_paged(
        ahead, model_cfg=self.model_cfg, st=st, dparams=dparams, tables=tables, eos_E=eos_E,
        key=jax.random.fold_in(rng, 0), sampling=call.sampling, dtype=self.dtype,
        sharder=self.sharder, attn_impl=str(c.decode_attention),
        prefill_attn=str(c.get("prefill_attention", "xla")), steps=int(c.steps_per_call),
        unroll=int(c.get("decode_unroll", 1)), head=str(c.get("decode_head", "xla")),
        matmul=str(c.get("decode_matmul", "xla")), columns=slots.alloc.table.shape[1],
        max_row_tokens=max(len(r.pending) + r.budget for r in queue),
        page_size=int(c.page_size), piece=piece,
        piece_sizes=piece_sizes(cap),
        batches=ahead_mod.tail_batches(slots.B, int(c.tail_min_batch), data),
        first_width=table_width(pages, alloc.table.shape[1]),
        first_sizes=sorted({size for _, size in piece_parts(n_pieces, cap)}),
        prefill_fn=S.prefill_pages, decode_fn=S.decode)
    return ahead

  def _calls(self, params, dparams, st, tables, eos_E, queue, n: int, rng, call: _Call,
             ahead) -> list[Trajectory]:
    """The decode calls of one `generate`, until every prompt has its trajectory."""
    c, stats, slots = self.cfg, call.stats, call.slots
    steps = int(c.steps_per_call)
    rows: list[Optional[Row]] = [None] * slots.B
    out: list[Optional[Trajectory]] = [None] * n
    for k in itertools.count():   # one decode call each
      # 1. plan: refill free slots (paged: pages, preemption), shrink the tail batch
      tp = time.perf_counter()
      slots.admit(rows, queue)
      if not queue and any(r is not None for r in rows):
        st, rows = slots.shrink(st, rows)
      live = [b for b, r in enumerate(rows) if r is not None]
      stats["plan_s"] += time.perf_counter() - tp
      if not live:
        return out
      # 2. prefill what rows wait to put in their cache (prompts, observations)
      tp = time.perf_counter()
      st = prefill_pending(self.model_cfg, params, dparams, st, rows, slots,
                           chunk=int(c.prefill_chunk), dtype=self.dtype, sharder=self.sharder,
                           stats=stats, ahead=ahead)
      jax.block_until_ready(st)   # so that prefill_s holds the prefill's device time (paged:
                                  # the pools come from prefill_pages, tok_B from set_rows)
      stats["prefill_s"] += time.perf_counter() - tp
      # 3. decode up to `steps` tokens a row, until refill_fraction of the rows finished
      tp = time.perf_counter()
      limit_B = np.array([slots.limit(b, r) for b, r in enumerate(rows)], np.int32)
      st = slots.fit_cache(st, max(rows[b].pos + int(limit_B[b]) + 1 for b in live))
      exit_after = max(1, math.ceil(float(c.refill_fraction) * len(live)))
      pos0_B = np.array([r.pos if r is not None else 0 for r in rows], np.int64)
      stats["plan_s"] += time.perf_counter() - tp
      if ahead is not None:
        ahead.wait(("decode", len(rows), st.cache["table"].shape[1]))
      td = time.perf_counter()
      st, res = S.decode(self.model_cfg, st, dparams, tables, eos_E, put(limit_B > 0),
                         put(limit_B), jnp.int32(exit_after), jax.random.fold_in(rng, k),
                         num_steps=steps, sampling=call.sampling, dtype=self.dtype,
                         sharder=self.sharder, attn_impl=str(c.decode_attention),
                         unroll=int(c.get("decode_unroll", 1)),
                         head=str(c.get("decode_head", "xla")),
                         matmul=str(c.get("decode_matmul", "xla")))
      jax.block_until_ready(res.steps)
      stats["decode_s"] += time.perf_counter() - td
      td = time.perf_counter()
      res = jax.device_get(res)
      stats["transfer_s"] += time.perf_counter() - td
      rstats.count_decode(stats, c, st, pos0_B, limit_B, res)
      # 4. take the new tokens; finish rows; call the tools of rows that stopped on a trigger
      ta = time.perf_counter()
      calling = self._absorb(rows, res, call, out)
      stats["absorb_s"] += time.perf_counter() - ta
      if calling:
        self._call_tools(rows, calling, call, out)

  def _absorb(self, rows, res: S.DecodeOut, call: _Call, out) -> list[tuple[int, Tool]]:
    """Appends each row's new tokens; finalizes finished rows; returns (slot, tool) of the rows
    that stopped on a tool's trigger and may call it."""
    calling = []
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
        self._finish(rows, b, "eos", out, call)
      elif why == S.STOPPED:
        _, s = S.first_stop_end(bytes(r.segment), call.stops)
        tool = call.tools.get(s)
        if tool is None:
          self._finish(rows, b, pf.STOP_REASON_OF.get(s, "stop"), out, call)
        elif r.calls.get(tool.name, 0) >= int(tool.max_calls):
          self._finish(rows, b, f"max_{tool.name}", out, call)
        elif r.budget <= 0:
          self._finish(rows, b, "length", out, call)
        else:
          calling.append((b, tool))
      elif r.budget <= 0:
        self._finish(rows, b, "length", out, call)
    return calling

  def _call_tools(self, rows, calling: list[tuple[int, Tool]], call: _Call, out) -> None:
    """One call per tool for all its rows; each observation is spliced after the trigger, cut
    to the row's budget. A row whose budget the observation fills ends as "length" and keeps it
    (loss-masked), as `ssp-jax generate` shows it."""
    stats = call.stats
    for tool in {id(t): t for _, t in calling}.values():
      tq = time.perf_counter()
      mine = [b for b, t in calling if t is tool]
      asks = [ToolCall(self.tok.decode(rows[b].prompt_ids[-256:]),
                       self.tok.decode(rows[b].response), rows[b].budget) for b in mine]
      ts = time.perf_counter()
      stats["splice_s"] += ts - tq
      observations = tool(asks)
      stats["search_s"] += time.perf_counter() - ts
      stats["searches"] += len(mine)
      ts = time.perf_counter()
      if len(observations) != len(mine):
        raise RuntimeError(f"tool {tool.name!r} gave {len(observations)} observations for "
                           f"{len(mine)} calls; a tool answers every call")
      for b, obs in zip(mine, observations):
        r = rows[b]
        r.calls[tool.name] = r.calls.get(tool.name, 0) + 1
        r.queries.append(obs.query)
        r.docs.append(obs.docs)
        r.failed += int(obs.failed)
        ids = list(obs.ids)[:r.budget]
        r.pending = [r.response[-1]] + ids   # the trigger's last token is not in the cache yet
        r.response += ids
        r.mask += [0] * len(ids)
        r.logprobs += [0.0] * len(ids)
        r.budget -= len(ids)
        stats["obs_tokens"] += len(ids)
        if r.budget <= 0:   # no room to continue after the observation
          self._finish(rows, b, "length", out, call)
      stats["splice_s"] += time.perf_counter() - ts

  def _finish(self, rows, b: int, reason: str, out, call: _Call) -> None:
    r = rows[b]
    call.slots.release(b)
    out[r.index] = Trajectory(
        prompt_ids=r.prompt_ids, response_ids=r.response, loss_mask=r.mask,
        logprobs=r.logprobs, text=self.tok.decode(r.response, skip_special=True),
        queries=r.queries, docs=r.docs, num_searches=len(r.queries),
        num_failed_searches=r.failed, stop_reason=reason, meta=r.meta)
    rows[b] = None
