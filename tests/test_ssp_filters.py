"""Rule filters on hand-made proposer trajectories."""
from ssp_jax.ssp import filters as F
from ssp_jax.types import Trajectory

Q = "Which city hosted the games in the year the founder of the company was born there?"


def _traj(text, queries=("a b", "c d"), ndocs=1):
  docs = [[{"id": f"{q}{i}", "title": "T", "text": "x", "contents": '"T"\nx'}
           for i in range(ndocs)] for q in queries]
  return Trajectory([1], [2], [1], [0.0], text=text, queries=list(queries), docs=docs,
                    num_searches=len(queries))


CFG = F.FilterConfig()


def test_pass():
  q, reason = F.check_proposal(_traj(f"<think>x</think><question>{Q}</question>"), "Oslo", CFG)
  assert (q, reason) == (Q, None)


def test_question_tag_rules():
  assert F.extract_question("no tag here")[1] == F.NO_QUESTION
  assert F.extract_question(f"<question>{Q}</question><question>{Q}</question>")[1] == \
      F.MULTIPLE_QUESTIONS
  assert F.extract_question("<question>   </question>")[1] == F.EMPTY_QUESTION
  # a tag inside a retrieved document is not the proposer's question
  text = f"<information><question>doc q</question></information><question>{Q}</question>"
  assert F.extract_question(text) == (Q, None)


def test_length_rules():
  assert F.check_length("short", CFG) == F.TOO_SHORT
  assert F.check_length("word " * 300, CFG) == F.TOO_LONG
  assert F.check_length("only five words are here", CFG) == F.TOO_FEW_WORDS
  assert F.check_length(Q, CFG) is None
  assert F.check_length("only five words are here", F.FilterConfig(min_words=3)) is None


def test_answer_leak_normalised_and_aliases():
  q = "Which author, born in the city of Paris, wrote the book that was made into a film?"
  assert F.check_answer_leak(q, "PARIS!") == F.ANSWER_LEAK
  assert F.check_answer_leak(q, ["Lyon", "  paris "]) == F.ANSWER_LEAK  # every alias checked
  assert F.check_answer_leak(q, ["Lyon", "Marseille"]) is None
  assert F.check_answer_leak(q, "The Paris") == F.ANSWER_LEAK  # articles dropped
  assert F.check_answer_leak(q, "Par") is None                  # word boundaries, not substrings
  q2 = "What film did the director of Ender’s Game make next, in the following ten years?"
  assert F.check_answer_leak(q2, "Ender's Game") == F.ANSWER_LEAK


def test_search_rules():
  ok = f"<question>{Q}</question>"
  assert F.check_proposal(_traj(ok, queries=()), "Oslo", CFG)[1] == F.NO_SEARCH
  assert F.check_proposal(_traj(ok, ndocs=0), "Oslo", CFG)[1] == F.NO_DOCUMENTS
  assert F.check_proposal(_traj(ok, queries=("a",)), "Oslo", CFG)[1] == F.TOO_FEW_SEARCHES
  assert F.check_proposal(_traj(ok, queries=("a b", "A  b")), "Oslo", CFG)[1] == \
      F.DUPLICATE_QUERIES
  loose = F.FilterConfig(min_searches=1, allow_duplicate_queries=True)
  assert F.check_proposal(_traj(ok, queries=("a",)), "Oslo", loose)[1] is None


def test_config_from_dict_and_reasons_named():
  cfg = F.FilterConfig.from_config({"min_words": 3, "unrelated": 1})
  assert cfg.min_words == 3
  assert len(set(F.REASONS)) == len(F.REASONS)
