"""Prompts of the SvS game, in our own words, and extraction of a synthesised problem.

* solving (OQA, SPA, evaluation): the problem followed by the math suffix, as one user message;
* variational problem synthesis (VPS): given a solution known to be correct, write the problem it
  most plausibly answers, inside a ```text fenced block (anchors.md 2.1 describes the original's
  `prompts/variational_problem_synthesis.txt`; this is a paraphrase, not a copy).

`extract_problem` reads the synthesised problem back: the text after the last `</think>`, then the
first ```text block; fallbacks: the first bare ``` block, then the text after
"**Reconstructed Question:**". A length filter (in characters) rejects empty or runaway problems.
"""
from __future__ import annotations

import re
from typing import Optional

from ssp_jax.svs.math_grader import final_segment

Messages = list[dict[str, str]]

SOLVE_SUFFIX = " Please reason step by step, and put your final answer within \\boxed{}."

SYNTHESIS_PROMPT = """\
You are an experienced author of mathematics assessment items. Below is a worked solution that \
is known to be correct. Your job is to recover the problem that this solution most plausibly \
answers.

First study the solution: which area of mathematics it belongs to, what kind of reasoning it \
carries out, and what a student must know to write it. Then state one problem that would lead a \
careful solver to exactly this line of reasoning and to the same final answer.

The problem you write must:
- be self-contained, giving every quantity and condition that the solution relies on;
- be precise and unambiguous, with one well-defined final answer: the one the solution reaches;
- not reveal the answer or the steps of the solution;
- read like a realistic textbook or competition problem, in clear English.

Solution:
{solution}

Reply with the problem statement only, inside a fenced block that opens with ```text and closes \
with ```."""

_TEXT_BLOCK_RE = re.compile(r"```text[ \t]*\n?(.*?)```", re.DOTALL)
_BARE_BLOCK_RE = re.compile(r"```[ \t]*\n(.*?)```", re.DOTALL)
_RECONSTRUCTED_RE = re.compile(r"\*\*Reconstructed Question:?\*\*:?\s*(.+)", re.DOTALL)


def solve_text(problem: str) -> str:
  """The user message that asks for a solution (the problem plus the boxed-answer suffix)."""
  return problem.strip() + SOLVE_SUFFIX


def solve_messages(problem: str) -> Messages:
  return [{"role": "user", "content": solve_text(problem)}]


def synthesis_messages(solution: str) -> Messages:
  """The VPS prompt for one correct solution (a response of the policy)."""
  return [{"role": "user", "content": SYNTHESIS_PROMPT.format(solution=solution.strip())}]


def extract_problem(text: str, *, min_chars: int = 10,
                    max_chars: int = 2000) -> tuple[Optional[str], Optional[str]]:
  """(problem, None) or (None, reason) for one VPS response.

  Reasons: `no_block` (no fenced block nor marker found), `too_short`, `too_long` (stripped
  length outside [min_chars, max_chars]).
  """
  tail = final_segment(text or "")
  for pattern in (_TEXT_BLOCK_RE, _BARE_BLOCK_RE, _RECONSTRUCTED_RE):
    m = pattern.search(tail)
    if m:
      problem = m.group(1).strip()
      break
  else:
    return None, "no_block"
  if len(problem) < min_chars:
    return None, "too_short"
  if len(problem) > max_chars:
    return None, "too_long"
  return problem, None
