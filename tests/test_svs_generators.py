"""The offline problem generators (ssp_jax/svs/arith.py, gsm.py), their committed sets, and the
configs that use them (configs/svs_tiny.py, configs/svs_gsm_h200.py)."""
import json
import os
import re

import pytest

from ssp_jax import config_loader
from ssp_jax.svs import arith, gsm, math_grader
from ssp_jax.svs.data import load_problems
from ssp_jax.svs.validate import validate_config


def _numbers(text):
  return {int(x) for x in re.findall(r"\d+", text)}


def _read(path):
  with open(path) as f:
    return [json.loads(line) for line in f]


# -- arithmetic --------------------------------------------------------------------------------
@pytest.mark.parametrize("level", sorted(arith.LEVELS))
def test_arith_levels_exact_answers_from_the_text(level):
  recs = arith.generate(40, levels=(level,), seed=level)
  assert len({r["problem"] for r in recs}) == 40
  for r in recs:
    assert r["level"] == level and r["data_source"] == f"arith-L{level}"
    assert int(r["answer"]) == arith.evaluate(r["expr"]) >= 0
    assert _numbers(r["expr"]) <= _numbers(r["problem"]), r   # every operand is in the text
    assert math_grader.grade(f"so \\boxed{{{r['answer']}}}", r["answer"]) == 1.0


def test_arith_graded_difficulty_and_seeding():
  one = arith.generate(30, levels=(1,), seed=0)
  assert all(int(r["answer"]) <= 18 for r in one)
  assert all(len(r["expr"].split()) >= 5 for r in arith.generate(10, levels=(7,), seed=0))
  assert arith.generate(20, seed=3) == arith.generate(20, seed=3)
  assert arith.generate(20, seed=3) != arith.generate(20, seed=4)
  with pytest.raises(ValueError, match="unknown arithmetic level"):
    arith.generate(3, levels=(9,))
  with pytest.raises(ValueError):
    arith.evaluate("__import__('os')")


def test_committed_arith_set_is_the_generator_output(tmp_path):
  out = tmp_path / "a.jsonl"
  arith.main(["--out", str(out)])
  committed = os.path.join(gsm.DATA_DIR, "arith_graded.jsonl")
  assert out.read_text() == open(committed).read()
  assert len(load_problems(committed)) == arith.DEFAULT_N


# -- grade-school word problems ----------------------------------------------------------------
def test_gsm_answers_are_exact_and_use_the_numbers_of_the_text():
  recs = gsm.generate(len(gsm.TEMPLATES) * 20, seed=11)
  assert {r["template"] for r in recs} == set(gsm.TEMPLATES)
  for r in recs:
    assert int(r["answer"]) == gsm.evaluate(r["expr"]) >= 0
    assert _numbers(r["expr"]) <= _numbers(r["problem"]) | gsm.WORD_CONSTANTS, r
    assert len(re.findall(r"[-+*/]", r["expr"])) >= 2 or r["template"] == "garden", r
  with pytest.raises(ValueError, match="whole number"):
    gsm.evaluate("7 / 2")
  with pytest.raises(ValueError, match="unsupported"):
    gsm.evaluate("2 ** 3")


def test_committed_gsm_sets_are_disjoint_and_reproducible(tmp_path):
  train, held = _read(gsm.TRAIN_PATH), _read(gsm.HELDOUT_PATH)
  assert (len(train), len(held)) == (gsm.N_TRAIN, gsm.N_HELDOUT)
  assert not {r["problem"] for r in train} & {r["problem"] for r in held}
  assert len({r["problem"] for r in train}) == len(train)
  t, h = tmp_path / "t.jsonl", tmp_path / "h.jsonl"
  gsm.main(["--train", str(t), "--heldout", str(h)])
  assert t.read_text() == open(gsm.TRAIN_PATH).read()
  assert h.read_text() == open(gsm.HELDOUT_PATH).read()
  problems = load_problems(gsm.HELDOUT_PATH)      # the SvS loader reads them
  assert problems[0].answer == held[0]["answer"] and problems[0].source == "gsm_heldout"


# -- configs -----------------------------------------------------------------------------------
def test_gsm_h200_config_variants():
  svs = config_loader.load_config_file(config_loader.repo_path("configs", "svs_gsm_h200.py"))
  rlvr = config_loader.load_config_file(
      config_loader.repo_path("configs", "svs_gsm_h200.py") + ":rlvr")
  validate_config(svs)
  validate_config(rlvr)
  assert svs.svs.synthesis and not rlvr.svs.synthesis
  assert svs.workdir != rlvr.workdir
  assert svs.model.path == "registry:qwen2.5-coder-0.5b-instruct"
  assert svs.svs.n == 8 and svs.rollout.dtype == "bfloat16" and svs.rl.compute_dtype == "bfloat16"
  assert svs.svs.train_path == gsm.TRAIN_PATH
  assert dict(svs.eval.datasets) == {"gsm_heldout": gsm.HELDOUT_PATH}
  assert max(svs.eval.ks) == svs.eval.n
  with pytest.raises(ValueError, match=":svs .* or :rlvr"):
    config_loader.load_config_file(config_loader.repo_path("configs", "svs_gsm_h200.py") + ":x")


def test_svs_tiny_trains_on_graded_arithmetic():
  c = config_loader.load_config_file(config_loader.repo_path("configs", "svs_tiny.py"))
  validate_config(c)
  assert c.svs.train_path.endswith("arith_graded.jsonl") and os.path.exists(c.svs.train_path)
  assert c.model.path == ""   # the embedded SmolLM2-135M-Instruct
