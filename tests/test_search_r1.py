"""The Search-R1 baseline's data, config checks and one game step.

The step runs the real rollout engine (tiny random model, byte-level BPE tokenizer) with a small
real BM25 retriever; a random model rarely writes an answer, so the reward/advantage arithmetic
is also checked with a scripted engine whose answers are known (`ScriptedSolver`), the same
pattern as tests/test_svs_game.py.
"""
import json

import jax
import numpy as np
import pytest

from ssp_jax.rl.advantages import grpo_advantages
from ssp_jax.rl.config import get_rl_config
from ssp_jax.rl.learner import Learner
from ssp_jax.rollout import Rollout, RolloutEngine, get_rollout_config
from ssp_jax.search_r1 import data
from ssp_jax.search_r1.config import base_run_config, get_search_r1_config
from ssp_jax.search_r1.game import SearchR1Game
from ssp_jax.search_r1.validate import validate_config
from ssp_jax.ssp import game as ssp_game
from ssp_jax.ssp import prompts, rewards
from ssp_jax.run.validate import ConfigError
from ssp_jax.testing.small_retriever import SmallBM25Retriever
from ssp_jax.testing.tiny_checkpoint import load_params, make_tiny_checkpoint
from ssp_jax.tokenizer import load_tokenizer
from ssp_jax.types import Trajectory

from rl_helpers import step_rows

QUESTIONS = [
    {"id": "q0", "question": "Who wrote Moby-Dick?", "golden_answers": ["Herman Melville"],
     "hops": 1, "kind": "author", "support": ["0"]},
    {"id": "q1", "question": "Which river flows through the capital of France?",
     "golden_answers": ["Seine", "the Seine"], "hops": 2},
    {"id": "q2", "question": "In which city was the telephone's inventor born?",
     "golden_answers": ["Edinburgh"], "hops": 2},
]


def write_questions(path, extra_lines=()):
  with open(path, "wb") as f:
    for q in QUESTIONS:
      f.write((json.dumps(q) + "\n").encode())
    for line in extra_lines:
      f.write(line if isinstance(line, bytes) else line.encode())
  return str(path)


# -- data ---------------------------------------------------------------------------------------
def test_bad_lines_are_skipped_and_counted(tmp_path):
  path = write_questions(tmp_path / "q.jsonl", [
      "{broken\n", json.dumps({"question": "no answer"}) + "\n",
      json.dumps({"question": "bad hops", "golden_answers": ["x"], "hops": 0}) + "\n",
      b"\xff\xfe not utf-8\n", "\n", json.dumps({"question": "Q?", "golden_answers": "A"}) + "\n"])
  qs, stats = data.load_questions(path)
  assert (stats.good, stats.bad) == (4, 4)
  assert stats.first_bad.startswith(f"{path}:4: not JSON")
  assert "4 questions loaded, 4 bad lines skipped" in data.report(stats)
  assert qs[0] == data.Question("q0", "Who wrote Moby-Dick?", ("Herman Melville",), 1)
  assert qs[0].extra == {"kind": "author", "support": ["0"]}
  assert qs[3].golden_answers == ("A",) and qs[3].hops is None and qs[3].id == "q-8"
  with pytest.raises(FileNotFoundError, match="search_r1.train_path"):
    data.load_questions(str(tmp_path / "nope.jsonl"))
  (tmp_path / "bad.jsonl").write_text("{}\n[1]\n")
  with pytest.raises(ValueError, match="no usable line.*2 bad lines"):
    data.load_questions(str(tmp_path / "bad.jsonl"))


def test_order_is_epochs_of_seeded_permutations():
  order = data.QuestionOrder(7, 3, seed=1)
  seq = [i for s in range(7) for i in order.indices(s)]          # 21 = 3 epochs
  for e in range(3):
    assert sorted(seq[7 * e:7 * e + 7]) == list(range(7))        # each question once an epoch
  assert seq[:7] != seq[7:14]                                    # reshuffled every epoch
  resumed = data.QuestionOrder(7, 3, seed=1)                     # a fresh process, step 5
  assert resumed.indices(5) == order.indices(5)
  assert data.QuestionOrder(7, 3, seed=2).indices(0) != order.indices(0)
  big = data.QuestionOrder(2, 5, seed=0).indices(0)             # a batch larger than the file
  assert sorted(big[:2]) == sorted(big[2:4]) == [0, 1] and len(big) == 5
  assert order.epoch(7) == 3.0


# -- config checks ------------------------------------------------------------------------------
def _config(tmp_path, **kw):
  c = base_run_config()
  c.workdir = str(tmp_path / "run")
  c.search_r1.train_path = write_questions(tmp_path / "q.jsonl")
  c.search_r1.update(kw)
  return c


def test_validation_names_the_field(tmp_path):
  validate_config(_config(tmp_path))
  c = base_run_config()
  assert c.search_r1.batch_size * c.search_r1.n == \
      c.ssp.batch_size * c.ssp.proposer_n * c.ssp.solver_n
  cases = [({"n": 1}, "search_r1.n=1"), ({"reward": "bleu"}, "search_r1.reward='bleu'"),
           ({"batch_size": 0}, "search_r1.batch_size=0"),
           ({"train_path": str(tmp_path / "missing.jsonl")}, "search_r1.train_path="),
           ({"train_path": ""}, "search_r1.train_path is empty and there is no world"),
           ({"max_new_tokens": -1}, "search_r1.max_new_tokens=-1")]
  for kw, needle in cases:
    with pytest.raises(ConfigError, match="config." + needle.replace("(", r"\(")):
      validate_config(_config(tmp_path, **kw))
  c = _config(tmp_path)
  c.game = "ssp"
  with pytest.raises(ConfigError, match="game='search_r1'"):
    validate_config(c)


# -- one step -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  path = make_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny")))
  cfg, params = load_params(path)
  tok = load_tokenizer(path)
  rc = get_rollout_config()
  rc.update(batch_size=8, max_prompt_tokens=512, max_response_tokens=24, cache_min_len=64,
            steps_per_call=16, dtype="float32", cache_dtype="float32", max_obs_tokens=48, topk=2)
  retriever = SmallBM25Retriever()
  rl = get_rl_config(roles={"solver": "grpo"})
  rl.update(compute_dtype="float32", ref_dtype="float32", micro_batch_size=2, mini_batch_size=64,
            lr=1e-3, logprob_chunk=64, remat="none", max_len=1024, bucket=64)
  return dict(cfg=cfg, params=params, tok=tok, retriever=retriever, rl=rl,
              engine=RolloutEngine(cfg, tok, rc, retriever))


def questions():
  return [data.parse_record(q, str(i)) for i, q in enumerate(QUESTIONS)]


def sr1_cfg(**kw):
  s = get_search_r1_config()
  s.update(dict(dict(batch_size=2, n=2, max_new_tokens=24, samples_per_step=2), **kw))
  return s


def test_step_with_the_real_engine_matches_ssp_solver(tiny):
  game = SearchR1Game(sr1_cfg(), tiny["rl"], tiny["engine"], questions())
  out = game.play(tiny["params"], 0, jax.random.PRNGKey(0))
  qs = game.questions_of(0)
  assert len(out.trajectories) == 4 and list(out.roles) == [ssp_game.SOLVER] * 4
  assert list(out.prompt_index) == [0, 0, 1, 1]
  for j, t in enumerate(out.trajectories):      # SSP's solver prompt, rewards from the text
    q = qs[j // 2]
    assert t.prompt_ids == tiny["tok"].prompt_ids(prompts.solver_messages(q.question))
    assert t.meta["reward"] == rewards.solver_score(t.text, list(q.golden_answers), "em",
                                                    spam_max_tags=10)[0]
    assert len(t.response_ids) == len(t.loss_mask) == len(t.logprobs) > 0
  r = np.asarray([t.meta["reward"] for t in out.trajectories], np.float32)
  batch, adv = step_rows(tiny["rl"], game, out, max_len=1024)
  np.testing.assert_allclose(adv, grpo_advantages(r, out.prompt_index), atol=1e-6)
  m = out.metrics
  for k in ("solver/reward_mean", "solver/solve_rate_mean", "solver/searches_mean",
            "solver/response_len", "solver/all_same_rate", "search/failed_rate",
            "time/rollout", "time/retrieval", "time/game"):
    assert isinstance(m[k], float), k
  hops = {q.hops for q in qs}
  assert {k for k in m if k.startswith("solver/reward_hop")} == {f"solver/reward_hop{h}"
                                                                 for h in hops}
  assert [s["question"] for s in out.samples] == [q.question for q in qs]
  assert {"answer", "predictions", "rewards", "solve_rate", "texts"} <= set(out.samples[0])
  # the same step again draws the same questions; the next step other ones
  assert game.questions_of(0) == qs and len(game.questions_of(1)) == 2
  # the learner trains on it
  learner = Learner(tiny["cfg"], tiny["rl"], params=tiny["params"])
  metrics = learner.update(batch)
  assert metrics and all(np.isfinite(v) for mm in metrics for v in mm.values())


class ScriptedSolver:
  """Answers each question with a scripted list of answers, one per attempt, after one search
  that really goes to the retriever."""

  def __init__(self, tok, retriever, answers):
    self.tok, self.retriever, self.answers = tok, retriever, answers
    self.stats, self.calls = {"search_s": 0.25}, []

  def generate(self, params, msgs, rng, *, stop=None, use_search=None, temperature=None,
               max_new_tokens=None):
    self.calls.append(dict(stop=stop, use_search=use_search, temperature=temperature,
                           max_new_tokens=max_new_tokens, n=len(msgs)))
    seen, out = {}, []
    for m in msgs:
      q = m[-1]["content"].rsplit("Question: ", 1)[1].strip()
      k = seen[q] = seen.get(q, -1) + 1
      docs = self.retriever.search([q], 2)[0]
      text = f"<search> {q} </search><answer> {self.answers[q][k]} </answer>"
      ids = self.tok.encode(text)
      out.append(Trajectory(self.tok.prompt_ids(m), ids, [1] * len(ids), [-1.0] * len(ids),
                            text=text, queries=[q], docs=[docs], num_searches=1,
                            num_failed_searches=int(q.startswith("In which")),
                            stop_reason="answer"))
    return Rollout(out, dict(self.stats))


def test_rewards_advantages_and_metrics_of_known_answers(tiny):
  qs = questions()
  answers = {qs[0].question: ["Herman Melville", "Melville"],     # 1 of 2
             qs[1].question: ["the Seine", "Seine"],               # 2 of 2: no signal
             qs[2].question: ["Paris", "London"]}                  # 0 of 2: no signal
  eng = ScriptedSolver(tiny["tok"], tiny["retriever"], answers)
  game = SearchR1Game(sr1_cfg(batch_size=3, temperature=0.7, samples_per_step=3), tiny["rl"],
                      eng, qs)
  out = game.play(None, 4, jax.random.PRNGKey(0))
  assert eng.calls == [dict(stop=ssp_game.SOLVER_STOPS, use_search=True, temperature=0.7,
                            max_new_tokens=24, n=6)]
  order = [q.question for q in game.questions_of(4)]
  r = {q: [t.meta["reward"] for t in out.trajectories[2 * k:2 * k + 2]]
       for k, q in enumerate(order)}
  assert r == {qs[0].question: [1.0, 0.0], qs[1].question: [1.0, 1.0],
               qs[2].question: [0.0, 0.0]}
  adv = step_rows(tiny["rl"], game, out)[1].reshape(3, 2)
  k0 = order.index(qs[0].question)
  assert adv[k0, 0] > 0 > adv[k0, 1]
  assert np.all(np.delete(adv, k0, axis=0) == 0)
  m = out.metrics
  assert m["solver/reward_mean"] == pytest.approx(3 / 6)
  assert m["solver/solve_rate_mean"] == pytest.approx(3 / 6)
  assert m["solver/all_same_rate"] == pytest.approx(2 / 3)
  assert m["solver/reward_hop1"] == 0.5 and m["solver/reward_hop2"] == 0.5
  assert m["search/failed_rate"] == pytest.approx(2 / 6) and m["solver/searches_mean"] == 1.0
  assert m["time/retrieval"] == 0.25
  s = {x["question"]: x for x in out.samples}
  assert s[qs[0].question]["predictions"] == ["Herman Melville", "Melville"]
  assert s[qs[0].question]["solve_rate"] == 0.5 and s[qs[0].question]["answer"] == \
      ["Herman Melville"]
  # spam rule and f1 mode: the same reward code as SSP's solver
  game = SearchR1Game(sr1_cfg(batch_size=3, reward="f1"), tiny["rl"], eng, qs)
  out = game.play(None, 4, jax.random.PRNGKey(0))
  k0 = [q.question for q in game.questions_of(4)].index(qs[0].question)
  assert out.trajectories[2 * k0 + 1].meta["reward"] == pytest.approx(
      rewards.solver_score("<answer> Melville </answer>", ["Herman Melville"], "f1")[0])
  with pytest.raises(ValueError, match="search_r1.reward"):
    SearchR1Game(sr1_cfg(reward="bleu"), tiny["rl"], eng, qs)
