"""The search tool: `</search>` -> `<information>` documents from the retriever.

    tool = SearchTool(retriever, tokenizer, rollout_cfg)   # the engine's default tool

The query is the text between the last `rollout.search_open` and the trigger
(`rollout.search_close`); a `<search>` opened at the end of the prompt (an assistant prefill)
counts. The calls of one decode round make one batched retriever call
(`ssp_jax.rollout.observations.run_searches`: failures and timeouts become observations, never
exceptions). On several JAX processes process 0 makes the call and broadcasts the results, so
every process splices the same observations (a timeout or a retried HTTP call could otherwise
differ between processes).
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from ssp_jax import prompts_format as pf
from ssp_jax.rollout import multihost
from ssp_jax.rollout.observations import SearchResult, run_searches
from ssp_jax.rollout.tools import Observation, ToolCall
from ssp_jax.tokenizer import Tokenizer


class SearchTool:
  """Search as a `ssp_jax.rollout.tools.Tool`, configured by the `rollout` config section
  (search_open, search_close, max_searches, topk, max_obs_tokens, search_timeout_s)."""
  name = "searches"   # a `</search>` after max_searches ends the row as "max_searches"

  def __init__(self, retriever, tokenizer: Tokenizer, rollout_cfg):
    c = rollout_cfg
    self.retriever = retriever   # None: every search fails ("no retriever configured")
    self.tok = tokenizer
    self.open, self.trigger = str(c.search_open), str(c.search_close)
    self.max_calls = int(c.max_searches)
    self.topk = int(c.topk)
    self.max_obs_tokens = int(c.max_obs_tokens)   # 0 = uncut
    self.timeout_s = float(c.search_timeout_s)

  def query(self, call: ToolCall) -> Optional[str]:
    """The call's query; None when there is none (its observation says so)."""
    tail = call.prompt_tail
    o, c = tail.rfind(self.open), tail.rfind(self.trigger)
    prefix = tail[o:] if o >= 0 and o > c else ""   # a search_open the prompt left open
    return pf.extract_query(prefix + call.response, self.open, self.trigger)

  def __call__(self, calls: Sequence[ToolCall]) -> list[Observation]:
    queries = [self.query(c) for c in calls]
    caps = [min(self.max_obs_tokens, c.max_tokens) if self.max_obs_tokens > 0 else c.max_tokens
            for c in calls]   # cut to the budget here, so the closing tag is kept
    search = lambda: [dataclasses.asdict(r) for r in run_searches(
        self.retriever, self.tok, queries, topk=self.topk, max_obs_tokens=caps,
        timeout_s=self.timeout_s)]
    results = [SearchResult(**r) for r in multihost.broadcast_from_first(search)]
    return [Observation(r.obs_ids, r.query, r.docs, r.failed) for r in results]
