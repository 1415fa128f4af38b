"""The SvS step's selection and reward rules on hand-made accuracy tables.

The LLM is a scripted test double (the real model path runs in tests/test_svs_train_cli.py): each
problem says how many of its n solutions are correct, and each correct solution says what its
syntheses will be. Everything else (grading, extraction, rewards, training sets, group ids,
advantages, the batch and the learner update) is the real code.
"""
import re
import types

import numpy as np
import pytest

from ssp_jax.rl.advantages import grpo_advantages
from ssp_jax.run.trainer import train_one_step
from ssp_jax.svs import config as svs_config
from ssp_jax.svs import game as G
from ssp_jax.svs import prompts as P
from ssp_jax.svs.data import MathProblem, ProblemIterator
from ssp_jax.rollout import Rollout
from ssp_jax.types import Trajectory

from rl_helpers import step_rows

# n = 4 solutions a problem; "[c=K]" in a problem = K of its 4 solutions are correct.
PROBLEMS = [
    MathProblem("P0", "[c=0] (P0) What is 10 + 1?", "11"),   # p = 0: not selected, not trained
    MathProblem("P1", "[c=1] (P1) What is 10 + 2?", "12"),   # p = 0.25: under-performing, trained
    MathProblem("P2", "[c=2] (P2) What is 10 + 3?", "13"),   # p = 0.5: under-performing (bound)
    MathProblem("P3", "[c=4] (P3) What is 10 + 4?", "14"),   # p = 1: neither
    MathProblem("P4", "[c=3] (P4) What is 10 + 5?", "15"),   # p = 0.75: trained, not selected
]
# Syntheses of each correct response (problem id, response index): SPA correct counts of the
# synthetic problems, None = a response with no extractable problem. Positive iff c in {1, 2}.
SYNTH = {("P1", 0): [1, 4, None],      # rewards 1, 0, 0 -> VPS group trained
         ("P2", 0): [0, 3, None],      # rewards 0, 0, 0 -> not trained
         ("P2", 1): [2, 2, None]}      # rewards 1, 1, 0 -> trained
ANSWER = {p.id: p.answer for p in PROBLEMS}


class FakeTok:
  """Words -> ids in 1..63 (the tiny learner's vocab)."""

  def encode(self, text):
    return [1 + (sum(map(ord, w)) % 63) for w in text.split()] or [1]

  def prompt_ids(self, messages):
    return self.encode(" ".join(m["content"] for m in messages))


class ScriptedLLM:
  """Solves and synthesises as the tables above say; records every call."""

  def __init__(self):
    self.tok = FakeTok()
    self.calls = []

  def generate(self, params, prompts, rng, *, stop=None, use_search=None, temperature=None,
               max_new_tokens=None, **kw):
    assert stop == () and use_search is False
    texts, seen = [], {}
    for msgs in prompts:
      content = msgs[-1]["content"]
      k = seen[content] = seen.get(content, -1) + 1     # which repetition of this prompt
      texts.append(self._synth(content, k) if "Solution:\n" in content else
                   self._solve(content, k))
    self.calls.append(("synth" if "Solution:\n" in prompts[0][-1]["content"] else "solve",
                       len(prompts)))
    return Rollout([self._traj(msgs, t) for msgs, t in zip(prompts, texts)], {})

  def _solve(self, content, k):
    correct = int(re.search(r"\[c=(\d)\]", content).group(1))
    pid = re.search(r"\b(P\d)\b", content).group(1)   # "(P1)" or "of problem P1"
    if k < correct:   # a synthetic problem is graded against its source problem's answer
      return f"pid={pid} resp={k} so the answer is \\boxed{{{ANSWER[pid]}}}"
    return f"pid={pid} resp={k} so the answer is \\boxed{{99}}"

  def _synth(self, content, k):
    pid, resp = re.search(r"pid=(\w+) resp=(\d)", content).groups()
    c = SYNTH[(pid, int(resp))][k]
    if c is None:
      return "I cannot tell."
    return f"```text\n[c={c}] Variant {k} of problem {pid}: what is 42 + {k}?\n```"

  def _traj(self, msgs, text):
    resp = self.tok.encode(text)
    return Trajectory(self.tok.prompt_ids(msgs), resp, [1] * len(resp), [-1.0] * len(resp),
                      text=text, stop_reason="eos")


def svs_cfg(**kw):
  c = svs_config.get_svs_config()
  c.update(batch_size=len(PROBLEMS), n=4, synth_n=3, samples_per_step=8)
  c.update(kw)
  return c


def rl_cfg():
  c = svs_config.base_run_config().rl
  c.update(compute_dtype="float32", ref_dtype="float32", micro_batch_size=2, mini_batch_size=64,
           lr=1e-2, warmup_steps=1, logprob_chunk=16, remat="none", bucket=16, max_len=256)
  return c


def make_game(problems=PROBLEMS, max_prompt_tokens=10_000, max_problem_prompt_tokens=None, **kw):
  llm = ScriptedLLM()
  data = ProblemIterator(list(problems), shuffle=False)
  return G.SvSGame(svs_cfg(**kw), rl_cfg(), llm, data, max_prompt_tokens=max_prompt_tokens,
                   max_problem_prompt_tokens=max_problem_prompt_tokens), llm


def play(game):
  import jax
  return game.play(None, 0, jax.random.PRNGKey(0))


# -- the rules on their own ----------------------------------------------------------------
def test_under_performing_bounds_are_inclusive():
  acc = np.array([0.0, 0.124, 0.125, 0.25, 0.5, 0.51, 1.0])
  assert G.under_performing(acc, 0.125, 0.5).tolist() == [False, False, True, True, True, False,
                                                         False]


@pytest.mark.parametrize("n,positive", [(8, [1, 2, 3, 4, 5]), (4, [1, 2]),
                                        (16, [2, 3, 4, 5, 6, 7, 8, 9, 10])])
def test_vps_reward_bounds(n, positive):
  """[n * 0.125, n * 0.625]: 1..5 of 8 (the original's [1, 5]); too easy or unsolved -> 0."""
  assert [c for c in range(n + 1) if G.vps_reward(c, n, 0.125, 0.625) == 1.0] == positive
  assert G.vps_reward(0, n, 0.125, 0.625) == 0.0 and G.vps_reward(n, n, 0.125, 0.625) == 0.0


def test_group_accuracy_and_trainable():
  acc = G.group_accuracy([1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0], 4)
  assert acc.tolist() == [0.25, 1.0, 0.0]
  assert G.trainable(acc).tolist() == [True, False, False]


# -- one step on the scripted tables ---------------------------------------------------------
def _sections(out):
  return [t.meta["svs"] for t in out.trajectories]


def test_step_selection_training_sets_and_rewards():
  game, llm = make_game()
  out = play(game)
  m = out.metrics
  assert m["svs/skipped"] == 0.0 and m["oqa/under_performing"] == 2.0
  assert m["oqa/accuracy"] == pytest.approx((0 + 1 + 2 + 4 + 3) / 20)
  # VPS inputs: only correct responses of P1 (1) and P2 (2); P4's 3 correct are not used
  assert m["vps/inputs"] == 3.0 and m["vps/num"] == 9.0
  assert m["vps/valid_rate"] == pytest.approx(6 / 9) and m["vps/reject/no_block"] == \
      pytest.approx(3 / 9)
  assert llm.calls == [("solve", 20), ("synth", 9), ("solve", 24)]
  secs = _sections(out)
  assert secs.count("oqa") == 12 and secs.count("vps") == 6 and secs.count("spa") == 16
  assert m["oqa/train_groups"] == 3 and m["vps/train_groups"] == 2 and m["spa/train_groups"] == 4
  # OQA groups are P1, P2, P4 with their own rewards
  oqa = [t for t in out.trajectories if t.meta["svs"] == "oqa"]
  assert [t.meta["answer"] for t in oqa[::4]] == ["12", "13", "15"]
  # VPS rewards per trained group, in source order (P1 #0, P2 #1)
  vps = [t for t in out.trajectories if t.meta["svs"] == "vps"]
  assert [t.meta["synthetic_problem"] is not None for t in vps] == [True, True, False] * 2
  # SPA groups: the synthetic problems with 0 < acc < 1, graded against the ORIGINAL answer
  spa = [t for t in out.trajectories if t.meta["svs"] == "spa"]
  assert {t.meta["answer"] for t in spa[:4]} == {"12"} and {t.meta["answer"] for t in spa[4:]} \
      == {"13"}
  spa_acc = [np.mean([t.meta["reward"] for t in spa[i:i + 4]]) for i in range(0, 16, 4)]
  assert spa_acc == [0.25, 0.75, 0.5, 0.5]
  assert m["spa/problems"] == 6 and m["vps/reward_mean"] == pytest.approx(3 / 9)
  assert out.roles.tolist() == [G.SOLVER] * 12 + [G.SYNTHESIZER] * 6 + [G.SOLVER] * 16
  assert m["batch/oqa_rows"] == 12 and m["batch/vps_rows"] == 6 and m["batch/spa_rows"] == 16


def test_vps_rewards_of_the_trained_groups():
  game, _ = make_game()
  out = play(game)
  adv = step_rows(game.rl, G, out)[1]
  vps = np.flatnonzero(out.roles == G.SYNTHESIZER)
  groups = out.prompt_index[vps]
  rewards = {}
  for g in np.unique(groups):
    rows = vps[groups == g]
    rewards[int(g)] = [1.0 if adv[r] > 0 else 0.0 for r in rows]
  assert sorted(map(sorted, rewards.values())) == [[0.0, 0.0, 1.0], [0.0, 1.0, 1.0]]


def test_group_ids_never_mix_and_advantages_are_per_group():
  game, _ = make_game()
  out = play(game)
  adv = step_rows(game.rl, G, out)[1]
  g = out.prompt_index
  # each group is one contiguous block of one section and one role, of the section's size
  secs = _sections(out)
  starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
  assert len(starts) == len(np.unique(g)) == 3 + 2 + 4
  sizes = np.diff(np.r_[starts, len(g)])
  assert sizes.tolist() == [4, 4, 4, 3, 3, 4, 4, 4, 4]
  for s, size in zip(starts, sizes):
    block = slice(s, s + size)
    assert len(set(secs[block])) == 1 and len(set(out.roles[block].tolist())) == 1
  # advantages equal GRPO computed on each group alone
  rewards = np.asarray([t.meta.get("reward", np.nan) for t in out.trajectories])
  for s, size in zip(starts, sizes):
    block = slice(s, s + size)
    if secs[s] == "vps":
      continue        # VPS rows carry the VPS reward, checked above
    alone = grpo_advantages(rewards[block], np.zeros(size, np.int32))
    np.testing.assert_allclose(adv[block], alone, rtol=1e-6)
    assert abs(adv[block].sum()) < 1e-5


def test_skip_when_nothing_is_under_performing():
  easy = [p for p in PROBLEMS if p.id in ("P0", "P3", "P4")]
  game, llm = make_game(problems=easy, batch_size=3)
  out = play(game)
  assert out.trajectories == [] and out.rewards.size == 0
  assert out.metrics["svs/skipped"] == 1.0 and out.metrics["svs/skipped_total"] == 1.0
  assert llm.calls == [("solve", 12)]                  # no synthesis, no SPA
  assert out.samples and out.samples[0]["kind"] == "problem"
  play(game)
  assert game.state_dict() == {"skipped_total": 2}
  game.load_state_dict({"skipped_total": 7})
  assert game.skipped_total == 7


def test_bounds_come_from_the_config():
  game, _ = make_game(under_lower=0.5, under_upper=0.5)   # only P2
  out = play(game)
  assert out.metrics["oqa/under_performing"] == 1 and out.metrics["vps/inputs"] == 2
  game, _ = make_game(positive_lower=0.75, positive_upper=0.75)   # only c = 3 is positive
  out = play(game)
  assert out.metrics["vps/train_groups"] == 1                     # P2 #0 (its c = 3 one)


def test_long_synthesis_prompts_are_dropped():
  game, llm = make_game(max_prompt_tokens=5, skip_without_synthesis=False)
  out = play(game)
  assert out.metrics["vps/inputs"] == 0 and out.metrics["vps/dropped_long_prompts"] == 3
  assert ("synth", 0) not in llm.calls and len(llm.calls) == 1
  assert _sections(out) == ["oqa"] * 12                # the option: OQA still trains
  assert out.metrics["svs/skipped"] == 0.0


def test_step_is_skipped_when_no_synthetic_problem_is_extracted():
  """The original's rule (the default): no valid synthetic problem -> no update at all."""
  no_block = {k: [None] * 3 for k in SYNTH}             # every synthesis: "I cannot tell."
  import unittest.mock
  with unittest.mock.patch.dict(SYNTH, no_block):
    game, llm = make_game()
    out = play(game)
  assert out.metrics["svs/skipped"] == 1.0 and out.metrics["svs/skipped_no_synthesis"] == 1.0
  assert out.metrics["svs/skipped_total"] == 1.0 and out.metrics["vps/valid_rate"] == 0.0
  assert out.trajectories == [] and len(out.rewards) == 0
  assert [c[0] for c in llm.calls] == ["solve", "synth"]     # no SPA rollouts
  # the option keeps training the OQA groups of the same step
  with unittest.mock.patch.dict(SYNTH, no_block):
    game, _ = make_game(skip_without_synthesis=False)
    out = play(game)
  assert out.metrics["svs/skipped"] == 0.0 and _sections(out) == ["oqa"] * 12


def test_token_filter_on_the_solving_prompt():
  """`problem_filter="tokens"`: a synthetic problem whose solving prompt (problem + the boxed
  suffix, chat formatted) is longer than max_problem_prompt_tokens is rejected."""
  game, _ = make_game(max_problem_prompt_tokens=10_000)
  block = "```text\n" + " ".join(["word"] * 30) + "\n```"
  assert game.check_problem(block)[0] is not None
  n_tokens = len(game.engine.tok.prompt_ids(P.solve_messages(" ".join(["word"] * 30))))
  game.max_problem_prompt_tokens = n_tokens
  assert game.check_problem(block)[1] is None                      # fits exactly
  game.max_problem_prompt_tokens = n_tokens - 1
  assert game.check_problem(block) == (None, "too_long_tokens")
  # the token filter has no character bounds (the original has none): a 3-character problem
  assert game.check_problem("```text\nx=1\n```") == ("x=1", None)
  # the "chars" option is ssp-jax's earlier filter
  game.cfg.problem_filter = "chars"
  assert game.check_problem("```text\nx=1\n```") == (None, "too_short")
  # a play() with a tiny limit rejects every synthesis for its length and skips the step
  game, _ = make_game()
  game.max_problem_prompt_tokens = 3
  out = play(game)
  assert out.metrics["vps/reject/too_long_tokens"] > 0 and out.metrics["svs/skipped"] == 1.0


def test_samples_show_problems_and_syntheses():
  game, _ = make_game()
  out = play(game)
  first = out.samples[0]
  assert first["id"] == "P1" and first["accuracy"] == 0.25
  assert first["syntheses"][0]["vps_reward"] == 1.0 and first["syntheses"][2]["reject"] == \
      "no_block"
  assert len(out.samples) == len(PROBLEMS)


def test_step_feeds_the_real_learner():
  """The step's rows through `make_batch` and a real (tiny) learner update."""
  import models
  from ssp_jax.rl.learner import Learner
  cfg = models.ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                           num_heads=4, num_kv_heads=2, head_dim=8)
  game, _ = make_game()
  learner = Learner(cfg, game.rl)
  before = learner.state["params"]["embed"].copy()
  c = types.SimpleNamespace(learner=learner, game=game, frozen_params=None, pad_id=0,
                            config=types.SimpleNamespace(rl=game.rl))
  import jax
  metrics, samples = train_one_step(c, 0, jax.random.PRNGKey(0))
  assert metrics["updates"] == 1.0 and np.isfinite(metrics["loss"])
  assert metrics["grad_norm"] > 0 and metrics["svs/skipped"] == 0.0
  assert not np.allclose(np.asarray(learner.state["params"]["embed"]), np.asarray(before))
