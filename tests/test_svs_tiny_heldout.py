"""`svs_tiny` evaluates on held-out arithmetic (no training problem), and `ssp-jax eval` with an
SvS config writes results.md and merges results.json like the QA evaluation."""
import json
import os

from ssp_jax import cli, config_loader
from ssp_jax.svs import arith
from ssp_jax.svs.data import load_problems

SVS_TINY = config_loader.repo_path("configs", "svs_tiny.py")


def _texts(path):
  return {p.problem for p in load_problems(path)}


def test_committed_heldout_set_is_the_documented_command(tmp_path):
  out = tmp_path / "h.jsonl"
  arith.main(["--out", str(out), "--n", "64", "--seed", "1", "--levels", "2,3",
              "--weights", "1,1", "--exclude", arith.DEFAULT_PATH])
  assert out.read_text() == open(arith.HELDOUT_PATH).read()


def test_svs_tiny_evaluates_on_problems_it_does_not_train_on():
  c = config_loader.load_config_file(SVS_TINY)
  train = _texts(c.svs.train_path)
  assert len(train) == 128
  (spec,) = dict(c.eval.datasets).values()
  held = _texts(spec)
  assert len(held) == 64 and not train & held
  levels = {p.source for p in load_problems(spec)}
  assert levels == {"arith-L2", "arith-L3"}


def test_exclude_skips_problems_with_or_without_the_hint():
  first = arith.generate(5, levels=(1,), seed=0, format_hint=True)
  again = arith.generate(5, levels=(1,), seed=0, exclude=[r["problem"] for r in first])
  assert not {r["problem"] for r in again} & {r["problem"][len(arith.FORMAT_HINT):]
                                               for r in first}


def test_svs_eval_writes_results_md_and_merges(tmp_path, capsys):
  from ssp_jax.testing.tiny_checkpoint import make_tiny_checkpoint
  ckpt = make_tiny_checkpoint(str(tmp_path / "ckpt"))
  out = tmp_path / "out"
  argv = ["eval", "--config", SVS_TINY, "--checkpoint", ckpt, "--out", str(out), "--limit", "2",
          "--config.mesh.num_devices=1", "--config.eval.max_new_tokens=8",
          "--config.rollout.steps_per_call=8", "--config.model.chat_format=chatml"]
  assert cli.main(argv) == 0
  err = capsys.readouterr().err
  assert "eval arith_heldout: 100%" in err and "2/2" in err
  res = json.load(open(out / "results.json"))
  srcs = [k for k in res if k != "meta"]
  assert srcs and all(res[s]["dataset"] == "arith_heldout" for s in srcs)
  assert res["meta"]["kind"] == "math" and res["meta"]["data"] == {
      "arith_heldout": arith.HELDOUT_PATH}
  md = (out / "results.md").read_text()
  assert md.startswith("# ssp-jax eval: ") and "| source | problems | acc | pass@1 | pass@2 |" in md
  # a second dataset into the same --out keeps the first one's rows
  other = tmp_path / "train.jsonl"
  other.write_text("".join(json.dumps({"id": f"t{i}", "problem": "What is 1 + 1?",
                                       "answer": "2"}) + "\n" for i in range(2)))
  assert cli.main(argv + ["--data", f"train={other}"]) == 0
  res2 = json.load(open(out / "results.json"))
  assert all(res2[s] == res[s] for s in srcs) and res2["train"]["dataset"] == "train"
  assert (out / "predictions_arith_heldout.jsonl").exists()
  assert "evaluation runs" in (out / "results.md").read_text()
