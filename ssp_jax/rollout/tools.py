"""Tools: a stop string (the trigger) mapped to an observation spliced into the same turn.

    class Calc:                       # see tests/test_rollout_tools.py
      name, trigger, max_calls = "calcs", "</calc>", 4
      def __call__(self, calls: Sequence[ToolCall]) -> list[Observation]: ...

    RolloutEngine(model_cfg, tok, rollout_cfg, tools=[SearchTool(...), Calc(tok)])

When a row stops on a tool's trigger (which must be one of the call's stop strings), the engine
hands the tool the row's text, the tool answers with observation tokens, and the engine splices
them after the trigger: prefilled into the row's KV cache, loss-masked (`loss_mask` 0, logprob
0.0), counted in the response budget. Calls of one decode round go to the tool together (one
batched retriever call for search). Nothing of a tool lives in the engine: search is one tool
(`ssp_jax.rollout.search_tool.SearchTool`, the default). On several JAX processes a tool must
answer the same on every process (search asks on process 0 and broadcasts,
`ssp_jax.rollout.multihost.broadcast_from_first`).
"""
from __future__ import annotations

import dataclasses
from typing import Protocol, Sequence


@dataclasses.dataclass(frozen=True)
class ToolCall:
  """What the engine hands a tool for one row that stopped on its trigger."""
  prompt_tail: str     # the prompt's last 256 tokens, decoded (a prompt may open the call)
  response: str        # the response so far, decoded (earlier observations included), ending
                       # with the trigger
  max_tokens: int      # response budget left: a longer observation is cut to it by the engine


@dataclasses.dataclass
class Observation:
  """A tool's answer to one call: the tokens to splice and what the trajectory records."""
  ids: list[int]                     # spliced after the trigger, loss-masked
  query: str = ""                    # what the call asked (Trajectory.queries)
  docs: list[dict] = dataclasses.field(default_factory=list)   # what it found (Trajectory.docs)
  failed: bool = False               # counted in Trajectory.num_failed_searches


class Tool(Protocol):
  name: str        # a trigger after `max_calls` calls ends the row with stop_reason f"max_{name}"
  trigger: str     # the stop string that calls the tool
  max_calls: int   # calls per trajectory

  def __call__(self, calls: Sequence[ToolCall]) -> list[Observation]:
    """One observation per call, in order. Never raises on a failing backend: the observation
    says what failed (`failed=True`)."""


def tool_table(tools: Sequence[Tool]) -> dict[str, Tool]:
  """{trigger: tool}; a ValueError naming the clash when two tools share a trigger."""
  table: dict[str, Tool] = {}
  for t in tools:
    if not t.trigger:
      raise ValueError(f"tool {t.name!r} has an empty trigger; give it a stop string")
    if t.trigger in table:
      raise ValueError(f"tools {table[t.trigger].name!r} and {t.name!r} share the trigger "
                       f"{t.trigger!r}; give each tool its own stop string")
    table[t.trigger] = t
  return table
