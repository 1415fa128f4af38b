"""Noise-document mixing and RAG verification (never fails open)."""
import numpy as np

from ssp_jax.ssp import rag
from ssp_jax.types import Trajectory


def test_mix_noise_counts_shuffle_and_seed():
  mats = [f"M{i}" for i in range(7)] + [""]
  out = rag.mix_noise(mats, 4, np.random.default_rng(0))
  assert len(out) == 8
  for i, s in enumerate(out[:7]):
    blocks = s.split("\n\n")
    assert len(blocks) == 5 and f"M{i}" in blocks and len(set(blocks)) == 5
    assert "" not in blocks
  assert out == rag.mix_noise(mats, 4, np.random.default_rng(0))      # seeded
  orders = {rag.mix_noise(mats, 4, np.random.default_rng(s))[0].split("\n\n")[0]
            for s in range(20)}
  assert len(orders) > 1                                              # own docs not always first
  small = rag.mix_noise(["A", "B"], 4, np.random.default_rng(0))
  assert sorted(small[0].split("\n\n")) == ["A", "B"]                 # fewer others than k
  assert rag.mix_noise(["A", "B"], 0, np.random.default_rng(0)) == ["A", "B"]


def test_materials_dedupe():
  docs = [[{"id": "1", "title": "T1", "text": "a"}], [{"id": "1", "title": "T1", "text": "a"},
                                                     {"id": "2", "title": "T2", "text": "b"}]]
  t = Trajectory([1], [1], [1], [0.0], docs=docs)
  assert rag.materials_of(t) == "Doc 1 (Title: T1) a\nDoc 2 (Title: T2) b"


class _Gen:
  def __init__(self, replies=None, exc=None):
    self.replies, self.exc, self.seen = replies, exc, None

  def generate_text(self, messages, *, max_new_tokens, temperature):
    self.seen = messages
    if self.exc:
      raise self.exc
    return self.replies


def test_verify_verdicts():
  gen = _Gen(["<answer>Paris</answer>", "<answer>Rome</answer>", "no tag"])
  v = rag.verify(gen, ["q1", "q2", "q3"], ["m1", "m2", "m3"], [["Lutetia", "paris"], "Oslo",
                                                              "x"], max_new_tokens=8,
                 temperature=0.1)
  assert [x.reason for x in v] == [rag.PASS, rag.MISMATCH, rag.NO_ANSWER]
  assert [x.passed for x in v] == [True, False, False]
  assert "m2" in gen.seen[1][-1]["content"] and "q2" in gen.seen[1][-1]["content"]


def test_verifier_error_rejects_everything():
  v = rag.verify(_Gen(exc=RuntimeError("boom")), ["q1", "q2"], ["m", "m"], ["a", "b"],
                 max_new_tokens=8, temperature=0.1)
  assert [x.reason for x in v] == [rag.VERIFIER_ERROR] * 2 and not any(x.passed for x in v)
  v = rag.verify(_Gen(["<answer>a</answer>"]), ["q1", "q2"], ["m", "m"], ["a", "b"],
                 max_new_tokens=8, temperature=0.1)  # wrong count is an error too
  assert not any(x.passed for x in v)


class _Judge:
  def __init__(self, ok=None, exc=None):
    self.ok, self.exc = ok, exc

  def judge(self, q, p, r):
    if self.exc:
      raise self.exc
    return self.ok[:len(q)]


def test_judge_for_misses_and_judge_failure_rejects():
  gen = _Gen(["<answer>City of Light</answer>"])
  assert rag.verify(gen, ["q"], ["m"], ["Paris"], max_new_tokens=8, temperature=0.1,
                    judge=_Judge([True]))[0].judged
  v = rag.verify(gen, ["q"], ["m"], ["Paris"], max_new_tokens=8, temperature=0.1,
                 judge=_Judge(exc=RuntimeError("down")))
  assert not v[0].passed
