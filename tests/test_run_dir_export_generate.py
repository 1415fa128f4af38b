"""`ssp-jax export` and `generate` take a training run directory as `eval` does; export writes
bf16 by default and a generation_config.json; generate searches as the solver does."""
import json
import os

import jax
import jax.numpy as jnp
import pytest

from ssp_jax import checkpointing, cli
from ssp_jax.testing.tiny_checkpoint import load_params, make_tiny_checkpoint


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
  """A training run's layout: workdir/config.json (model.path = a tiny HF checkpoint) and
  workdir/checkpoints/3 holding params (the base x 2, so they differ from the base)."""
  root = tmp_path_factory.mktemp("run")
  hf = make_tiny_checkpoint(str(root / "base"))
  if os.path.exists(os.path.join(hf, "generation_config.json")):   # as the embedded GGUF model:
    os.remove(os.path.join(hf, "generation_config.json"))         # export must write one
  cfg, base = load_params(hf)
  trained = jax.tree.map(lambda p: p * 2.0, base)
  state = {"params": trained, "opt_state": {}, "rng": jax.random.PRNGKey(0),
           "step": jnp.int32(3), "nonfinite": jnp.int32(0), "nonfinite_total": jnp.int32(0)}
  work = root / "work"
  with checkpointing.Checkpointer(str(work / "checkpoints"), async_save=False,
                                  model_config=cfg) as ck:
    ck.save(3, state, force=True)
  (work / "config.json").write_text(json.dumps({"model": {"path": hf, "chat_format": "chatml"}}))
  return str(work), hf


def _one_line(err: str) -> str:
  lines = err.strip().splitlines()
  assert len(lines) == 1, err
  assert "  " not in lines[0] and "[]" not in lines[0], lines[0]
  return lines[0]


def test_export_a_run_directory_bf16_with_generation_config(run_dir, tmp_path, capsys):
  work, hf = run_dir
  out = tmp_path / "hf"
  assert cli.main(["export", "--checkpoint", work, "--out", str(out)]) == 0
  assert "exported step 3" in capsys.readouterr().out
  hf_cfg = json.load(open(out / "config.json"))
  assert hf_cfg["torch_dtype"] == "bfloat16"
  gen = json.load(open(out / "generation_config.json"))
  from ssp_jax.tokenizer import Tokenizer
  tok = Tokenizer.from_dir(hf)
  assert gen["pad_token_id"] == tok.pad_id
  eos = gen["eos_token_id"] if isinstance(gen["eos_token_id"], list) else [gen["eos_token_id"]]
  assert set(eos) == set(tok.eos_ids)
  out32 = tmp_path / "hf32"
  assert cli.main(["export", "--checkpoint", os.path.join(work, "checkpoints", "3"),
                   "--out", str(out32), "--dtype", "float32"]) == 0
  assert json.load(open(out32 / "config.json"))["torch_dtype"] == "float32"


def test_export_and_generate_refuse_clearly(run_dir, tmp_path, capsys):
  work, hf = run_dir
  empty = tmp_path / "fresh"
  os.makedirs(empty / "checkpoints")          # a run that has not saved a checkpoint yet
  (empty / "config.json").write_text(open(os.path.join(work, "config.json")).read())
  for verb in ("export", "generate"):
    extra = ["--out", str(tmp_path / "x")] if verb == "export" else ["--prompt", "hi"]
    assert cli.main([verb, "--checkpoint", str(empty), *extra]) == 2
    assert "no committed checkpoint yet" in _one_line(capsys.readouterr().err)
  assert cli.main(["export", "--checkpoint", str(tmp_path), "--out", str(tmp_path / "x")]) == 2
  assert "not a training run" in _one_line(capsys.readouterr().err)
  assert cli.main(["export", "--checkpoint", os.path.join(work, "checkpoints", "3"), "--step",
                   "5", "--out", str(tmp_path / "x")]) == 2
  assert "--step 5" in _one_line(capsys.readouterr().err)
  assert cli.main(["export", "--checkpoint", os.path.join(work, "checkpoints"), "--step", "9",
                   "--out", str(tmp_path / "x")]) == 2
  assert "steps there: 3" in _one_line(capsys.readouterr().err)


def test_generate_from_a_run_equals_generate_from_its_export(run_dir, tmp_path, capsys):
  work, _ = run_dir
  out = tmp_path / "hf32"
  assert cli.main(["export", "--checkpoint", work, "--out", str(out), "--dtype", "float32"]) == 0
  capsys.readouterr()
  args = ["--prompt", "Who wrote Moby-Dick?", "--max-new-tokens", "8"]
  assert cli.main(["generate", "--checkpoint", work, *args]) == 0
  from_run = json.loads(capsys.readouterr().out)
  assert cli.main(["generate", "--checkpoint", str(out), *args]) == 0
  from_export = json.loads(capsys.readouterr().out)
  assert from_run["token_ids"] == from_export["token_ids"] and from_run["token_ids"]
  assert from_run["num_prompt_tokens"] == from_export["num_prompt_tokens"]
