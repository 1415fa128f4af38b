"""SvS prompts and the extraction of a synthesised problem from a VPS response."""
import pytest

from ssp_jax.svs import prompts as P

PROBLEM = "A square has side length 7. What is its area?"


@pytest.mark.parametrize("text,problem,reason", [
    (f"```text\n{PROBLEM}\n```", PROBLEM, None),
    (f"Here it is:\n```text {PROBLEM}```\nDone.", PROBLEM, None),
    # the first ```text block after the last </think>
    (f"<think> ```text\nDraft question number one?\n``` </think>\n```text\n{PROBLEM}\n```\n"
     "```text\nSecond question here?\n```", PROBLEM, None),
    # fallbacks: a bare block, then the marker
    (f"```\n{PROBLEM}\n```", PROBLEM, None),
    (f"**Reconstructed Question:** {PROBLEM}", PROBLEM, None),
    (f"**Reconstructed Question**: {PROBLEM}", PROBLEM, None),
    # ```text wins over an earlier bare block
    (f"```\nnot this one at all\n```\n```text\n{PROBLEM}\n```", PROBLEM, None),
    # rejections
    (PROBLEM, None, "no_block"),
    (f"<think>```text\n{PROBLEM}\n```</think> nothing after", None, "no_block"),
    ("```text\nshort\n```", None, "too_short"),
    ("```text\n" + "x" * 3000 + "\n```", None, "too_long"),
    ("```python\nprint(1)\n```", None, "no_block"),
    ("", None, "no_block"),
])
def test_extract_problem(text, problem, reason):
  assert P.extract_problem(text, min_chars=10, max_chars=2000) == (problem, reason)


def test_extract_problem_length_bounds_are_config():
  text = f"```text\n{PROBLEM}\n```"
  assert P.extract_problem(text, min_chars=len(PROBLEM) + 1)[1] == "too_short"
  assert P.extract_problem(text, max_chars=len(PROBLEM) - 1)[1] == "too_long"
  assert P.extract_problem(text, min_chars=len(PROBLEM), max_chars=len(PROBLEM))[0] == PROBLEM


def test_solve_messages_append_the_boxed_suffix():
  msgs = P.solve_messages("  What is 2+2?  ")
  assert msgs == [{"role": "user", "content": "What is 2+2? Please reason step by step, and put "
                                              "your final answer within \\boxed{}."}]


def test_synthesis_prompt_holds_the_solution_and_asks_for_a_text_block():
  sol = "We compute 7 * 7 = 49, so the answer is \\boxed{49}."
  (msg,) = P.synthesis_messages(sol)
  assert msg["role"] == "user" and sol in msg["content"] and "```text" in msg["content"]
