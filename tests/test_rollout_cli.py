"""`ssp-jax generate` on a tiny checkpoint: one JSON object per prompt, greedy by default."""
import json

import jax
import pytest

from ssp_jax import cli
from ssp_jax.rollout import RolloutEngine, get_rollout_config
from ssp_jax.testing.tiny_checkpoint import load_params, make_tiny_checkpoint
from ssp_jax.tokenizer import Tokenizer


def test_generate_cli_prints_json(tmp_path, capsys):
  path = make_tiny_checkpoint(str(tmp_path), "llama", "llama3", seed=3)
  rc = cli.main(["generate", "--checkpoint", path, "--prompt", "Who wrote Moby-Dick?",
                 "--prompt", "Paris", "--raw", "--max-new-tokens", "12"])
  assert rc == 0
  lines = [json.loads(l) for l in capsys.readouterr().out.strip().splitlines()]
  assert [l["prompt"] for l in lines] == ["Who wrote Moby-Dick?", "Paris"]
  cfg, params = load_params(path)
  tok = Tokenizer.from_dir(path)
  r = get_rollout_config()
  r.update(dict(dtype="float32", cache_dtype="float32", batch_size=2, cache_min_len=64))
  want, _ = RolloutEngine(cfg, tok, r).generate(params, ["Who wrote Moby-Dick?", "Paris"],
                                                jax.random.key(0), temperature=0.0,
                                                max_new_tokens=12, stop=())
  for line, tr in zip(lines, want):
    assert line["token_ids"] == tr.response_ids
    assert line["stop_reason"] == tr.stop_reason in ("eos", "length")
    assert line["text"] == tr.text
