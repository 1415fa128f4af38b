"""Host side of a search turn: one batched retriever call, observations rendered and tokenized.

A retriever failure (RetrieverError, any exception, a timeout, a malformed answer) never raises:
every query of the call gets an observation saying the search failed, and it is counted.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
from typing import Optional, Sequence

from ssp_jax import prompts_format as pf
from ssp_jax.tokenizer import Tokenizer

log = logging.getLogger(__name__)


@dataclasses.dataclass
class SearchResult:
  query: str
  docs: list[dict]
  failed: bool
  obs_ids: list[int]


def _call_retriever(retriever, queries: list[str], topk: int,
                    timeout_s: float) -> tuple[Optional[list[list[dict]]], str]:
  """(docs per query, "") or (None, reason)."""
  if retriever is None:
    return None, "no retriever configured"
  pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
  try:
    fut = pool.submit(retriever.search, queries, topk)
    out = fut.result(timeout=timeout_s)
  except concurrent.futures.TimeoutError:
    return None, f"timed out after {timeout_s:g}s"
  except Exception as e:  # RetrieverError or anything else: a failed search, never a crash
    log.warning("retriever failed on %d queries: %s", len(queries), e)
    return None, f"{type(e).__name__}: {e}"
  finally:
    pool.shutdown(wait=False)
  if not isinstance(out, list) or len(out) != len(queries):
    return None, "the retriever returned a malformed answer"
  return out, ""


def observation_ids(tokenizer: Tokenizer, body: str, max_tokens: int) -> list[int]:
  """Tokens of `\\n<information>\\n{body}</information>\\n\\n`, the body cut so that the whole
  observation fits in `max_tokens` (the closing tag is always kept); `max_tokens <= 0`: uncut."""
  return observations_ids(tokenizer, [body], [max_tokens])[0]


def observations_ids(tokenizer: Tokenizer, bodies: Sequence[str],
                     max_tokens: Sequence[int]) -> list[list[int]]:
  """`observation_ids` of each body under its cap, in two batched tokenizer calls (the whole
  observations, then the bodies of those over their cap) instead of up to three calls an
  observation; tokenizing is most of a search round's host time (120 queries: 157 -> 98 ms on
  a 2-core CPU)."""
  full = _encode_all(tokenizer, [pf.observation_text(b) for b in bodies])
  over = [i for i, (ids, m) in enumerate(zip(full, max_tokens)) if 0 < m < len(ids)]
  if over:
    tail = tokenizer.encode("\n" + pf.OBS_SUFFIX)
    heads = _encode_all(tokenizer, [pf.OBS_PREFIX + bodies[i] for i in over])
    for i, head in zip(over, heads):
      full[i] = head[:max(int(max_tokens[i]) - len(tail), 0)] + tail
  return full


def _encode_all(tokenizer, texts: list[str]) -> list[list[int]]:
  batch = getattr(tokenizer, "encode_batch", None)   # test tokenizers may have encode only
  return batch(texts) if batch is not None else [tokenizer.encode(t) for t in texts]


def run_searches(retriever, tokenizer: Tokenizer, queries: Sequence[Optional[str]], *, topk: int,
                 max_obs_tokens: int | Sequence[int], timeout_s: float) -> list[SearchResult]:
  """One retriever call for every non-empty query; a result (and observation) per query.
  `max_obs_tokens` is one cap for all observations or one per query (see observation_ids)."""
  caps = ([int(m) for m in max_obs_tokens] if isinstance(max_obs_tokens, (list, tuple))
          else [int(max_obs_tokens)] * len(queries))
  asked = [i for i, q in enumerate(queries) if q]
  docs, reason = ([], "") if not asked else _call_retriever(
      retriever, [queries[i] for i in asked], topk, timeout_s)
  by_index = dict(zip(asked, docs)) if docs is not None else {}
  found = []   # (docs, body, failed) a query
  for i, q in enumerate(queries):
    if not q:
      found.append(([], pf.NO_QUERY, True))
    elif i in by_index:
      d = [dict(x) for x in by_index[i]]
      found.append((d, pf.render_docs(d), False))
    else:
      found.append(([], pf.SEARCH_FAILED.format(reason=reason), True))
  ids = observations_ids(tokenizer, [body for _, body, _ in found], caps)
  return [SearchResult(q or "", d, failed, obs)
          for q, (d, _, failed), obs in zip(queries, found, ids)]
