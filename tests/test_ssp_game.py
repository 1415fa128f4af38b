"""A whole SSP step on a tiny random model: the real rollout engine, retriever and learner.

Scripted stand-ins only where a random model cannot produce the behaviour: the proposer (its
outputs must search twice and pass the filters; its searches still go to the real retriever and
its tokens/masks are built like the engine's) and the RAG verifier (an oracle reader that answers
correctly exactly when the ground truth is in the materials it is given).
"""
import re

import jax
import numpy as np
import pytest

from ssp_jax.rl.advantages import grpo_advantages
from ssp_jax.rl.config import get_rl_config
from ssp_jax.rl.learner import Learner
from retrieval.base import RetrieverError
from ssp_jax.rollout import Rollout, RolloutEngine, get_rollout_config
from ssp_jax.rollout.observations import run_searches
from ssp_jax.ssp import game as G
from ssp_jax.ssp import prompts as prompts_lib
from ssp_jax.ssp import rewards
from ssp_jax.ssp.remote import OpenAIChat
from ssp_jax.ssp.answers import AnswerItem
from ssp_jax.ssp.config import get_ssp_config
from ssp_jax.testing.chat_stub import ChatStub
from ssp_jax.testing.small_retriever import SmallBM25Retriever
from ssp_jax.testing.tiny_checkpoint import load_params, make_tiny_checkpoint
from ssp_jax.tokenizer import load_tokenizer
from ssp_jax.types import Trajectory

from rl_helpers import step_rows

ANSWERS = [AnswerItem("Herman Melville", 2), AnswerItem("Edinburgh", 2),
           AnswerItem("Warsaw", 2)]
LEAKY = "Warsaw"   # its scripted question contains the answer: the filter must reject it


class ScriptedProposer:
  """Proposer calls are scripted (two real searches, then a question); others go to `engine`."""

  def __init__(self, engine, tok, retriever):
    self.engine, self.tok, self.retriever = engine, tok, retriever
    self.questions = {}

  def generate(self, params, prompts, rng, *, stop=None, **kw):
    if stop and "</question>" in stop:
      return Rollout([self._propose(p) for p in prompts], {})
    return self.engine.generate(params, prompts, rng, stop=stop, **kw)

  def _propose(self, messages) -> Trajectory:
    answer = re.search(r"The answer is: (.*)\n", messages[-1]["content"]).group(1)
    queries = [f"{answer}", f"{answer} city river capital born"]
    # the engine's own search step: failures become observations saying so
    results = [run_searches(self.retriever, self.tok, [q], topk=2, max_obs_tokens=64,
                            timeout_s=5.0)[0] for q in queries]
    docs = [r.docs for r in results]
    q = (f"Which place or person is linked to the clue about {answer}, as found by the two "
         f"searches?" if answer == LEAKY else
         f"Which person or place is described by the documents found in search round "
         f"{len(self.questions)}?")
    self.questions[q] = answer
    ids, mask = [], []
    for i, query in enumerate(queries):
      seg = self.tok.encode(f"<think> step {i} </think><search> {query} </search>")
      obs = results[i].obs_ids
      ids += seg + obs
      mask += [1] * len(seg) + [0] * len(obs)
    last = self.tok.encode(f"<question> {q} </question>")
    ids += last
    mask += [1] * len(last)
    text = self.tok.decode(ids)
    return Trajectory(self.tok.prompt_ids(messages), ids, mask,
                      [-1.0 if m else 0.0 for m in mask], text=text, queries=queries, docs=docs,
                      num_searches=2, num_failed_searches=sum(r.failed for r in results),
                      stop_reason="question")


class OracleReader:
  """RAG verifier stand-in: answers right iff the ground truth is in the given materials."""

  def __init__(self, proposer, fail=False):
    self.proposer, self.fail, self.calls = proposer, fail, 0

  def generate_text(self, messages, *, max_new_tokens, temperature):
    self.calls += 1
    if self.fail:
      raise RuntimeError("verifier server down")
    out = []
    for m in messages:
      content = m[-1]["content"]
      q = content.rsplit("Question: ", 1)[1].strip()
      gt = self.proposer.questions[q]
      out.append(f"<answer>{gt}</answer>" if gt in content else "<answer>unknown</answer>")
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  path = make_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny")))
  cfg, params = load_params(path)
  tok = load_tokenizer(path)
  rc = get_rollout_config()
  rc.update(batch_size=8, max_prompt_tokens=1024, max_response_tokens=24, cache_min_len=64,
            steps_per_call=16, dtype="float32", cache_dtype="float32", max_obs_tokens=64, topk=2)
  retriever = SmallBM25Retriever()
  engine = ScriptedProposer(RolloutEngine(cfg, tok, rc, retriever), tok, retriever)
  rl = get_rl_config(roles={G.PROPOSER: "reinforce", G.SOLVER: "grpo"})
  rl.update(compute_dtype="float32", ref_dtype="float32", micro_batch_size=2, mini_batch_size=64,
            lr=1e-3, logprob_chunk=64, remat="none", max_len=2048, bucket=64)
  return dict(cfg=cfg, params=params, tok=tok, engine=engine, rl=rl)


def ssp_cfg(**kw):
  s = get_ssp_config()
  s.update(batch_size=3, solver_n=2, solver_max_new_tokens=24, samples_per_step=3, **kw)
  s.reward.solver = "em"
  return s


def test_whole_step_trajectories_rewards_masks_and_update(world):
  eng = world["engine"]
  game = G.SSPGame(ssp_cfg(), world["rl"], eng, ANSWERS, verifier=OracleReader(eng))
  out = game.play(world["params"], 0, jax.random.PRNGKey(0))
  m = out.metrics
  # 3 proposals (1 leaks its answer), 2 valid -> 2 fresh problems + 1 dummy (empty buffer)
  assert m["proposer/valid_rate"] == pytest.approx(2 / 3)
  assert m["proposer/reject/answer_in_question"] == pytest.approx(1 / 3)
  assert m["proposer/rag_pass_rate"] == 1.0
  assert (m["batch/fresh"], m["batch/replay"], m["batch/dummy"]) == (2, 0, 1)
  assert len(out.trajectories) == 3 + 3 * 2
  assert list(out.roles) == [G.PROPOSER] * 3 + [G.SOLVER] * 6
  # solver rewards: recomputed from the real engine's text
  solver = out.trajectories[3:]
  r = [t.meta["reward"] for t in solver]
  problems = [t.meta["problem"] for t in solver]
  assert problems == [0, 0, 1, 1, 2, 2]
  for t in solver:
    assert len(t.response_ids) == len(t.loss_mask) == len(t.logprobs) > 0
  answers = [s["answer"] for s in out.samples if s.get("valid")] + ["none"]  # + the dummy
  want = [rewards.solver_score(t.text, answers[t.meta["problem"]], "em")[0] for t in solver]
  assert r == want
  # proposer rewards: 1 - solve rate if valid, 0 if not; REINFORCE advantage = reward
  proposals = [s for s in out.samples if s["kind"] == "proposal"]
  assert len(proposals) == 3
  by_ans = {s["answer"]: s for s in proposals}
  assert by_ans[LEAKY]["proposer_reward"] == 0.0 and by_ans[LEAKY]["reason"] == \
      "answer_in_question"
  for s in proposals:
    if s["valid"]:
      assert s["proposer_reward"] == pytest.approx(1 - s["solve_rate"])
      assert s["documents"] and s["searches"]
  prop_r = [p["proposer_reward"] for p in proposals]
  batch, adv = step_rows(world["rl"], G, out)
  np.testing.assert_allclose(adv[:3], prop_r)
  np.testing.assert_allclose(adv[3:], grpo_advantages(np.asarray(r, np.float32),
                                                      np.asarray(problems)), atol=1e-6)
  # masks: observation tokens of the proposer never reach the loss
  for row, t in enumerate(out.trajectories):
    assert batch.loss_mask[row].sum() == sum(t.loss_mask)
  assert sum(out.trajectories[0].loss_mask) < len(out.trajectories[0].response_ids)
  # the update moves the params and reports finite metrics
  learner = Learner(world["cfg"], world["rl"], params=world["params"])
  before = jax.tree.map(np.asarray, learner.state["params"])
  metrics = learner.update(batch)
  assert metrics and all(np.isfinite(v) for mm in metrics for v in mm.values())
  after = jax.tree.map(np.asarray, learner.state["params"])
  moved = jax.tree.leaves(jax.tree.map(lambda a, b: float(np.abs(a - b).max()), before, after))
  assert max(moved) > 0
  # the valid questions entered the replay buffer; the next step reuses them
  assert len(game.buffer) == 2
  out2 = game.play(world["params"], 1, jax.random.PRNGKey(0))
  assert out2.metrics["batch/replay"] == 1 and out2.metrics["batch/dummy"] == 0


def test_verifier_failure_rejects_and_fixed_opponents(world):
  eng = world["engine"]
  game = G.SSPGame(ssp_cfg(), world["rl"], eng, ANSWERS, verifier=OracleReader(eng, fail=True))
  out = game.play(world["params"], 0, jax.random.PRNGKey(1))
  assert out.metrics["proposer/valid_rate"] == 0.0
  assert out.metrics["proposer/reject/verifier_error"] == pytest.approx(2 / 3)
  assert out.metrics["batch/dummy"] == 3
  solver_only = G.SSPGame(ssp_cfg(mode="solver_only"), world["rl"], eng, ANSWERS,
                          verifier=OracleReader(eng))
  out = solver_only.play(world["params"], 0, jax.random.PRNGKey(2), frozen_params=world["params"])
  assert set(out.roles.tolist()) == {G.SOLVER} and len(out.trajectories) == 6
  proposer_only = G.SSPGame(ssp_cfg(mode="proposer_only"), world["rl"], eng, ANSWERS,
                            verifier=OracleReader(eng))
  out = proposer_only.play(world["params"], 0, jax.random.PRNGKey(3),
                           frozen_params=world["params"])
  assert set(out.roles.tolist()) == {G.PROPOSER} and len(out.trajectories) == 3


def test_retriever_outage_is_failed_searches_and_a_metric(world):
  down = SmallBM25Retriever(fail=RetrieverError("connection refused"))
  eng = ScriptedProposer(world["engine"].engine, world["tok"], down)
  game = G.SSPGame(ssp_cfg(), world["rl"], eng, ANSWERS, verifier=OracleReader(eng))
  out = game.play(world["params"], 0, jax.random.PRNGKey(4))
  assert out.metrics["search/failed"] >= 6 and out.metrics["search/failed_rate"] > 0
  assert out.metrics["proposer/reject/no_documents"] == pytest.approx(2 / 3)
  assert "Search failed" in out.trajectories[0].text


def test_resample_strategy_and_grpo_proposer(world):
  eng = world["engine"]
  # dynamic resampling: a second proposer round tops the batch up with fresh questions
  cfg = ssp_cfg(fill=dict(strategy="resample", max_resample_rounds=3, reset_every=10,
                          max_solve_rate=1.0, capacity=100))
  cfg.samples_per_step = 6
  game = G.SSPGame(cfg, world["rl"], eng, ANSWERS, verifier=OracleReader(eng))
  out = game.play(world["params"], 0, jax.random.PRNGKey(5))
  assert out.metrics["proposer/num"] == 6 and out.metrics["batch/fresh"] == 3
  assert out.metrics["batch/dummy"] == 0
  # round 2 brings 4 valid questions for a target of 3: the 4th is never solved, so it must
  # not be trained (it would carry a reward of 0 that no solver attempt produced)
  assert out.metrics["proposer/valid_rate"] == pytest.approx(4 / 6)
  assert out.metrics["proposer/untrained_extra"] == 1
  solved = {t.meta["problem"] for t in out.trajectories if t.meta.get("role") == "solver"}
  assert solved == {0, 1, 2}
  proposer_rows = [t for t, r in zip(out.trajectories, out.roles) if r == G.PROPOSER]
  assert len(proposer_rows) == 5
  samples = [s for s in out.samples if s["kind"] == "proposal"]
  trained_valid = [s for s in samples if s["valid"] and s["trained"]]
  assert len(trained_valid) == 3 and all("solve_rate" in s for s in trained_valid)
  assert [s["trained"] for s in samples if s["valid"]] == [True] * 3 + [False]
  assert [s["proposer_reward"] for s in samples if not s["trained"]] == [None]
  # GRPO for the proposer (paper B.5): 2 proposals per answer form a group
  rl = world["rl"].copy_and_resolve_references()
  rl.roles.proposer.estimator = "grpo"
  game = G.SSPGame(ssp_cfg(proposer_n=2), rl, eng, ANSWERS, verifier=OracleReader(eng))
  out = game.play(world["params"], 0, jax.random.PRNGKey(6))
  prop = out.roles == G.PROPOSER
  assert prop.sum() == 6 and list(out.prompt_index[prop]) == [0, 0, 1, 1, 2, 2]
  adv = step_rows(rl, G, out)[1][prop].reshape(3, 2)
  np.testing.assert_allclose(adv.sum(axis=1), 0.0, atol=1e-5)   # group-normalised


def test_policy_as_verifier_and_judge(world):
  """The policy itself as RAG verifier (no search) and judge: this project's default, NOT the
  paper's setting (the paper and the original code use Qwen2.5-32B-Instruct for both; see
  `test_external_judge_and_verifier_turn_results_around`). A random policy seldom writes an
  `<answer>`, so the judge may never be asked here: this test only checks the plumbing."""
  eng = world["engine"]
  params_fn = lambda: world["params"]
  verifier = G.PolicyText(eng.engine, params_fn, seed=1)
  judge = rewards.Judge(G.PolicyText(eng.engine, params_fn, seed=2))
  s = ssp_cfg()
  s.reward.solver = "em_then_judge"
  s.rag.use_judge = True
  s.rag.max_new_tokens = 12
  game = G.SSPGame(s, world["rl"], eng, ANSWERS, verifier=verifier, judge=judge)
  out = game.play(world["params"], 0, jax.random.PRNGKey(7))
  assert verifier.calls == 1 and out.metrics["time/verification"] > 0
  reasons = {p["reason"] for p in out.samples if p["kind"] == "proposal"}
  # a random policy cannot read the materials: every question is rejected, none accepted
  assert reasons <= {"answer_in_question", "rag_mismatch", "verifier_no_answer"}
  assert out.metrics["proposer/valid_rate"] == 0.0
  assert out.metrics["judge/failed"] == 0


PARAPHRASE = ", as the documents say"   # makes an answer miss EM; the stub judge accepts it


class ScriptedSolver(ScriptedProposer):
  """Also scripts the solver: it answers each question with its ground truth + PARAPHRASE (an
  EM miss that a judge should accept) and the dummy question with a wrong word."""

  def generate(self, params, prompts, rng, *, stop=None, **kw):
    if tuple(stop or ()) == G.SOLVER_STOPS:
      return Rollout([self._solve(m) for m in prompts], {})
    return super().generate(params, prompts, rng, stop=stop, **kw)

  def _solve(self, messages) -> Trajectory:
    q = messages[-1]["content"].rsplit("Question: ", 1)[1].strip()
    gt = self.questions.get(q)
    text = f"<think> ok </think><answer> {gt}{PARAPHRASE} </answer>" if gt else \
        "<think> ok </think><answer> nothing </answer>"
    ids = self.tok.encode(text)
    return Trajectory(self.tok.prompt_ids(messages), ids, [1] * len(ids), [-1.0] * len(ids),
                      text=text, stop_reason="answer")


def stub_reply(proposer):
  """The served 32B model, scripted: as RAG verifier it answers with the ground truth +
  PARAPHRASE when the ground truth is in the materials; as judge it says Correct exactly for
  answers that carry PARAPHRASE."""
  def reply(messages):
    system, user = messages[0]["content"], messages[-1]["content"]
    if system == prompts_lib.JUDGE_SYSTEM:
      return "Correct" if PARAPHRASE.strip(", ") in user else "Wrong"
    assert system == prompts_lib.VERIFIER_SYSTEM, system
    gt = proposer.questions[user.rsplit("Question: ", 1)[1].strip()]
    return f"<answer>{gt}{PARAPHRASE}</answer>" if gt in user else "<answer>unknown</answer>"
  return reply


def test_external_judge_and_verifier_turn_results_around(world):
  """The paper's setting: a served model (a real HTTP stub of an OpenAI-compatible endpoint)
  verifies and judges; the judge turns a verifier's EM miss into a valid question and a
  solver's EM miss into reward 1, inside a whole SSP step."""
  eng = ScriptedSolver(world["engine"].engine, world["tok"], world["engine"].retriever)
  with ChatStub(stub_reply(eng)) as stub:
    chat = OpenAIChat(stub.url, "Qwen2.5-32B-Instruct", retries=0)
    results = {}
    for use_judge in (False, True):
      s = ssp_cfg()
      s.reward.solver = "em_then_judge" if use_judge else "em"
      s.rag.use_judge = use_judge
      game = G.SSPGame(s, world["rl"], eng, ANSWERS, verifier=chat,
                       judge=rewards.Judge(chat) if use_judge else None)
      results[use_judge] = game.play(world["params"], 0, jax.random.PRNGKey(8))
    no_judge, judged = results[False], results[True]
    # without the judge every verifier answer misses EM: no valid question, only dummies
    assert no_judge.metrics["proposer/valid_rate"] == 0.0
    assert no_judge.metrics["proposer/reject/rag_mismatch"] == pytest.approx(2 / 3)
    # with it the two answerable questions pass and their solver EM misses are judged correct
    m = judged.metrics
    assert m["proposer/valid_rate"] == pytest.approx(2 / 3)
    assert (m["batch/fresh"], m["batch/dummy"]) == (2, 1)
    solver_r = [t.meta["reward"] for t in judged.trajectories if t.meta.get("role") == "solver"]
    assert solver_r == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    props = [p for p in judged.samples if p["kind"] == "proposal" and p["valid"]]
    for t in judged.trajectories[3:7]:   # each of them an EM miss against its ground truth
      assert rewards.solver_score(t.text, props[t.meta["problem"]]["answer"], "em")[0] == 0.0
    assert [p["proposer_reward"] for p in props] == [0.0, 0.0]     # 1 - solve rate 1
    # judge: 2 verifier answers + 6 solver answers asked; the dummy's 2 judged wrong
    assert (m["judge/asked"], m["judge/correct"], m["judge/failed"]) == (8, 6, 0)
    kinds = [r["messages"][0]["content"] for r in stub.requests]
    assert kinds.count(prompts_lib.VERIFIER_SYSTEM) == 2 + 2    # both runs verify 2 questions
    assert all(r["model"] == "Qwen2.5-32B-Instruct" for r in stub.requests)
    # the endpoint goes down: verification fails closed, the judge's failures are counted and
    # the step still finishes
    stub.status = 503
    s = ssp_cfg()
    s.reward.solver, s.rag.use_judge = "em_then_judge", True
    game = G.SSPGame(s, world["rl"], eng, ANSWERS, verifier=chat, judge=rewards.Judge(chat))
    out = game.play(world["params"], 0, jax.random.PRNGKey(9))
  assert out.metrics["proposer/reject/verifier_error"] == pytest.approx(2 / 3)
  assert out.metrics["batch/dummy"] == 3
  assert out.metrics["judge/failed"] == out.metrics["judge/asked"] == 6
  assert out.metrics["solver/reward_mean"] == 0.0
