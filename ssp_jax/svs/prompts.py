"""Prompts of the SvS game, in our own words, and extraction of a synthesised problem.

* solving (OQA, SPA, evaluation): the problem followed by the math suffix, as one user message;
* variational problem synthesis (VPS): given a solution known to be correct, write the problem it
  most plausibly answers, inside a ```text fenced block (the original's
  `prompts/variational_problem_synthesis.txt`; ours are paraphrases, not copies). Two wordings
  (`svs.synthesis_prompt`): "original" follows the original's content (analyse topic, reasoning
  and learning objective; a realistic, explicit, unambiguous problem) and, like it, does not ask
  to hide the answer: the medium-difficulty reward does that; "no_spoilers" (ssp-jax's earlier
  wording) also asks the problem not to reveal the answer or the steps.

`extract_problem` reads the synthesised problem back: the text after the last `</think>`, then the
first ```text block; fallbacks: the first bare ``` block, then the text after
"**Reconstructed Question:**". An optional length filter in characters rejects empty or runaway
problems (`svs.problem_filter="chars"`); the original instead limits the synthetic problem's
solving prompt to `max_prompt_length` tokens (game.py, `svs.problem_filter="tokens"`).
"""
from __future__ import annotations

import re
from typing import Optional

from ssp_jax.svs.math_grader import final_segment

Messages = list[dict[str, str]]

SOLVE_SUFFIX = " Please reason step by step, and put your final answer within \\boxed{}."

SYNTHESIS_PROMPT_ORIGINAL = """\
You are an expert in educational assessment and in writing mathematics problems. Read the \
response below, produced by a model; the solution it contains is known to be correct. Write a \
variant of the original problem: the problem that would most plausibly lead to this response.

Work in three steps:
1. Identify the topic and the context that the response points to.
2. Infer what kind of reasoning or calculation it carries out.
3. Decide which educational purpose or learning objective the problem most likely serves.

Then write one clear, concise and natural original problem in English that matches the response \
precisely, reads like a realistic problem from a course or a standard curriculum, and is \
explicit, measurable and unambiguous.

Solution:
{solution}

Give your synthetic problem inside a fenced block that opens with ```text and closes with ```."""

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

SYNTHESIS_PROMPTS = {"original": SYNTHESIS_PROMPT_ORIGINAL, "no_spoilers": SYNTHESIS_PROMPT}

_TEXT_BLOCK_RE = re.compile(r"```text[ \t]*\n?(.*?)```", re.DOTALL)
_BARE_BLOCK_RE = re.compile(r"```[ \t]*\n(.*?)```", re.DOTALL)
_RECONSTRUCTED_RE = re.compile(r"\*\*Reconstructed Question:?\*\*:?\s*(.+)", re.DOTALL)


def solve_text(problem: str) -> str:
  """The user message that asks for a solution (the problem plus the boxed-answer suffix)."""
  return problem.strip() + SOLVE_SUFFIX


def solve_messages(problem: str) -> Messages:
  return [{"role": "user", "content": solve_text(problem)}]


def synthesis_messages(solution: str, prompt: str = "original") -> Messages:
  """The VPS prompt for one correct solution (a response of the policy); `prompt` names a
  wording of SYNTHESIS_PROMPTS."""
  if prompt not in SYNTHESIS_PROMPTS:
    raise ValueError(f"unknown synthesis prompt {prompt!r}; known: "
                     f"{', '.join(sorted(SYNTHESIS_PROMPTS))}")
  return [{"role": "user",
           "content": SYNTHESIS_PROMPTS[prompt].format(solution=solution.strip())}]


def extract_problem(text: str, *, min_chars: int = 10,
                    max_chars: int = 2000) -> tuple[Optional[str], Optional[str]]:
  """(problem, None) or (None, reason) for one VPS response.

  Reasons: `no_block` (no fenced block nor marker found), `too_short`, `too_long` (stripped
  length outside [min_chars, max_chars]; `min_chars=0, max_chars=0` turns the filter off, as
  the original has none).
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
  if max_chars and len(problem) > max_chars:
    return None, "too_long"
  return problem, None
