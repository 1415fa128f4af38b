"""The SSP / Search-R1 stream format inside one assistant turn.

  <think> ... </think>
  <search> query </search>          -> the engine stops here and calls the retriever
  \\n<information>\\nDoc 1 (Title: t)\\ntext\\n...</information>\\n\\n   (spliced in, loss-masked)
  <answer> ... </answer>             (solver)   or   <question> ... </question>   (proposer)

The observation is appended to the same assistant message with no role tokens, as in SSP's
rollout; documents are rendered as veRL's search tool does.
"""
from __future__ import annotations

import re
from typing import Optional, Sequence

from retrieval.base import split_contents

SEARCH_OPEN, SEARCH_CLOSE = "<search>", "</search>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
QUESTION_OPEN, QUESTION_CLOSE = "<question>", "</question>"
INFO_OPEN, INFO_CLOSE = "<information>", "</information>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

OBS_PREFIX = "\n" + INFO_OPEN + "\n"
OBS_SUFFIX = INFO_CLOSE + "\n\n"

# Default stop strings of a search rollout, and what each one means.
DEFAULT_STOPS = (SEARCH_CLOSE, ANSWER_CLOSE, QUESTION_CLOSE)
STOP_REASON_OF = {ANSWER_CLOSE: "answer", QUESTION_CLOSE: "question"}

SEARCH_FAILED = "Search failed ({reason}); no documents were retrieved."
NO_QUERY = "No search query was found between <search> and </search>; no documents were retrieved."


def doc_title_text(doc: dict) -> tuple[str, str]:
  """(title, text) of a retrieved document: its `title`/`text` fields, else split `contents`."""
  if "title" in doc and "text" in doc:
    return str(doc["title"]), str(doc["text"])
  return split_contents(str(doc.get("contents", "")))


def render_docs(docs: Sequence[dict]) -> str:
  """`Doc i (Title: t)\\ntext\\n` per document, numbered from 1."""
  out = []
  for i, doc in enumerate(docs, 1):
    title, text = doc_title_text(doc)
    out.append(f"Doc {i} (Title: {title})\n{text.strip()}\n")
  return "".join(out)


def observation_text(body: str) -> str:
  """`\\n<information>\\n{body}</information>\\n\\n`; `body` is `render_docs(...)` or a notice."""
  if body and not body.endswith("\n"):
    body += "\n"
  return OBS_PREFIX + body + OBS_SUFFIX


_SEARCH_RE = re.compile(re.escape(SEARCH_OPEN) + r"(.*?)" + re.escape(SEARCH_CLOSE), re.DOTALL)


def extract_query(text: str, open_tag: str = SEARCH_OPEN,
                  close_tag: str = SEARCH_CLOSE) -> Optional[str]:
  """The query of the last `<search> q </search>` block of `text`, stripped; None when the text
  has no complete block or the query is empty."""
  end = text.rfind(close_tag)
  if end < 0:
    return None
  start = text.rfind(open_tag, 0, end)
  if start < 0:
    return None
  q = text[start + len(open_tag):end].strip()
  return q or None


def extract_tag(text: str, tag: str, last: bool = True) -> Optional[str]:
  """Content of the last (or first) `<tag> ... </tag>` block, stripped; None if absent."""
  found = re.findall(f"<{tag}>(.*?)</{tag}>", text, re.DOTALL)
  if not found:
    return None
  return (found[-1] if last else found[0]).strip()


def all_queries(text: str) -> list[str]:
  """Every `<search>` query of a response, in order (observation blocks excluded)."""
  text = re.sub(re.escape(INFO_OPEN) + r".*?" + re.escape(INFO_CLOSE), "", text, flags=re.DOTALL)
  return [q.strip() for q in _SEARCH_RE.findall(text)]
