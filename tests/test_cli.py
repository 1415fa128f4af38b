"""The `ssp-jax` dispatcher: help, and bad input turned into one line + exit code 2."""
import pytest

from ssp_jax import cli


def test_help_lists_every_verb(capsys):
  with pytest.raises(SystemExit) as e:
    cli.main(["--help"])
  assert e.value.code == 0
  out = capsys.readouterr().out
  for verb in cli.VERBS:
    assert verb in out


@pytest.mark.parametrize("argv, needle", [
    (["generate", "--checkpoint", "/no/such/model", "--prompt", "hi"], "/no/such/model"),
    (["retrieve", "serve", "--index", "/no/such/index"], "/no/such/index"),
    (["index", "build", "--corpus", "/no/such.jsonl", "--encoder", "bm25", "--out", "/tmp/x"],
     "/no/such.jsonl"),
])
def test_missing_paths_exit_2_with_one_line(argv, needle, capsys, monkeypatch):
  monkeypatch.delenv("SSP_JAX_DEBUG", raising=False)
  assert cli.main(argv) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and needle in err[0] and err[0].startswith(f"ssp-jax {argv[0]}:")


def test_debug_env_shows_the_traceback(monkeypatch):
  monkeypatch.setenv("SSP_JAX_DEBUG", "1")
  with pytest.raises(FileNotFoundError):
    cli.main(["retrieve", "serve", "--index", "/no/such/index"])
