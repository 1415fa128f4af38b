"""Where a response states its final answer (SvS answer checking, step 1 of math_grader.py).

  extract_answer("... so \\boxed{5}.")            # "5"
  extract_answer("... The final answer is 5.")    # "5"   (no box: a marker fallback)
  extract_answer("Answer: 42")                    # "42"  (the DAPO "Answer:" line)

Only the response's final part is read: the text after its last `</think>` (all of it without
one). The answer is, in this order:
  1. the content of the last `\\boxed{...}` (nested braces; also `\\fbox{}` and `\\boxed 5`);
  2. the content of the last `<answer>...</answer>`;
  3. the text after the last "final answer is", "the answer is", "answer is", "answers are" or
     "answer:" marker (case-insensitive, the DAPO `Answer: X` line included), up to the end of
     that line or sentence, without `$` delimiters and a trailing period.
These are the original's non-boxed fallbacks (prime_math's `match_answer`, the DAPO verifier's
`Answer:` pattern) in our own words; anything else (no box, no marker) is left to math_verify's
own extraction on the last 300 characters (math_grader.py).
"""
from __future__ import annotations

import re
from typing import Optional

THINK_CLOSE = "</think>"
_BOX_COMMANDS = ("\\boxed", "\\fbox")
_TAG_OPEN, _TAG_CLOSE = "<answer>", "</answer>"
_MARKER_RE = re.compile(r"(?:final answer is|the answer is|answer is|answers are|answer\s*:)\s*",
                        re.IGNORECASE)
_SENTENCE_END_RE = re.compile(r"\n|\.\s+(?=[A-Z])|\.\s*$")
MAX_FALLBACK_CHARS = 200             # a longer marker answer is not an answer


def final_segment(text: str) -> str:
  """The text after the last `</think>` (all of it when there is none)."""
  i = text.rfind(THINK_CLOSE)
  return text[i + len(THINK_CLOSE):] if i >= 0 else text


def braced(text: str, start: int) -> Optional[tuple[str, int]]:
  """(content, index after the closing brace) of the `{...}` opening at text[start]."""
  if start >= len(text) or text[start] != "{":
    return None
  depth = 0
  for i in range(start, len(text)):
    if text[i] == "{":
      depth += 1
    elif text[i] == "}":
      depth -= 1
      if depth == 0:
        return text[start + 1:i], i + 1
  return None


def last_boxed(text: str) -> Optional[str]:
  """Content of the last `\\boxed{...}` / `\\fbox{...}` (or `\\boxed 5`) in `text`, or None."""
  at, cmd = max((text.rfind(c), c) for c in _BOX_COMMANDS)
  if at < 0:
    return None
  rest = text[at + len(cmd):]
  stripped = rest.lstrip()
  if stripped.startswith("{"):
    got = braced(stripped, 0)
    return got[0].strip() if got else None
  if rest[:1].isspace() and stripped:          # "\boxed 5": up to the next space or "$"
    return re.split(r"[\s$]", stripped, maxsplit=1)[0]
  return None


def last_answer_tag(text: str) -> Optional[str]:
  """The stripped content of the last `<answer>...</answer>`, or None. Found from the end with
  `rfind` (linear: a regex scan would be quadratic in a response of many unclosed tags)."""
  end = text.rfind(_TAG_CLOSE)
  start = text.rfind(_TAG_OPEN, 0, end) if end >= 0 else -1
  if start < 0:
    return None
  return text[start + len(_TAG_OPEN):end].strip() or None


def marker_answer(text: str) -> Optional[str]:
  """The answer after the last answer marker or inside the last `<answer>` tag, or None."""
  tag = last_answer_tag(text)
  if tag:
    return tag
  last = None
  for last in _MARKER_RE.finditer(text):
    pass
  if last is None:
    return None
  rest = text[last.end():]
  end = _SENTENCE_END_RE.search(rest)
  answer = (rest[:end.start()] if end else rest).strip()
  answer = answer.strip("$").strip()
  if answer.startswith("\\(") and answer.endswith("\\)"):
    answer = answer[2:-2].strip()
  if answer.startswith("\\[") and answer.endswith("\\]"):
    answer = answer[2:-2].strip()
  answer = answer.rstrip(".").strip()
  if not answer or len(answer) > MAX_FALLBACK_CHARS:
    return None
  return answer


def extract_answer(response: Optional[str], *, fallbacks: bool = True) -> Optional[str]:
  """The final answer of a response (see the module docstring), or None.

  `fallbacks=False` reads only the last boxed expression (ssp-jax's earlier, stricter rule)."""
  tail = final_segment(response or "")
  boxed = last_boxed(tail)
  if boxed is not None or not fallbacks:
    return boxed
  return marker_answer(tail)
