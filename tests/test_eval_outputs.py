"""`ssp-jax eval --out DIR` onto earlier results: nothing is dropped silently, no stale
predictions, an unusable DIR is reported before the evaluation; progress bars on stderr."""
import json
import os
import time

import pytest

from ssp_jax import cli
from ssp_jax.eval import data, outputs

TINY = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", "tiny.py")
FAST = ["--config.mesh.num_devices=1", "--config.eval.max_new_tokens=16",
        "--config.rollout.steps_per_call=16", "--config.rollout.batch_size=2"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  """A tiny random checkpoint, a BM25 index and two 3-question datasets."""
  from retrieval.corpus import default_corpus_path
  from retrieval.index import build_bm25
  from ssp_jax.testing.tiny_checkpoint import make_tiny_checkpoint
  root = tmp_path_factory.mktemp("evalout")
  ckpt = make_tiny_checkpoint(str(root / "ckpt"))
  index = str(root / "bm25")
  build_bm25(default_corpus_path(), index, progress=False)
  exs = data.load_dataset("builtin:wiki_sample")
  files = {}
  for name, part in (("a", exs[:3]), ("b", exs[3:6])):
    files[name] = root / f"{name}.jsonl"
    files[name].write_text("".join(json.dumps(e) + "\n" for e in part))
  return ckpt, index, files


def _eval(setup, out, *names, extra=()):
  ckpt, index, files = setup
  argv = ["eval", "--config", TINY, "--checkpoint", ckpt, "--out", str(out),
          f"--config.retrieval.index_dir={index}", *FAST, *extra]
  for n in names:
    argv += ["--data", f"{n}={files[n]}"]
  return cli.main(argv)


def test_second_run_keeps_earlier_datasets_and_replaces_its_own(setup, tmp_path, capsys):
  out = tmp_path / "out"
  assert _eval(setup, out, "a") == 0
  run_a = json.load(open(out / "results.json"))["a"]["run"]
  capsys.readouterr()
  assert _eval(setup, out, "b") == 0
  res = json.load(open(out / "results.json"))
  assert set(res) >= {"a", "b"} and res["a"]["run"] == run_a != res["b"]["run"]
  assert set(res["meta"]["runs"]) == {run_a, res["b"]["run"]}
  assert res["averages"]["overall"]["datasets"] == ["a", "b"]
  assert (out / "predictions_a.jsonl").exists() and (out / "predictions_b.jsonl").exists()
  md = (out / "results.md").read_text()
  assert "| Metric | a | b |" not in md and "| Metric | Avg. | a | b |" in md
  assert "come from 2 evaluation runs" in md
  assert "replacing" not in capsys.readouterr().err
  # the third run evaluates `a` again: it says so and replaces only `a`
  assert _eval(setup, out, "a", extra=["--limit", "2"]) == 0
  err = capsys.readouterr().err
  assert "replacing the earlier results of a" in err and run_a in err
  res2 = json.load(open(out / "results.json"))
  assert res2["a"]["run"] != run_a and res2["a"]["n"] == 2
  assert res2["b"] == res["b"]
  preds_a = [json.loads(line) for line in open(out / "predictions_a.jsonl")]
  assert len(preds_a) == 2   # the new predictions, not 3 stale ones beside 2-question scores
  assert run_a not in res2["meta"]["runs"]
  assert not [f for f in os.listdir(out) if ".tmp" in f or "probe" in f]


def test_progress_bars_on_stderr_and_quiet_when_off(setup, tmp_path, capsys):
  assert _eval(setup, tmp_path / "o1", "a") == 0
  err = capsys.readouterr().err
  assert "eval a: 100%" in err and "3/3" in err
  assert _eval(setup, tmp_path / "o2", "a", extra=["--config.progress=false"]) == 0
  assert "eval a:" not in capsys.readouterr().err


def test_unwritable_out_is_reported_before_the_evaluation(setup, tmp_path, capsys):
  blocker = tmp_path / "file"
  blocker.write_text("x")
  t0 = time.perf_counter()
  assert _eval(setup, blocker / "out", "a") == 2
  assert time.perf_counter() - t0 < 20      # no model loaded, no rollouts
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and "--out" in err and "not a writable directory" in err


def test_dead_judge_endpoint_is_probed_before_the_evaluation(setup, tmp_path, capsys):
  """`eval.judge=ssp` with a URL judge that does not answer: exit 2 with one line naming
  ssp.judge.source, before the model loads; nothing is written."""
  import socket
  s = socket.socket()
  s.bind(("127.0.0.1", 0))
  port = s.getsockname()[1]
  s.close()                       # nothing listens there now
  t0 = time.perf_counter()
  rc = _eval(setup, tmp_path / "out", "a",
             extra=["--config.eval.judge=ssp", f"--config.ssp.judge.source=http://127.0.0.1:{port}/v1",
                    "--config.ssp.judge.model=m"])
  assert rc == 2 and time.perf_counter() - t0 < 20
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and "config.ssp.judge.source" in err, err
  assert "start the server" in err
  assert not (tmp_path / "out" / "results.json").exists()


def test_unreadable_or_other_kind_results_are_refused(tmp_path):
  (tmp_path / "results.json").write_text("{not json")
  with pytest.raises(outputs.OutputError, match="move it away"):
    outputs.prepare(str(tmp_path), "qa")
  (tmp_path / "results.json").write_text(json.dumps({"arith-L1": {"acc": 0.5}, "meta": {}}))
  with pytest.raises(outputs.OutputError, match="math results"):
    outputs.prepare(str(tmp_path), "qa")
  assert outputs.prepare(str(tmp_path), "math")["arith-L1"]["acc"] == 0.5


def test_merge_keeps_legacy_results_and_marks_them():
  previous = {"nq": {"n": 5, "em": 0.2}, "hotpotqa": {"n": 5, "em": 0.1},
              "averages": {}, "meta": {"policy": "old"}}
  entries, meta, replaced = outputs.merge(previous, {"nq": {"n": 3, "em": 0.5}}, ["nq"], "r2",
                                          {"kind": "qa", "policy": "new"})
  assert replaced == ["nq"]
  assert entries["hotpotqa"] == {"n": 5, "em": 0.1, "run": "earlier"}
  assert entries["nq"] == {"n": 3, "em": 0.5, "run": "r2"}
  assert meta["runs"] == {"earlier": {"policy": "old"}, "r2": {"kind": "qa", "policy": "new"}}


def test_runs_in_one_process_within_one_second_get_their_own_ids():
  # two evaluations into one --out from one process (a script, the tests) can start within
  # the same second; with one id they were merged as one run and results.md lost its run column
  ids = [outputs.new_run_id() for _ in range(3)]
  assert len(set(ids)) == 3
