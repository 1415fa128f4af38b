"""`ssp-jax eval` end to end: the embedded SmolLM2, a real retriever, 10 shipped questions."""
import json
import os

import pytest

from ssp_jax import cli, metrics
from ssp_jax.eval import data

TINY = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", "tiny.py")
FAST = ["--config.mesh.num_devices=1", "--config.eval.max_new_tokens=48",
        "--config.rollout.steps_per_call=48",
        "--config.eval.batch_size=10"]


@pytest.fixture(scope="module")
def slice10(tmp_path_factory):
  exs = data.load_dataset("builtin:wiki_sample")[:10]
  path = tmp_path_factory.mktemp("data") / "wiki10.jsonl"
  path.write_text("".join(json.dumps(e) + "\n" for e in exs))
  return str(path), exs


@pytest.fixture(scope="module")
def bm25_index(tmp_path_factory):
  from retrieval.corpus import default_corpus_path
  from retrieval.index import build_bm25
  out = str(tmp_path_factory.mktemp("bm25"))
  build_bm25(default_corpus_path(), out, progress=False)
  return out


def _check_outputs(out_dir, exs, name="wiki10"):
  res = json.load(open(os.path.join(out_dir, "results.json")))
  preds = [json.loads(line)
           for line in open(os.path.join(out_dir, f"predictions_{name}.jsonl"))]
  assert [p["id"] for p in preds] == [e["id"] for e in exs]
  s = res[name]
  assert s["n"] == len(preds) == 10
  for p, e in zip(preds, exs):
    assert p["golden_answers"] == e["golden_answers"]
    assert p["prediction"] == metrics.extract_answer(p["response"])
    assert p["em"] == metrics.exact_match(p["prediction"], e["golden_answers"])
    assert p["f1"] == pytest.approx(metrics.f1(p["prediction"], e["golden_answers"]))
    assert 0 < p["length"] <= p["response_tokens"]
    assert p["num_searches"] == len(p["queries"])
  for key, field in (("em", "em"), ("f1", "f1"), ("searches_mean", "num_searches"),
                     ("length_mean", "length")):
    assert s[key] == pytest.approx(sum(p[field] for p in preds) / 10), key
  assert res["averages"]["overall"]["em"] == pytest.approx(s["em"])
  md = open(os.path.join(out_dir, "results.md")).read()
  assert f"| Metric | {name} |" in md   # only the columns with data
  return res, preds


def test_eval_end_to_end_default_model_bm25(tmp_path, slice10, bm25_index):
  path, exs = slice10
  rc = cli.main(["eval", "--config", TINY, "--data", f"wiki10={path}", "--out", str(tmp_path),
                 f"--config.retrieval.index_dir={bm25_index}", *FAST])
  assert rc == 0
  res, _ = _check_outputs(str(tmp_path), exs)
  assert res["meta"]["policy"].startswith("embedded")


@pytest.mark.slow
def test_eval_end_to_end_default_retriever(tmp_path, slice10):
  """The tiny config's own retriever (the MiniLM index; built on first use, minutes on CPU)."""
  path, exs = slice10
  rc = cli.main(["eval", "--config", TINY, "--data", f"wiki10={path}", "--out", str(tmp_path),
                 *FAST])
  assert rc == 0
  _check_outputs(str(tmp_path), exs)


def test_eval_rejects_bad_data_before_loading_the_model(tmp_path, capsys):
  rc = cli.main(["eval", "--config", TINY, "--data", "nq", "--out", str(tmp_path)])
  assert rc == 2 and "NAME=FILE" in capsys.readouterr().err
  rc = cli.main(["eval", "--config", TINY, "--data", f"nq={tmp_path}/missing.jsonl",
                 "--out", str(tmp_path)])
  assert rc == 2 and "does not exist" in capsys.readouterr().err
  assert not os.path.exists(tmp_path / "results.json")


def test_eval_with_policy_judge_on_a_tiny_checkpoint(tmp_path, slice10, bm25_index):
  """`--config.eval.judge=ssp` wires the policy as judge and reports the judge metric (verdict
  parsing and EM short-circuit are unit-tested in test_eval_report.py)."""
  from ssp_jax.testing.tiny_checkpoint import make_tiny_checkpoint
  path, exs = slice10
  ckpt = make_tiny_checkpoint(str(tmp_path / "tiny"))
  out = tmp_path / "out"
  rc = cli.main(["eval", "--config", TINY, "--checkpoint", ckpt, "--data", f"wiki10={path}",
                 "--out", str(out), f"--config.retrieval.index_dir={bm25_index}",
                 "--config.eval.judge=ssp", "--config.ssp.judge.max_new_tokens=4", *FAST])
  assert rc == 0
  res, preds = _check_outputs(str(out), exs)
  assert all(p["judge"] in (0.0, 1.0) and p["judge"] >= p["em"] for p in preds)
  assert res["wiki10"]["judge"] == pytest.approx(sum(p["judge"] for p in preds) / 10)
  assert res["meta"]["policy"] == ckpt and res["meta"]["judge"] == "ssp"
  assert "| Judge |" in open(out / "results.md").read()


def test_flags_fold_into_the_eval_config():
  from ssp_jax import eval_cli
  args = cli.build_parser().parse_args(
      ["eval", "--config", TINY, "--limit", "5", "--seed", "3", "--out", "/tmp/unused",
       "--config.eval.max_new_tokens=7"])
  config, specs = eval_cli._setup(args)
  assert (config.eval.limit, config.eval.seed, config.eval.max_new_tokens) == (5, 3, 7)
  assert specs == dict(config.eval.datasets) == {"wiki_sample": "builtin:wiki_sample"}
