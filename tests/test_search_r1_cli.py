"""The Search-R1 baseline through `ssp-jax train/eval/plot`, the games table, the world section
and the two world configs.

The default-suite tests run the CLI in-process on a tiny random HF checkpoint and a BM25 index
over a few passages (both built here, offline), with configs/search_r1_world.py:tiny shrunk by
overrides and its world turned off (`world.size=0`, explicit paths). The world section is tested
with a world directory written here in the layout of `ssp_jax.world` (`fake_ensure`); the slow
tests run the `:tiny` variants of both world configs as a user does, with the real world.
"""
import json
import os
import subprocess
import sys
import time

import pytest

from ssp_jax import cli, plot_cli, world_config
from ssp_jax.run import games
from ssp_jax.config_loader import load_config_file
from ssp_jax.search_r1.config import equal_rollout_batch
from ssp_jax.search_r1.data import QuestionOrder, load_questions
from ssp_jax.testing.small_retriever import WIKI_SNIPPETS
from ssp_jax.testing.tiny_checkpoint import make_tiny_checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SSP_WORLD = os.path.join(REPO, "configs", "ssp_world.py")
SR1_WORLD = os.path.join(REPO, "configs", "search_r1_world.py")
VARIANTS = ("", ":0.5b", ":tiny")
QA = [("Who wrote Moby-Dick?", ["Herman Melville"], 1),
      ("Which river flows through the capital of France?", ["Seine"], 2),
      ("Where was the inventor of the telephone born?", ["Edinburgh"], 2),
      ("Which city is the capital of Poland?", ["Warsaw"], 1)]


def qa_lines(prefix):
  return "".join(json.dumps({"id": f"{prefix}{i}", "question": q, "golden_answers": a,
                             "hops": h, "kind": "test", "support": []}) + "\n"
                 for i, (q, a, h) in enumerate(QA))


def write_world(root):
  """A world directory in the layout `ssp_jax.world.ensure_world` returns."""
  os.makedirs(root, exist_ok=True)
  files = {
      "corpus": "".join(json.dumps({"id": str(i), "contents": c}) + "\n"
                        for i, c in enumerate(WIKI_SNIPPETS)),
      "answers": "".join(json.dumps({"ground_truth": a, "search_turns": h}) + "\n"
                         for _, a, h in QA),
      "qa_train": qa_lines("t"), "qa_heldout": qa_lines("h")}
  for name, text in files.items():
    with open(os.path.join(root, f"{name}.jsonl"), "w") as f:
      f.write(text)
  with open(os.path.join(root, "world.json"), "w") as f:
    json.dump({"seed": 0}, f)
  return str(root)


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
  root = tmp_path_factory.mktemp("assets")
  ckpt = make_tiny_checkpoint(str(root / "ckpt"))
  world = write_world(str(root / "world"))
  from retrieval.index import build_bm25
  build_bm25(os.path.join(world, "corpus.jsonl"), str(root / "index"), progress=False)
  train = root / "train.jsonl"
  train.write_text(qa_lines("t") + "{broken line\n")
  return dict(ckpt=ckpt, index=str(root / "index"), train=str(train), world=world,
              heldout=os.path.join(world, "qa_heldout.jsonl"))


def fast_args(assets, workdir, steps, verb="train"):
  args = [verb, "--config", SR1_WORLD + ":tiny", "--config.world.size=0",
          f"--config.model.path={assets['ckpt']}",
          f"--config.retrieval.index_dir={assets['index']}",
          f"--config.eval.datasets.world_heldout={assets['heldout']}",
          "--config.mesh.num_devices=1", "--config.rollout.max_response_tokens=16",
          "--config.rollout.max_prompt_tokens=512", "--config.rollout.cache_min_len=64",
          "--config.rollout.steps_per_call=16", "--config.eval.max_new_tokens=8",
          "--config.eval.limit=2"]
  if verb == "train":
    args += [f"--config.workdir={workdir}", f"--config.total_steps={steps}",
             f"--config.search_r1.train_path={assets['train']}", "--config.progress=false",
             "--config.search_r1.max_new_tokens=16", "--config.rl.bucket=64",
             "--config.rl.max_len=640", "--config.rl.logprob_chunk=64",
             "--config.warmstart.enabled=false"]   # tests/test_warmstart.py covers it
  return args


def read_metrics(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(l) for l in f]


def sample_ids(workdir, step):
  with open(os.path.join(workdir, "samples", f"samples_{step}.jsonl")) as f:
    recs = [json.loads(l) for l in f]
  assert all({"question", "answer", "predictions"} <= set(r) for r in recs)
  return [r["id"] for r in recs]


REQUIRED = ("solver/reward_mean", "solver/solve_rate_mean", "solver/searches_mean",
            "solver/response_len", "solver/all_same_rate", "search/failed_rate",
            "time/rollout", "time/retrieval", "time/update", "time/step", "loss",
            "learner/updates_total", "compile/count", "time/compile",
            "rollout/calls", "rollout/policy_tokens", "perf/decode_ms_per_step",
            "rollout/occupancy", "time/rollout_decode")


def test_train_eval_resume_and_plot(assets, tmp_path, capsys):
  workdir = str(tmp_path / "run")
  assert cli.main(fast_args(assets, workdir, 1) + ["--config.eval.at_start=true"]) == 0
  rows = read_metrics(workdir)
  assert [r["step"] for r in rows] == [0, 1]
  assert "val/world_heldout/em" in rows[0] and "loss" not in rows[0]
  missing = [k for k in REQUIRED if k not in rows[1]]
  assert not missing, missing
  assert rows[1]["solver/num"] == 2 * 2                 # tiny: 2 questions x 2 attempts
  assert {"solver/reward_hop1", "solver/reward_hop2"} & set(rows[1])
  assert json.load(open(os.path.join(workdir, "config.json")))["game"] == "search_r1"
  # the questions of a step come from (seed, step): a resumed run draws the next ones
  qs, stats = load_questions(assets["train"])
  assert stats.bad == 1
  order = QuestionOrder(len(qs), 2, seed=0)
  assert sample_ids(workdir, 1) == [qs[i].id for i in order.indices(0)]
  assert cli.main(fast_args(assets, workdir, 2)) == 0
  rows2 = read_metrics(workdir)
  assert [r["step"] for r in rows2] == [0, 1, 2] and rows2[:2] == rows
  assert sample_ids(workdir, 2) == [qs[i].id for i in order.indices(1)]
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["1", "2"]
  # ssp-jax eval of the trained run: the QA evaluation with search, as for SSP
  out = tmp_path / "eval"
  assert cli.main(fast_args(assets, None, 0, "eval") + ["--checkpoint", workdir,
                                                        "--out", str(out)]) == 0
  res = json.load(open(out / "results.json"))
  assert "em" in res["world_heldout"] and "step 2" in res["meta"]["policy"]
  # ssp-jax plot: the game's keys, from the workdir's config.json
  capsys.readouterr()
  assert cli.main(["plot", workdir, "--out", str(tmp_path / "plots")]) == 0
  files = json.loads(capsys.readouterr().out)["files"]
  names = {os.path.basename(p) for p in files}
  assert {"solver_reward_mean.png", "solver_all_same_rate.png",
          "val_world_heldout_em.png"} <= names
  assert not any(n.startswith("proposer") for n in names)


def test_plot_keys_of_the_game():
  rows = [{"step": 1, "solver/reward_mean": 0.1, "solver/all_same_rate": 0.5,
           "solver/reward_hop2": 0.2, "loss": 1.0}]
  assert plot_cli.default_keys(rows, games.lookup("search_r1")) == ["solver/reward_mean", "solver/all_same_rate", "loss",
                                         "solver/reward_hop2"]


def _config_file(tmp_path, game):
  path = tmp_path / f"game_{game}.py"
  path.write_text("from ssp_jax.ssp.config import base_run_config\n\n\n"
                  "def get_config(arg=None):\n  c = base_run_config()\n"
                  f"  c.game = {game!r}\n  return c\n")
  return str(path)


@pytest.mark.parametrize("verb", ["train", "eval"])
def test_unknown_game_is_one_line_exit_2(tmp_path, capsys, monkeypatch, verb):
  monkeypatch.delenv("SSP_JAX_DEBUG", raising=False)
  workdir = tmp_path / "never"
  rc = cli.main([verb, "--config", _config_file(tmp_path, "chess"),
                 f"--config.workdir={workdir}"] + (["--out", str(tmp_path / "o")]
                                                   if verb == "eval" else []))
  err = capsys.readouterr().err.strip().splitlines()
  assert rc == 2 and len(err) == 1
  assert "'chess'" in err[0] and all(name in err[0] for name in games.GAMES)
  assert not workdir.exists() and not (tmp_path / "o").exists()
  with pytest.raises(ValueError, match="known games: ssp, svs, search_r1"):
    games.lookup("chess")


def test_bad_train_path_is_one_line_exit_2_before_the_model(assets, tmp_path, capsys,
                                                             monkeypatch):
  monkeypatch.delenv("SSP_JAX_DEBUG", raising=False)
  workdir = tmp_path / "never"
  args = fast_args(assets, str(workdir), 1)
  args[args.index(f"--config.search_r1.train_path={assets['train']}")] = \
      f"--config.search_r1.train_path={tmp_path / 'nope.jsonl'}"
  assert cli.main(args) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "search_r1.train_path" in err[0] and "nope.jsonl" in err[0]
  assert not workdir.exists()
  (tmp_path / "junk.jsonl").write_text("{\"question\": \"q\"}\n")   # no usable line
  args[args.index(f"--config.search_r1.train_path={tmp_path / 'nope.jsonl'}")] = \
      f"--config.search_r1.train_path={tmp_path / 'junk.jsonl'}"
  t0 = time.perf_counter()
  assert cli.main(args) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "no usable line" in err[0] and "1 bad lines" in err[0]
  assert time.perf_counter() - t0 < 30           # the model was never loaded or compiled
  assert not os.path.exists(workdir / "checkpoints")


# -- the world configs --------------------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS)
def test_world_configs_have_equal_solver_rollouts(variant, tmp_path, monkeypatch):
  monkeypatch.setenv("SSP_JAX_CACHE", str(tmp_path / "cache"))
  ssp = load_config_file(SSP_WORLD + variant)
  sr1 = load_config_file(SR1_WORLD + variant)
  assert not (tmp_path / "cache").exists()       # importing a config builds nothing
  s, r = ssp.ssp, sr1.search_r1
  assert r.batch_size * r.n == s.batch_size * s.proposer_n * s.solver_n
  assert (r.batch_size, r.n) == equal_rollout_batch(s) and r.n == s.solver_n
  assert (r.temperature, r.max_new_tokens, r.reward) == \
      (s.temperature, s.solver_max_new_tokens, s.reward.solver) and r.reward == "em"
  assert sr1.game == "search_r1" and ssp.get("game", "ssp") == "ssp"
  for key in ("model", "rollout", "rl", "warmstart", "world", "retrieval", "eval", "ssp"):
    a, b = sr1[key].to_dict(), ssp[key].to_dict()
    if key == "rl":   # the baseline has the solver role only, trained as SSP's solver
      assert a.pop("roles") == {"solver": b.pop("roles")["solver"]}
    assert a == b, key
  assert sr1.total_steps == ssp.total_steps and sr1.workdir != ssp.workdir
  assert ssp.eval.datasets.to_dict() == {"world_heldout": "world:qa_heldout"}
  assert ssp.world.size > 0 and ssp.eval.limit > 0
  want = {"": "registry:qwen2.5-coder-1.5b-instruct",
          ":0.5b": "registry:qwen2.5-coder-0.5b-instruct", ":tiny": ""}[variant]
  assert ssp.model.path == want
  with pytest.raises(Exception, match="use one of 1.5b, 0.5b, tiny"):
    load_config_file(SSP_WORLD + ":7b")


def fake_ensure(world_dir, calls):
  def ensure(seed, size, root=None):
    calls.append((seed, size, root))
    return world_dir
  return ensure


def test_world_section_fills_the_paths_and_builds_the_index_once(assets, tmp_path):
  calls = []
  world = write_world(str(tmp_path / "world"))
  sr1 = load_config_file(SR1_WORLD + ":tiny")
  sr1.world.seed = 7
  assert world_config.resolve_world(sr1, ensure=fake_ensure(world, calls)) == world
  assert calls == [(7, sr1.world.size, None)]
  assert sr1.search_r1.train_path == os.path.join(world, "qa_train.jsonl")
  assert sr1.ssp.answers_path == os.path.join(world, "answers.jsonl")
  assert sr1.ssp.world_dir == world
  assert sr1.eval.datasets.world_heldout == os.path.join(world, "qa_heldout.jsonl")
  index = sr1.retrieval.index_dir
  assert index.startswith(os.path.join(world, "index", "minilm-"))
  import retrieval
  hits = retrieval.load_retriever(index).search(["capital city of Scotland"], 1)[0]
  assert hits[0]["title"] == "Edinburgh"
  # the SSP config of the same world gets the same files and the cached index
  ssp = load_config_file(SSP_WORLD + ":tiny")
  mtime = os.path.getmtime(os.path.join(index, "meta.json"))
  world_config.resolve_world(ssp, ensure=fake_ensure(world, calls))
  assert ssp.retrieval.index_dir == index and ssp.ssp.answers_path == sr1.ssp.answers_path
  assert os.path.getmtime(os.path.join(index, "meta.json")) == mtime
  # so both runs share one warm start (the same cache key: the same starting weights)
  from ssp_jax.ssp.warmstart.run import cache_key
  assert cache_key(ssp) == cache_key(sr1)
  # what a user set stays; a server instead of the index builds nothing
  other = load_config_file(SR1_WORLD + ":tiny")
  other.search_r1.train_path = assets["train"]
  other.retrieval.url = "http://127.0.0.1:1"
  world_config.resolve_world(other, ensure=fake_ensure(world, []))
  assert other.search_r1.train_path == assets["train"] and other.retrieval.index_dir == ""
  # no world: nothing happens
  none = load_config_file(SR1_WORLD + ":tiny")
  none.world.size = 0
  assert world_config.resolve_world(none, ensure=fake_ensure(world, calls)) is None
  assert none.search_r1.train_path == "" and len(calls) == 2
  with pytest.raises(ValueError, match="world:qa_train"):
    world_config.resolve_specs({"x": "world:nope"}, world)
  with pytest.raises(FileNotFoundError, match="lacks"):
    world_config.world_paths(str(tmp_path))


# -- slow: the :tiny variants as a user runs them -----------------------------------------------
def _run_tiny(config, tmp_path):
  pytest.importorskip("ssp_jax.world")
  workdir = str(tmp_path / os.path.basename(config))
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  cmd = [sys.executable, "-m", "ssp_jax", "train", "--config", config + ":tiny",
         f"--config.workdir={workdir}", "--config.total_steps=1"]
  t0 = time.perf_counter()
  subprocess.run(cmd, check=True, cwd=REPO, env=env, timeout=3000)
  print(f"{config}:tiny, one step from the CLI: {time.perf_counter() - t0:.0f} s")
  return read_metrics(workdir)


@pytest.mark.slow
def test_search_r1_world_tiny_one_step(tmp_path):
  rows = _run_tiny(SR1_WORLD, tmp_path)
  assert [r["step"] for r in rows] == [1]
  assert all(k in rows[0] for k in REQUIRED)


@pytest.mark.slow
def test_ssp_world_tiny_one_step(tmp_path):
  rows = _run_tiny(SSP_WORLD, tmp_path)
  assert [r["step"] for r in rows] == [1]
  assert "proposer/valid_rate" in rows[0] and "solver/reward_mean" in rows[0]
