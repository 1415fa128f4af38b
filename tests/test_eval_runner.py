"""`evaluate` / `run_eval` on a real rollout engine over a tiny random checkpoint (fast)."""
import json

import jax
import pytest

from ssp_jax.eval import runner
from ssp_jax.rollout import RolloutEngine, get_rollout_config
from ssp_jax.testing.small_retriever import SmallBM25Retriever
from ssp_jax.testing.tiny_checkpoint import load_params, make_tiny_checkpoint
from ssp_jax.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def engine_params(tmp_path_factory):
  path = make_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny")))
  cfg, params = load_params(path)
  rc = get_rollout_config()
  rc.batch_size, rc.dtype, rc.cache_dtype = 4, "float32", "float32"
  rc.cache_min_len, rc.steps_per_call, rc.max_obs_tokens = 128, 16, 64
  eng = RolloutEngine(cfg, load_tokenizer(path), rc, SmallBM25Retriever())
  return eng, params


def _examples(n, prefix):
  qs = ["Who wrote Moby-Dick?", "Where was Marie Curie born?", "What river flows through Paris?"]
  return [{"id": f"{prefix}{i}", "question": qs[i % 3] + f" ({i})",
           "golden_answers": ["Herman Melville", "Warsaw", "Seine"][i % 3:i % 3 + 1]}
          for i in range(n)]


def test_evaluate_writes_files_matching_the_returned_metrics(tmp_path, engine_params):
  eng, params = engine_params
  sets = {"a": _examples(5, "a"), "hotpotqa": _examples(3, "h")}
  flat = runner.evaluate(eng, params, sets, batch_size=2, max_new_tokens=24,
                         out_dir=str(tmp_path), meta={"step": 7})
  res = json.load(open(tmp_path / "results.json"))
  assert res["meta"] == {"step": 7}
  for name, exs in sets.items():
    preds = [json.loads(line) for line in open(tmp_path / f"predictions_{name}.jsonl")]
    assert [p["id"] for p in preds] == [e["id"] for e in exs]          # order kept over chunks
    assert all(0 < p["response_tokens"] <= 24 for p in preds)
    assert res[name]["n"] == len(exs)
    assert flat[f"val/{name}/em"] == pytest.approx(res[name]["em"])
    assert flat[f"val/{name}/searches_mean"] == pytest.approx(
        sum(p["num_searches"] for p in preds) / len(preds))
  assert flat["val/multi_hop/f1"] == pytest.approx(res["hotpotqa"]["f1"])
  assert flat["val/overall/f1"] == pytest.approx(res["hotpotqa"]["f1"])   # Table-1 sets only


def test_greedy_results_do_not_depend_on_batching(engine_params):
  eng, params = engine_params
  exs = _examples(5, "x")
  key = jax.random.PRNGKey(0)
  whole = runner.run_dataset(eng, params, exs, key, batch_size=0, max_new_tokens=24)
  chunked = runner.run_dataset(eng, params, exs, key, batch_size=2, max_new_tokens=24)
  assert [p["response"] for p in whole] == [p["response"] for p in chunked]


def test_load_policy_from_training_checkpoints(tmp_path):
  """--checkpoint pointing at a run's orbax checkpoints restores the trained params (any of: the
  workdir, its checkpoints/ dir, one checkpoints/<step> dir); an HF dir loads directly."""
  import jax.numpy as jnp
  import numpy as np
  from ssp_jax import checkpointing
  from ssp_jax.eval import build
  from ssp_jax.ssp.config import base_run_config
  path = make_tiny_checkpoint(str(tmp_path / "hf"))
  cfg, base = load_params(path)
  trained = jax.tree.map(lambda p: p * 2.0, base)
  state = {"params": trained, "opt_state": {}, "rng": jax.random.PRNGKey(0),
           "step": jnp.int32(3), "nonfinite": jnp.int32(0), "nonfinite_total": jnp.int32(0)}
  with checkpointing.Checkpointer(str(tmp_path / "run" / "checkpoints"),
                                  async_save=False) as ck:
    ck.save(3, state, force=True)
  config = base_run_config()
  config.model.path = path
  config.mesh.num_devices = 1
  sharder = build.make_sharder(config)
  leaf = lambda tree: np.asarray(jax.tree.leaves(tree)[0])
  for where in ("run", "run/checkpoints", "run/checkpoints/3"):
    _, params, _, desc = build.load_policy(config, str(tmp_path / where), sharder)
    np.testing.assert_allclose(leaf(params), leaf(trained), rtol=1e-6)
    assert "step 3" in desc
  _, params, _, desc = build.load_policy(config, path, sharder)      # HF dir: loaded as is
  np.testing.assert_allclose(leaf(params), leaf(base), rtol=1e-6)
  with pytest.raises(FileNotFoundError, match="--checkpoint"):
    build.load_policy(config, str(tmp_path / "nope"), sharder)


def test_closed_book_asks_without_the_search_tool(engine_params):
  eng, params = engine_params
  exs = _examples(3, "c")
  trajs = runner.rollouts(eng, params, exs, jax.random.PRNGKey(0), batch_size=0,
                          max_new_tokens=16, closed_book=True)
  tok = eng.tok
  for t in trajs:
    prompt = tok.decode(t.prompt_ids)
    assert "no search engine is available" in prompt and "<search> query </search>" not in prompt
    assert t.num_searches == 0
  with_search = runner.rollouts(eng, params, exs, jax.random.PRNGKey(0), batch_size=0,
                                max_new_tokens=16)
  assert "<search> query </search>" in tok.decode(with_search[0].prompt_ids)
