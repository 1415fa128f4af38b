"""Values that used to pass validation and run silently (or give NaN losses) are one line naming
the field, its value and the valid range, exit 2, before any model is loaded; and every shipped
config, in every `:arg` variant, still validates."""
import os
import re
import subprocess
import sys
import time

import pytest

from ssp_jax import cli, config_loader as CL
from ssp_jax.run import games
from ssp_jax.ssp.validate import ConfigError, validate_config as validate_ssp
from ssp_jax.svs.validate import validate_config as validate_svs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(REPO, "configs", "tiny.py")
SVS_TINY = os.path.join(REPO, "configs", "svs_tiny.py")

# Every shipped config and each of its `:arg` variants ("{root}" is a fresh directory).
VARIANTS = [
    ("tiny.py", ""), ("svs_tiny.py", ""),
    ("ssp_qwen2_5_7b_instruct.py", "tpu,root={root}"),
    ("ssp_qwen2_5_7b_instruct.py", "gpu,root={root}"),
    ("ssp_small_h200.py", ""), ("ssp_small_h200.py", "root={root}"),
    ("svs_gsm_h200.py", ""), ("svs_gsm_h200.py", "svs"), ("svs_gsm_h200.py", "rlvr"),
    ("svs_qwen2_5_3b_instruct.py", "gpu,root={root}"),
    ("svs_qwen2_5_3b_instruct.py", "tpu,root={root}"),
    ("svs_qwen2_5_32b_instruct.py", "gpu,root={root}"),
    ("svs_qwen2_5_32b_instruct.py", "tpu,root={root}"),
    ("svs_llama3_1_8b_instruct.py", "gpu,root={root}"),
    ("svs_llama3_1_8b_instruct.py", "tpu,root={root}"),
    ("ssp_world.py", ""), ("ssp_world.py", "0.5b"), ("ssp_world.py", "tiny"),
    ("search_r1_world.py", ""), ("search_r1_world.py", "0.5b"), ("search_r1_world.py", "tiny"),
]


def _validator(config):
  return games.game_of(config).load("validate")


def _validate_with_inputs(config, root):
  """Validates `config`, creating each missing input under `root` that the error names (a data
  file for a name with a file extension, a directory otherwise: models, indexes), so that every
  other check runs on the shipped values. A missing input outside `root` is a failure."""
  for _ in range(12):
    try:
      return _validator(config)(config)
    except ConfigError as e:
      m = re.search(r"config\.[\w.]+='([^']+)' does not exist", str(e))
      if not m or not m.group(1).startswith(str(root)):
        raise
      path = m.group(1)
      if os.path.splitext(path)[1]:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").close()
      else:
        os.makedirs(path)
  raise AssertionError("too many missing inputs")


def test_every_config_and_variant_validates(tmp_path):
  for name, arg in VARIANTS:
    root = tmp_path / f"{name}-{arg.split(',')[0] or 'default'}"
    root.mkdir()
    spec = os.path.join(REPO, "configs", name) + (":" + arg.format(root=root) if arg else "")
    config = CL.load_config_file(spec)
    if not arg or "root=" not in arg:     # inputs under the repository or the registry
      config.workdir = str(root / "run")
    # ssp_small_h200's default index directory lives outside the test's directory
    if config.get("retrieval") and config.retrieval.index_dir.startswith("/tmp/ssp"):
      config.retrieval.index_dir = str(root / "bm25")
    _validate_with_inputs(config, root)
  names = {n for n, _ in VARIANTS}
  assert names == {f for f in os.listdir(os.path.join(REPO, "configs")) if f.endswith(".py")}


# (override, field, a text of the valid range). Each is checked for SSP and SvS: the two
# validators share the rl/rollout checks (ssp_jax.run.validate.check_sections).
SHARED = [
    ("rollout.temperature", "-1", "0 <= temperature"),
    ("rollout.top_k", "-1", "0 <= top_k"),
    ("rollout.batch_size", "0", "1 <= batch_size"),
    ("rollout.search_timeout_s", "0", "0 < search_timeout_s"),
    ("rollout.top_p", "0", "0 < top_p <= 1"),
    ("rl.lr", "-1e-3", "0 <= lr"),
    ("rl.clip_low", "-1", "0 <= clip_low < 1"),
    ("rl.warmup_steps", "-5", "0 <= warmup_steps"),
    ("rl.micro_batch_size", "0", "1 <= micro_batch_size"),
    ("rl.mini_batch_size", "0", "1 <= mini_batch_size"),
    ("rl.temperature", "0", "0 < temperature"),
    ("rl.grad_clip", "0", "0 < grad_clip"),
    ("rl.dual_clip", "1.0", "1 < dual_clip"),
]


def _overridden(path, pairs):
  config = CL.load_config_file(path)
  CL.apply_overrides(config, pairs)
  return config


@pytest.mark.parametrize("path", [TINY, SVS_TINY], ids=["ssp", "svs"])
@pytest.mark.parametrize("field,value,valid", SHARED)
def test_out_of_range_value_names_field_value_and_range(path, field, value, valid):
  config = _overridden(path, [(field, value)])
  with pytest.raises(ConfigError) as e:
    _validator(config)(config)
  msg = str(e.value)
  assert f"config.{field}=" in msg and valid in msg and "\n" not in msg


def test_edge_values_that_mean_off_are_valid():
  """top_k=0 (no top-k cut), temperature 0 (greedy), lr=0 (no update), warmup 0, dual_clip
  None are documented settings, not errors."""
  for path in (TINY, SVS_TINY):
    config = _overridden(path, [("rollout.top_k", "0"), ("rollout.temperature", "0"),
                                ("rl.lr", "0"), ("rl.warmup_steps", "0"),
                                ("rl.dual_clip", "None")])
    _validator(config)(config)


def test_game_temperatures_and_replay_capacity(tmp_path):
  with pytest.raises(ConfigError, match=r"config\.ssp\.temperature=-1\.0 .*0 <= temperature"):
    validate_ssp(_overridden(TINY, [("ssp.temperature", "-1")]))
  with pytest.raises(ConfigError, match=r"config\.svs\.temperature=-0.5 .*0 <= temperature"):
    validate_svs(_overridden(SVS_TINY, [("svs.temperature", "-0.5")]))
  with pytest.raises(ConfigError, match=r"config\.ssp\.fill\.capacity=0 .*1 <= capacity"):
    validate_ssp(_overridden(TINY, [("ssp.fill.capacity", "0")]))


def test_paths_that_are_directories(tmp_path):
  with pytest.raises(ConfigError, match=r"config\.ssp\.answers_path=.* is a directory"):
    validate_ssp(_overridden(TINY, [("ssp.answers_path", str(tmp_path))]))
  with pytest.raises(ConfigError, match=r"config\.svs\.train_path=.* is a directory"):
    validate_svs(_overridden(SVS_TINY, [("svs.train_path", str(tmp_path))]))


def test_warmstart_values_checked_when_enabled():
  with pytest.raises(ConfigError, match=r"config\.warmstart\.batch_size=0"):
    validate_ssp(_overridden(TINY, [("warmstart.batch_size", "0")]))   # tiny enables it
  validate_ssp(_overridden(TINY, [("warmstart.batch_size", "0"), ("warmstart.enabled", "false")]))


@pytest.mark.parametrize("override,field", [
    ("--config.rl.lr=-1e-3", "rl.lr"),
    ("--config.rollout.temperature=-1", "rollout.temperature"),
    ("--config.rl.temperature=0", "rl.temperature"),
    # choices and roles: before this check they failed only after the model load (loss_agg)
    ("--config.rl.loss_agg=token-meen", "rl.loss_agg"),
    ("--config.rl.kl_type=k9", "rl.kl_type"),
    ("--config.rl.roles.solver.estimator=grp", "rl.roles.solver.estimator"),
])
def test_cli_exits_2_in_one_line_before_loading_a_model(tmp_path, override, field, capsys,
                                                        monkeypatch):
  monkeypatch.delenv("SSP_JAX_DEBUG", raising=False)
  workdir = tmp_path / "never"
  rc = cli.main(["train", "--config", TINY, f"--config.workdir={workdir}", override])
  lines = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
  assert rc == 2 and len(lines) == 1 and field in lines[0], lines
  assert not workdir.exists()                   # nothing prepared, no model loaded


@pytest.mark.parametrize("override,want", [
    ("--config.rl.lr=-1e-3", ("config.rl.lr=-0.001", "0 <= lr")),
    # a typo in a choice: it used to pass validation and fail after the model load
    ("--config.rl.loss_agg=token-meen", ("config.rl.loss_agg='token-meen' is unknown",
                                         "seq-mean-token-mean, seq-mean-token-sum, token-mean")),
])
def test_cli_subprocess_returns_in_seconds(tmp_path, override, want):
  """The user's view: `python -m ssp_jax train ... --config.rl.lr=-1e-3` returns exit 2 with one
  line naming the field, in the time of the imports (a model load takes far longer)."""
  env = {**os.environ, "PYTHONPATH": REPO}
  env.pop("SSP_JAX_DEBUG", None)
  t0 = time.monotonic()
  r = subprocess.run([sys.executable, "-m", "ssp_jax", "train", "--config", TINY,
                      f"--config.workdir={tmp_path / 'never'}", override],
                     capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
  elapsed = time.monotonic() - t0
  lines = [l for l in r.stderr.splitlines() if l.strip()]
  assert r.returncode == 2 and len(lines) == 1, r.stderr
  assert all(w in lines[0] for w in want), lines[0]
  assert elapsed < 30, elapsed            # imports only: no model, no index, no warm start
  assert not (tmp_path / "never").exists()


@pytest.mark.parametrize("path,roles", [(TINY, "proposer, solver"),
                                        (SVS_TINY, "solver, synthesizer")], ids=["ssp", "svs"])
def test_roles_are_checked_against_the_games_roles(path, roles):
  """Each game declares its roles; `rl.roles` must name exactly those, each with a known
  estimator, in one line naming the field."""
  config = _overridden(path, [])
  config.rl.roles.judge = {"estimator": "grpo", "loss_weight": 1.0}
  with pytest.raises(ConfigError, match=rf"^config\.rl\.roles\.judge is not a role of this "
                                        rf"game; its roles are {roles}$"):
    _validator(config)(config)
  config = _overridden(path, [])
  missing = next(iter(config.rl.roles.keys()))
  del config.rl.roles[missing]
  with pytest.raises(ConfigError, match=rf"config\.rl\.roles has no entry for role '{missing}'"):
    _validator(config)(config)
  config = _overridden(path, [("rl.roles.solver.loss_weight", "-1")])
  with pytest.raises(ConfigError, match=r"config\.rl\.roles\.solver\.loss_weight=-1.0 must be"):
    _validator(config)(config)
  config = _overridden(path, [("rl.roles.solver.estimator", "gae")])
  with pytest.raises(ConfigError, match=r"config\.rl\.roles\.solver\.estimator='gae' is "
                                        r"unknown; known: grpo, reinforce, rloo"):
    _validator(config)(config)


def test_total_steps_zero_prepares_only_and_negative_is_refused():
  """total_steps=0 builds the index and the warm start and trains nothing (the warm start's
  own advice for multi-host runs); below 0 is an error naming the field."""
  _validator(_overridden(TINY, [("total_steps", "0")]))(_overridden(TINY, [("total_steps", "0")]))
  config = _overridden(TINY, [("total_steps", "-1")])
  with pytest.raises(ConfigError, match=r"config\.total_steps=-1 must be >= 0"):
    _validator(config)(config)
