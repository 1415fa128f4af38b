"""`ssp-jax plot`: one PNG per key with the curve drawn; a missing key is one line and exit 2."""
import json
import os

import numpy as np
import pytest

from ssp_jax import cli, plot_cli
from ssp_jax.run import games

_C0 = np.array([0x1f, 0x77, 0xb4]) / 255.0  # matplotlib's first line colour


def _write_metrics(path, n=6, *, svs=False):
  with open(path, "w") as f:
    for step in range(1, n + 1):
      row = {"step": step, "loss": 0.5 / step, "entropy": 2.0 - 0.1 * step, "time/step": 1.0}
      if svs:
        row.update({"oqa/accuracy": 0.1 * step, "svs/skipped": float(step % 2)})
        if step % 2 == 0:  # vps keys only on steps that were not skipped
          row["vps/valid_rate"] = 0.5
      else:
        row.update({"proposer/valid_rate": 0.1 * step, "solver/reward_mean": 0.05 * step})
      if step == n:
        row["val/overall/em"] = 0.3
      f.write(json.dumps(row) + "\n")


def _curve_pixels(png_path):
  import matplotlib.image as mpimg
  img = mpimg.imread(png_path)[..., :3]
  return int((np.abs(img - _C0).sum(-1) < 0.05).sum())


def test_requested_keys_one_png_each_with_a_curve(tmp_path, capsys):
  _write_metrics(tmp_path / "metrics.jsonl")
  out = tmp_path / "plots"
  assert cli.main(["plot", str(tmp_path), "--out", str(out), "--keys",
                   "loss,proposer/valid_rate"]) == 0
  assert sorted(os.listdir(out)) == ["loss.png", "proposer_valid_rate.png"]
  for name in os.listdir(out):
    with open(out / name, "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert _curve_pixels(out / name) > 50  # the line is drawn, not an empty frame
  printed = json.loads(capsys.readouterr().out)
  assert printed["steps"] == 6 and len(printed["files"]) == 2


def test_default_keys_follow_the_game(tmp_path):
  ssp, svs = tmp_path / "ssp.jsonl", tmp_path / "svs.jsonl"
  _write_metrics(ssp)
  _write_metrics(svs, svs=True)
  ssp_keys = plot_cli.default_keys(plot_cli.read_metrics(str(ssp)), games.lookup("ssp"))
  svs_keys = plot_cli.default_keys(plot_cli.read_metrics(str(svs)), games.lookup("svs"))
  assert ssp_keys[:2] == ["proposer/valid_rate", "solver/reward_mean"]
  assert "val/overall/em" in ssp_keys and "oqa/accuracy" not in ssp_keys
  assert svs_keys[:3] == ["oqa/accuracy", "vps/valid_rate", "svs/skipped"]
  out = tmp_path / "p"
  paths = plot_cli.plot(plot_cli.read_metrics(str(svs)), svs_keys, str(out))
  assert len(paths) == len(svs_keys) == len(os.listdir(out))
  # a key present on some steps only is drawn at those steps
  assert plot_cli.series(plot_cli.read_metrics(str(svs)), "vps/valid_rate")[0] == [2.0, 4.0, 6.0]


def test_the_game_comes_from_the_run_config_not_the_keys(tmp_path):
  """SvS metrics beside a config.json naming svs get SvS's keys; the same metrics without a
  config are plotted as the default game (nothing is guessed from the metric names)."""
  _write_metrics(tmp_path / "metrics.jsonl", svs=True)
  assert plot_cli.game_of_run(str(tmp_path)) is games.lookup("ssp")
  (tmp_path / "config.json").write_text(json.dumps({"game": "svs"}))
  assert plot_cli.game_of_run(str(tmp_path)) is games.lookup("svs")
  assert plot_cli.game_of_run(str(tmp_path / "metrics.jsonl")) is games.lookup("svs")


def test_missing_key_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
  monkeypatch.delenv("SSP_JAX_DEBUG", raising=False)
  _write_metrics(tmp_path / "metrics.jsonl")
  rc = cli.main(["plot", str(tmp_path), "--out", str(tmp_path / "o"), "--keys", "loss,no/such"])
  err = capsys.readouterr().err.strip().splitlines()
  assert rc == 2 and len(err) == 1
  assert err[0].startswith("ssp-jax plot:") and "no/such" in err[0] and "loss" in err[0]
  assert not (tmp_path / "o").exists()  # nothing half-written


@pytest.mark.parametrize("content, needle", [(None, "no metrics file"),
                                             ("{\"loss\": 1}\n", "'step'"),
                                             ("not json\n", ":1: not a JSON")])
def test_bad_metrics_file_exit_2(tmp_path, capsys, monkeypatch, content, needle):
  monkeypatch.delenv("SSP_JAX_DEBUG", raising=False)
  if content is not None:
    (tmp_path / "metrics.jsonl").write_text(content)
  assert cli.main(["plot", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and needle in err[0]
