"""Log lines during a progress bar print above it (ssp_jax/quiet.py), and `--print_config`
prints plain JSON (no `!!python/tuple`)."""
import json
import logging
import os
import sys

from tqdm import tqdm

from ssp_jax import cli
from ssp_jax.quiet import logs_above_bars

TINY = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", "tiny.py")


def _bar_with_a_log_line(redirect: bool) -> list[str]:
  """Draws a bar on stderr, logs one INFO line mid-way; returns stderr's lines as a terminal
  shows them (each line's text after its last carriage return)."""
  root = logging.getLogger()
  handler = logging.StreamHandler(sys.stderr)
  handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
  saved = (root.handlers, root.level)
  root.handlers, root.level = [handler], logging.INFO
  try:
    bar = tqdm(total=3, desc="steps", file=sys.stderr, mininterval=0, ascii=True)
    restore = logs_above_bars(redirect)
    bar.update(1)
    logging.getLogger("ssp_jax.checkpointing").info("checkpoint 1 -> /tmp/x")
    bar.update(2)
    bar.close()
    restore()
  finally:
    root.handlers, root.level = saved
  return root.handlers


def test_log_line_prints_on_its_own_line_above_the_bar(capsys):
  _bar_with_a_log_line(redirect=True)
  err = capsys.readouterr().err
  shown = [line.split("\r")[-1] for line in err.split("\n")]
  assert "INFO ssp_jax.checkpointing: checkpoint 1 -> /tmp/x" in shown
  # the finished bar is whole on the last line, not cut by the log line
  assert any(s.startswith("steps: 100%") for s in shown)


def test_without_the_redirect_the_log_line_breaks_the_bar(capsys):
  """The failure the redirect fixes (so the test above can fail): the log line is spliced
  after the bar's text on the same terminal line."""
  _bar_with_a_log_line(redirect=False)
  err = capsys.readouterr().err
  shown = [line.split("\r")[-1] for line in err.split("\n")]
  assert "INFO ssp_jax.checkpointing: checkpoint 1 -> /tmp/x" not in shown


def test_redirect_restores_the_handlers_and_is_a_no_op_when_disabled():
  root = logging.getLogger()
  handler = logging.StreamHandler(sys.stderr)
  saved = root.handlers
  root.handlers = [handler]
  try:
    logs_above_bars(False)()
    assert root.handlers == [handler]
    restore = logs_above_bars(True)
    assert root.handlers != [handler]
    restore()
    assert root.handlers == [handler]
  finally:
    root.handlers = saved


def test_print_config_is_plain_json(capsys):
  rc = cli.main(["train", "--config", TINY, "--print_config"])
  out = capsys.readouterr().out
  assert rc == 0 and "!!python" not in out
  cfg = json.loads(out)
  assert isinstance(cfg["mesh"]["axes"], list) and cfg["workdir"]
