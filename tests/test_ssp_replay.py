"""Replay buffer, its periodic reset, the fill strategies and serialisation."""
import json

import numpy as np
import pytest

from ssp_jax.ssp import replay as RP


def _p(i, rate=0.2, source="fresh"):
  return RP.Problem(f"q{i}", f"a{i}", 2, rate, 1, source)


def test_add_sample_reset():
  buf = RP.ReplayBuffer(reset_every=10)
  buf.add([_p(0), _p(1), RP.dummy_problem(1)])
  assert len(buf) == 2                                    # dummies never enter the buffer
  got = buf.sample(5, np.random.default_rng(0))
  assert len(got) == 5 and {g.question for g in got} <= {"q0", "q1"}
  assert all(g.source == "replay" for g in got)
  assert not buf.maybe_reset(9) and len(buf) == 2
  assert buf.maybe_reset(10) and len(buf) == 0
  never = RP.ReplayBuffer(reset_every=0)
  never.add([_p(0)])
  assert not never.maybe_reset(10) and len(never) == 1


def test_prefers_unsolved_and_capacity():
  buf = RP.ReplayBuffer(max_solve_rate=0.5, capacity=3)
  buf.add([_p(0, 1.0), _p(1, 0.2), _p(2, 0.9), _p(3, 0.1)])
  assert [p.question for p in buf.items] == ["q1", "q2", "q3"]
  got = {p.question for p in buf.sample(20, np.random.default_rng(1))}
  assert got == {"q1", "q3"}
  assert len(buf.sample(2, np.random.default_rng(1))) == 2


@pytest.mark.parametrize("strategy,want_dummy", [("replay", 0), ("full_reuse", 0),
                                                 ("dummy", 3), ("resample", 3)])
def test_fill(strategy, want_dummy):
  buf = RP.ReplayBuffer()
  buf.add([_p(9)])
  out = RP.fill([_p(0)], 4, strategy, buf, np.random.default_rng(0), step=3)
  assert len(out) == 4 and out[0].question == "q0"
  assert sum(p.source == "dummy" for p in out) == want_dummy
  empty = RP.fill([_p(0)], 3, "replay", RP.ReplayBuffer(), np.random.default_rng(0), 3)
  assert [p.source for p in empty] == ["fresh", "dummy", "dummy"]
  with pytest.raises(ValueError, match="unknown"):
    RP.fill([], 2, "bogus", buf, np.random.default_rng(0), 3)


def test_state_roundtrip_json():
  buf = RP.ReplayBuffer()
  buf.add([_p(0), RP.Problem("q", ["x", "y"], 3, None, 2)])
  buf.maybe_reset(20)
  buf.add([_p(5)])
  state = json.loads(json.dumps(buf.state_dict()))
  other = RP.ReplayBuffer()
  other.load_state_dict(state)
  assert [p.to_dict() for p in other.items] == [p.to_dict() for p in buf.items]
  assert other.last_reset_step == 20
