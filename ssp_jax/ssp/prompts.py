"""Prompt templates of the SSP game, written in our own words.

Every function returns chat messages (a list of `{"role", "content"}` dicts) that the rollout
engine renders with the tokenizer's chat template. The rules follow the paper (Sec. 3, App. A) and
the original code's prompts:

* proposer: reverse-engineer an n-hop question from a known answer by searching; fact-grounded,
  no spoilers, search mandatory, exactly n hops, unique answer; final question in <question>.
* solver: the Search-R1 instruction (think, search, information, answer).
* RAG verifier: answer from the given materials only, without searching, concisely, with the final
  answer in <answer>.
* judge: compare a prediction with a reference, reply "Correct" or "Wrong".
"""
from __future__ import annotations

from typing import Sequence, Union

from ssp_jax.eval.prompts import (  # noqa: F401  (the solver's prompt: the QA evaluation's)
    SOLVER_STOPS, SOLVER_SYSTEM, SOLVER_USER, closed_book_messages, solver_messages)

Messages = list[dict[str, str]]
Answer = Union[str, Sequence[str]]

DEFAULT_EXAMPLES = (
    "Which river flows through the capital of the country where the inventor of the telephone "
    "was born?",
    "In what year was the university attended by the author of 'The Old Man and the Sea' "
    "founded?",
    "What is the population of the town where the first female Nobel laureate in physics was "
    "born?",
)

PROPOSER_SYSTEM = """\
You are an expert question writer. You are given an answer, and your job is to work backwards \
from it to a challenging question whose solution needs exactly {hops} searches, one after the \
other, each building on the previous one.

How to work:
1. Start from the answer. Search for a related but different concept that points to it (do not \
simply search for the answer itself) and note one fact from the results that leads to the answer.
2. Repeat: search for information that leads to the previous concept and note the bridging fact, \
until the chain has {hops} links. The fact found last becomes the opening clue of the question.
3. Reason inside <think> and </think>. To search, write <search> your query </search>; the results \
come back between <information> and </information>. Each search should use a new query.
4. Check your question before giving it: every fact must come from your search results, the chain \
must really need {hops} searches, and it must not be too easy.
5. Give the final question, and only the question, inside <question> and </question>.

Examples of the kind of question wanted:
{examples}

Rules you must follow:
- Facts only: every statement in the question is backed by what your searches returned.
- No spoilers: the question never contains the answer or any intermediate answer of the chain.
- Search is required: the question cannot be answered from general knowledge alone.
- Exactly {hops} searches are needed to solve it, no more and no fewer.
- One answer: the question has a single, unambiguous answer, the one you were given."""

PROPOSER_USER = """\
The answer is: {answer}
Write a question whose answer is exactly this and that needs {hops} searches to solve. Search \
first, verify your facts, make sure the question is not too simple, then give it inside \
<question> and </question>."""

VERIFIER_SYSTEM = "You are a careful reader who answers questions from the given materials."

VERIFIER_USER = """\
Answer the question using only the materials below; do not search. Reason very briefly (at most \
50 words), then give the final answer, as short as possible, inside <answer> and </answer>.

Materials:
{materials}

Question: {question}"""

JUDGE_SYSTEM = "You are a professional judge of answers to questions."

JUDGE_USER = """\
Decide whether the model's answer is correct given the reference answer.

Question: {question}
Model answer: {prediction}
Reference answer: {reference}

Count it as correct when: it means the same as the reference; numbers are equal or very close; \
its core meaning is right even if the wording or language differs; or it contains the reference \
answer without contradicting it. Reply with one word only: Correct or Wrong."""


def answer_text(answer: Answer) -> str:
  """The ground truth as shown to the proposer: the first alias of a list, else the string."""
  if isinstance(answer, str):
    return answer
  answers = [a for a in answer if str(a).strip()]
  if not answers:
    raise ValueError("answer: empty list of ground-truth aliases; give at least one non-empty "
                     "string")
  return str(answers[0])


def proposer_messages(answer: Answer, hops: int, examples: Sequence[str] = ()) -> Messages:
  """Proposer prompt: write a `hops`-search question whose answer is `answer`.

  Args:
    answer: the ground truth (a string, or a list of aliases; the first one is shown).
    hops: the number of sequential searches the question must require (>= 1).
    examples: example questions shown in the system prompt (the answer set's
      `sys_question_example`); `DEFAULT_EXAMPLES` when empty.
  """
  if int(hops) < 1:
    raise ValueError(f"hops must be >= 1, got {hops}")
  examples = [e for e in (examples or DEFAULT_EXAMPLES) if str(e).strip()][:3]
  shown = "\n".join(f"- {e}" for e in examples)
  return [
      {"role": "system", "content": PROPOSER_SYSTEM.format(hops=int(hops), examples=shown)},
      {"role": "user", "content": PROPOSER_USER.format(answer=answer_text(answer),
                                                      hops=int(hops))},
  ]


def verifier_messages(question: str, materials: str) -> Messages:
  """RAG-verifier prompt: answer `question` from `materials` only, final answer in <answer>."""
  return [{"role": "system", "content": VERIFIER_SYSTEM},
          {"role": "user", "content": VERIFIER_USER.format(materials=materials.strip(),
                                                          question=question.strip())}]


def judge_messages(question: str, prediction: str, reference: Answer) -> Messages:
  """Judge prompt: is `prediction` correct for `question` given `reference`? (Correct/Wrong)."""
  ref = reference if isinstance(reference, str) else " / ".join(str(r) for r in reference)
  return [{"role": "system", "content": JUDGE_SYSTEM},
          {"role": "user", "content": JUDGE_USER.format(question=question.strip(),
                                                       prediction=prediction.strip(),
                                                       reference=ref)}]
