"""The README's TPU-fit command (`launch/aot_compile.py`) gets its model shape on a CPU host
without the weights. Compiling needs libtpu (`jax[tpu]`), absent here, so the test runs the
command's argument path: the README's exact arguments, its config, the model shape."""
import importlib.util
import os
import shlex

import pytest

import models
from ssp_jax.config_loader import load_config_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _aot():
  spec = importlib.util.spec_from_file_location("aot_compile",
                                                os.path.join(ROOT, "launch", "aot_compile.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def _readme_command() -> list[str]:
  lines = [ln for ln in open(os.path.join(ROOT, "README.md")).read().splitlines()
           if "launch/aot_compile.py --config" in ln and ln.startswith("PYTHONPATH=")]
  assert len(lines) == 1, lines
  argv = shlex.split(lines[0])
  return argv[argv.index("launch/aot_compile.py") + 1:]


def test_readme_command_finds_its_model_shape_without_weights(capsys):
  aot = _aot()
  args = aot.build_parser().parse_args(_readme_command())
  cfg = load_config_file(os.path.join(ROOT, args.config))
  assert not os.path.exists(os.path.join(cfg.model.path, "config.json"))   # no weights here
  mcfg = aot.model_config(cfg, args.preset)
  assert mcfg == models.get_preset("qwen2.5-7b")
  assert "using preset qwen2.5-7b" in capsys.readouterr().err


@pytest.mark.parametrize("path,preset", [
    ("/x/models/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
    ("/x/Qwen2.5-Coder-0.5B-Instruct", "qwen2.5-0.5b"),
    ("/x/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("/x/Qwen3-8B", "qwen3-8b"),
    ("/x/Qwen2.5-32B-Instruct", "qwen2.5-32b"),
    ("/x/my-model", ""),
])
def test_preset_from_the_directory_name(path, preset):
  assert _aot().preset_for_path(path) == preset


def test_unknown_name_without_weights_is_one_line(tmp_path):
  aot = _aot()
  cfg = load_config_file(os.path.join(ROOT, "configs", "ssp_qwen2_5_7b_instruct.py"))
  with cfg.unlocked():
    cfg.model.path = str(tmp_path / "my-model")
  with pytest.raises(SystemExit, match="pass --preset NAME"):
    aot.model_config(cfg, "")
  assert aot.model_config(cfg, "qwen2.5-0.5b") == models.get_preset("qwen2.5-0.5b")


def test_decode_step_compiles_with_the_configs_auto_attention():
  """compile_decode_step reads rollout.decode_attention="auto" (every shipped config's default)
  as the engine does off a GPU ("einsum"); it used to pass "auto" to decode_forward, which
  refused it, so the README's TPU-fit command stopped after the train step. Compiled here for
  the 8 fake CPU devices (conftest) on the README config's mesh, at a small model shape."""
  import jax
  if jax.device_count() < 8:
    pytest.skip("needs 8 (fake) devices")
  aot = _aot()
  cfg = load_config_file(os.path.join(ROOT, "configs", "ssp_qwen2_5_7b_instruct.py"))
  assert str(cfg.rollout.decode_attention) == "auto"
  mcfg = models.ModelConfig(vocab_size=256, hidden_size=128, intermediate_size=256,
                            num_layers=2, num_heads=8, num_kv_heads=4, head_dim=16)
  mesh = models.make_mesh(tuple(tuple(x) for x in cfg.mesh.axes), devices=jax.devices()[:8])
  sharder = models.Sharder(mesh, tuple(cfg.mesh.rules) or models.DEFAULT_RULES)
  report = aot.compile_decode_step(mcfg, cfg, sharder, 4, 64)
  assert report["decode_attention"] == "einsum"


def test_overrides_reach_the_config_and_bad_ones_stop_before_the_compile(capsys):
  """`--config.FIELD=VALUE` as in `ssp-jax train`: a setting's fit can be checked before a
  launch; a mistyped field or a bad value is one line and exit code 2, before any compile."""
  from ssp_jax.config_loader import config_from_args
  aot = _aot()
  cfg_path = os.path.join(ROOT, "configs", "ssp_qwen2_5_7b_instruct.py")
  args = aot.build_parser().parse_args(["--config", cfg_path, "--config.rl.layer_loop=scan:2"])
  assert config_from_args(args).rl.layer_loop == "scan:2"
  for bad, said in (("--config.rl.layer_lop=scan", "layer_lop"),
                    ("--config.rl.layer_loop=scan:0", "layer_loop='scan:0' is unknown")):
    with pytest.raises(SystemExit) as e:
      aot.main(["--config", cfg_path, bad])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("aot_compile: ") and said in err and len(err.strip().splitlines()) == 1
