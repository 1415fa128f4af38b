"""The seeded embedded default plays the same game step for step.

`configs/tiny.py`, shrunk to two short steps on a tiny random checkpoint and a BM25 index over a
few passages (both built here, offline, seeded), is run through the real `ssp-jax train` CLI in
this process; its metrics.jsonl and inspection samples must match the golden recorded before the games were split into
packages (tests/data/tiny_golden_metrics.json): counts and texts exactly, floats to rtol 1e-4. Timings,
throughput and memory figures are left out. To record the golden again (only when a change is
meant to change the game):

  PYTHONPATH=$PWD python tests/test_tiny_golden.py --write
"""
import json
import math
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(REPO, "tests", "data", "tiny_golden_metrics.json")
TINY = os.path.join(REPO, "configs", "tiny.py")
STEPS = 2
# keys that measure the machine rather than the game (compile/count: XLA programs compiled,
# which a warm compilation cache or an earlier test in the process changes)
VOLATILE_PREFIXES = ("time/", "perf/", "mem/", "memory/", "throughput/", "compile/")
VOLATILE_WORDS = ("tokens_per_s", "per_sec", "_seconds", "mfu", "wall", "bytes")


def _volatile(key: str) -> bool:
  return key.startswith(VOLATILE_PREFIXES) or any(w in key for w in VOLATILE_WORDS)


def make_assets(root: str) -> dict:
  """A tiny random checkpoint, a BM25 index over the shipped snippets and four answers."""
  from retrieval.index import build_bm25
  from ssp_jax.testing.small_retriever import WIKI_SNIPPETS
  from ssp_jax.testing.tiny_checkpoint import make_tiny_checkpoint
  ckpt = make_tiny_checkpoint(os.path.join(root, "ckpt"))
  corpus = os.path.join(root, "corpus.jsonl")
  with open(corpus, "w", encoding="utf-8") as f:
    f.writelines(json.dumps({"id": str(i), "contents": c}) + "\n"
                 for i, c in enumerate(WIKI_SNIPPETS))
  build_bm25(corpus, os.path.join(root, "index"), progress=False)
  answers = os.path.join(root, "answers.jsonl")
  with open(answers, "w", encoding="utf-8") as f:
    f.writelines(json.dumps({"ground_truth": a, "search_turns": 2}) + "\n"
                 for a in ("Herman Melville", "Paris", "Warsaw", "Edinburgh"))
  return dict(ckpt=ckpt, index=os.path.join(root, "index"), answers=answers)


def run_tiny(root: str) -> dict:
  """Runs the shrunk embedded default for STEPS steps; returns its metrics.jsonl rows (less the
  volatile keys) and its inspection samples (texts, searches, rewards) per step."""
  from ssp_jax import cli
  a = make_assets(root)
  workdir = os.path.join(root, "run")
  args = ["train", "--config", TINY, f"--config.workdir={workdir}",
          f"--config.total_steps={STEPS}", f"--config.model.path={a['ckpt']}",
          f"--config.retrieval.index_dir={a['index']}",
          f"--config.ssp.answers_path={a['answers']}",
          "--config.mesh.num_devices=1", "--config.progress=false",
          "--config.rollout.max_response_tokens=24", "--config.ssp.proposer_max_new_tokens=24",
          "--config.ssp.solver_max_new_tokens=24", "--config.ssp.rag.max_new_tokens=8",
          "--config.rollout.max_prompt_tokens=512", "--config.rollout.cache_min_len=64",
          "--config.rollout.steps_per_call=16", "--config.rl.bucket=64",
          "--config.rl.max_len=640", "--config.rl.logprob_chunk=64",
          "--config.rl.pack_len=0",   # rows follow the shrunk trajectories, as recorded
          "--config.warmstart.enabled=false"]
  assert cli.main(args) == 0
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    rows = [json.loads(line) for line in f]
  samples = []
  for step in range(1, STEPS + 1):
    with open(os.path.join(workdir, "samples", f"samples_{step}.jsonl"), encoding="utf-8") as f:
      samples.append([json.loads(line) for line in f])
  return {"metrics": [{k: v for k, v in sorted(r.items()) if not _volatile(k)} for r in rows],
          "samples": samples}


def _differences(got: list[dict], want: list[dict]) -> list[str]:
  out = []
  if len(got) != len(want):
    return [f"{len(got)} steps, golden has {len(want)}"]
  for g, w in zip(got, want):
    step = w.get("step")
    for k in sorted(set(g) | set(w)):
      if k not in g or k not in w:
        out.append(f"step {step}: {k} only in {'golden' if k in w else 'this run'}")
        continue
      a, b = g[k], w[k]
      if isinstance(b, float) or isinstance(a, float):
        same = (math.isnan(a) and math.isnan(b)) if (math.isnan(a) or math.isnan(b)) else \
            math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6)
      else:
        same = a == b
      if not same:
        out.append(f"step {step}: {k} = {a!r}, golden {b!r}")
  return out


def test_tiny_default_plays_the_golden_game(tmp_path):
  with open(GOLDEN, encoding="utf-8") as f:
    want = json.load(f)
  got = run_tiny(str(tmp_path))
  diffs = _differences(got["metrics"], want["metrics"])
  assert not diffs, "\n".join(diffs)
  for step, (g, w) in enumerate(zip(got["samples"], want["samples"]), 1):
    assert g == w, f"step {step}: the inspection samples differ from the golden"


def test_differences_catch_a_changed_count_and_float():
  want = [{"step": 1, "proposer/valid": 2, "loss": 0.5}]
  assert _differences(want, want) == []
  assert _differences([{"step": 1, "proposer/valid": 3, "loss": 0.5}], want)
  assert _differences([{"step": 1, "proposer/valid": 2, "loss": 0.5001}], want)
  assert _differences([{"step": 1, "proposer/valid": 2}], want)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
  import tempfile
  sys.path.insert(0, os.path.join(REPO, "tests"))
  import conftest  # noqa: F401  (the tests' XLA flags and offline settings)
  with tempfile.TemporaryDirectory() as d:
    golden = run_tiny(d)
  with open(GOLDEN, "w", encoding="utf-8") as f:
    json.dump(golden, f, indent=1)
  print(f"wrote {len(golden['metrics'])} steps to {GOLDEN}")
