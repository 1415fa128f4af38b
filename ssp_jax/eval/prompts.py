"""The solver's prompt: a question answered with the search tool (the Search-R1 instruction:
think, search, information, answer), written in our own words. The QA evaluation asks it, and the
games whose solver answers questions with search train it, so it lives here, below them.
"""
from __future__ import annotations

Messages = list[dict[str, str]]

SOLVER_STOPS = ("</search>", "</answer>")   # a search call or the final answer ends a turn

SOLVER_SYSTEM = "You are a helpful and harmless assistant."

SOLVER_USER = """\
Answer the given question. You must reason inside <think> and </think> first every time you get \
new information. If you find you lack some knowledge, you can call a search engine by \
<search> query </search>, and it will return the top search results between <information> and \
</information>. You can search as many times as you want. If you find no further external \
knowledge is needed, you can directly provide the answer inside <answer> and </answer>, without \
detailed illustrations. For example, <answer> Beijing </answer>. Question: {question}
"""


def solver_messages(question: str) -> Messages:
  """Solver prompt (the Search-R1 instruction) for one question."""
  return [{"role": "system", "content": SOLVER_SYSTEM},
          {"role": "user", "content": SOLVER_USER.format(question=question.strip())}]


CLOSED_BOOK_USER = """\
Answer the given question from your own knowledge; no search engine is available. You may reason \
inside <think> and </think> first, then give the answer inside <answer> and </answer>, without \
detailed illustrations. For example, <answer> Beijing </answer>. Question: {question}
"""


def closed_book_messages(question: str) -> Messages:
  """The solver's question without the search tool (`ssp-jax eval --closed-book`): what the
  policy recalls of a fact, e.g. near 0 on a generated world's invented names."""
  return [{"role": "system", "content": SOLVER_SYSTEM},
          {"role": "user", "content": CLOSED_BOOK_USER.format(question=question.strip())}]
