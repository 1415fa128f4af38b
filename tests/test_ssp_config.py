"""Config files and `--config.a.b=v` overrides (no compute)."""
import os

import pytest

from ssp_jax import config_loader as CL
from ssp_jax.ssp.validate import ConfigError, validate_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(REPO, "configs", "tiny.py")
PAPER = os.path.join(REPO, "configs", "ssp_qwen2_5_7b_instruct.py")


def test_override_types():
  cfg = CL.load_config_file(TINY)
  CL.apply_overrides(cfg, [("total_steps", "7"), ("rl.lr", "2"), ("ssp.rag.enabled", "false"),
                           ("rl.dual_clip", "None"), ("mesh.axes", "(('data', 2),)"),
                           ("workdir", "/tmp/x y"), ("ssp.fill.strategy", "dummy")])
  assert cfg.total_steps == 7 and cfg.rl.lr == 2.0 and isinstance(cfg.rl.lr, float)
  assert cfg.ssp.rag.enabled is False and cfg.rl.dual_clip is None
  assert cfg.mesh.axes == (("data", 2),) and cfg.workdir == "/tmp/x y"


@pytest.mark.parametrize("key,value,match", [
    ("ssp.batch_sise", "3", "did you mean --config.ssp.batch_size"),
    ("nosuch.deep.key", "1", "unknown config key --config.nosuch.deep.key"),
    ("total_steps", "1.5", "expected type int"),
    ("ssp.rag.enabled", "maybe", "expected true or false"),
    ("ssp.rag", "1", "is a section"),
])
def test_bad_overrides_name_the_key(key, value, match):
  with pytest.raises(CL.ConfigOverrideError, match=match):
    CL.apply_overrides(CL.load_config_file(TINY), [(key, value)])


def test_split_overrides():
  ov, rest = CL.split_overrides(["--config", "x.py", "--config.a.b=1", "--config.c", "2", "-v"])
  assert ov == [("a.b", "1"), ("c", "2")] and rest == ["--config", "x.py", "-v"]
  with pytest.raises(CL.ConfigOverrideError, match="missing value"):
    CL.split_overrides(["--config.a"])


def test_tiny_is_valid_and_paper_config_has_the_table(tmp_path):
  validate_config(CL.load_config_file(TINY))
  c = CL.load_config_file(f"{PAPER}:gpu,root={tmp_path}")
  assert (c.rl.lr, c.rl.warmup_steps, c.rl.kl_coef, c.rl.mini_batch_size) == (1e-6, 5, 0.01, 128)
  assert (c.ssp.batch_size, c.ssp.proposer_n, c.ssp.solver_n) == (256, 1, 5)
  assert (c.rl.roles.proposer.estimator, c.rl.roles.solver.estimator) == ("reinforce", "grpo")
  assert (c.rollout.max_prompt_tokens, c.rollout.max_response_tokens) == (4096, 8192)
  assert (c.rollout.temperature, c.rollout.topk, c.rollout.max_searches) == (1.0, 3, 10)
  assert (c.ssp.fill.strategy, c.ssp.fill.reset_every, c.ssp.rag.noise_docs) == ("replay", 10, 4)
  assert c.total_steps == 200 and c.model.path.startswith(str(tmp_path))
  with pytest.raises(ConfigError, match="does not exist"):   # local files are required
    validate_config(c)
  with pytest.raises(ValueError, match="tpu|gpu"):
    CL.load_config_file(f"{PAPER}:h100")


def test_paper_config_uses_the_external_judge_and_the_original_schedule(tmp_path):
  c = CL.load_config_file(f"{PAPER}:gpu,root={tmp_path}")
  judge = f"{tmp_path}/models/Qwen2.5-32B-Instruct"
  assert (c.ssp.rag.verifier, c.ssp.judge.source) == (judge, judge)
  assert c.ssp.rag.use_judge is True and c.eval.judge == "ssp"
  assert c.ssp.reward.solver == "em_then_judge" and c.ssp.reward.spam_max_tags == 10
  assert c.rl.update_schedule == "by_role"     # proposer, then solver (ssp.game.UPDATE_ORDER)
  assert c.rollout.max_obs_tokens == 0          # the original splices observations uncut


def test_endpoint_sources_need_a_model_name_and_a_known_schedule():
  cfg = CL.load_config_file(TINY)
  CL.apply_overrides(cfg, [("ssp.judge.source", "http://127.0.0.1:9/v1"),
                           ("ssp.rag.verifier", "https://judge.example/v1")])
  with pytest.raises(ConfigError, match=r"ssp.rag.verifier=.*ssp.judge.model is empty"):
    validate_config(cfg)
  CL.apply_overrides(cfg, [("ssp.judge.model", "Qwen/Qwen2.5-32B-Instruct")])
  validate_config(cfg)                          # URLs are not local paths: no existence check
  CL.apply_overrides(cfg, [("rl.update_schedule", "solver_first")])
  with pytest.raises(ConfigError, match="rl.update_schedule"):
    validate_config(cfg)
  cfg = CL.load_config_file(TINY)
  CL.apply_overrides(cfg, [("ssp.judge.source", "/no/such/32b")])
  with pytest.raises(ConfigError, match="ssp.judge.source.*does not exist"):
    validate_config(cfg)


def test_observation_cap_zero_keeps_the_whole_observation():
  from ssp_jax.rollout.observations import observation_ids

  class Chars:    # one token per character
    def encode(self, text):
      return [ord(ch) for ch in text]

  body = "Doc 1 (Title: A) " + "x" * 400
  full = observation_ids(Chars(), body, 0)
  assert "".join(map(chr, full)).endswith("</information>\n\n") and "x" * 400 in \
      "".join(map(chr, full))
  cut = observation_ids(Chars(), body, 100)
  assert len(cut) == 100 and len(full) > 400
