"""`svs.synthesis = False`: the RLVR baseline (plain GRPO on the problems, no VPS/SPA), on the
scripted tables of tests/test_svs_game.py (the model is the scripted double there; grading,
training sets, advantages and the learner are the real code)."""
import types

import jax
import numpy as np

from ssp_jax.run.trainer import train_one_step
from ssp_jax.svs import config as svs_config
from ssp_jax.svs import game as G
from test_svs_game import PROBLEMS, make_game, play

from rl_helpers import step_rows


def test_default_keeps_synthesis_on():
  assert svs_config.get_svs_config().synthesis is True


def test_rlvr_trains_every_group_with_signal_and_synthesises_nothing():
  game, llm = make_game(synthesis=False)
  out = play(game)
  adv = step_rows(game.rl, G, out)[1]
  m = out.metrics
  assert llm.calls == [("solve", 20)]                       # OQA only
  # P1 (1/4), P2 (2/4) and P4 (3/4) have a signal; P0 (0/4) and P3 (4/4) do not
  assert [t.meta["answer"] for t in out.trajectories[::4]] == ["12", "13", "15"]
  assert {t.meta["svs"] for t in out.trajectories} == {"oqa"}
  assert (out.roles == G.SOLVER).all() and len(np.unique(out.prompt_index)) == 3
  assert m["svs/skipped"] == 0.0 and m["oqa/train_groups"] == 3 and m["batch/oqa_rows"] == 12
  assert not any(k.startswith(("vps/", "spa/")) for k in m)
  for g in np.unique(out.prompt_index):                      # GRPO: zero-mean per group
    assert abs(adv[out.prompt_index == g].sum()) < 1e-5


def test_rlvr_trains_a_step_svs_would_skip():
  """P4 alone (3 of 4 right) is not under-performing: SvS skips, RLVR trains it."""
  p4 = [p for p in PROBLEMS if p.id == "P4"]
  svs, _ = make_game(problems=p4, batch_size=1)
  rlvr, _ = make_game(problems=p4, batch_size=1, synthesis=False)
  assert play(svs).metrics["svs/skipped"] == 1.0
  out = play(rlvr)
  assert out.metrics["svs/skipped"] == 0.0 and len(out.trajectories) == 4


def test_rlvr_skips_when_no_group_has_a_signal():
  flat = [p for p in PROBLEMS if p.id in ("P0", "P3")]
  game, llm = make_game(problems=flat, batch_size=2, synthesis=False)
  out = play(game)
  assert out.trajectories == [] and out.metrics["svs/skipped"] == 1.0
  assert out.metrics["svs/skipped_total"] == 1.0 and llm.calls == [("solve", 8)]


def test_rlvr_step_updates_the_real_learner():
  import models
  from ssp_jax.rl.learner import Learner
  cfg = models.ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                           num_heads=4, num_kv_heads=2, head_dim=8)
  game, _ = make_game(synthesis=False)
  learner = Learner(cfg, game.rl)
  before = np.asarray(learner.state["params"]["embed"]).copy()
  c = types.SimpleNamespace(learner=learner, game=game, frozen_params=None, pad_id=0,
                            config=types.SimpleNamespace(rl=game.rl))
  metrics, _ = train_one_step(c, 0, jax.random.PRNGKey(0))
  assert metrics["updates"] == 1.0 and metrics["grad_norm"] > 0
  assert not np.allclose(np.asarray(learner.state["params"]["embed"]), before)
