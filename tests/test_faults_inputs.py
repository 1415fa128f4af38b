"""Bad input, third round (docs/faults.md): each case ends in one line and exit 2 before work is
spent, or in a counted, logged skip where a data file has one bad row. Real parts: the CLI
in-process on a tiny random checkpoint with a BM25 index (the fixtures of test_ssp_train_cli),
real damaged files, a cache root under a regular file (ENOTDIR: root cannot bypass it, as it
bypasses 0555 permissions), and a full disk as a monkeypatched `shutil.disk_usage`."""
import collections
import gzip
import json
import logging
import os
import shutil

import pytest

import models.cache
from ssp_jax import cli, config_loader as CL, train_cli
from ssp_jax.ssp import answers as A
from ssp_jax.svs import data as D
from ssp_jax.ssp.warmstart import run as W
from test_ssp_train_cli import TINY, assets, fast_args  # noqa: F401

Usage = collections.namedtuple("Usage", "total used free")


def _one_line_exit_2(rc, err):
  lines = [l for l in err.strip().splitlines() if l.strip()]
  assert rc == 2, err
  assert len(lines) == 1 and "Traceback" not in err, err
  return lines[0]


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
  monkeypatch.delenv("SSP_JAX_DEBUG", raising=False)


# -- the cache root ------------------------------------------------------------------------
def test_one_cache_root_for_every_user(monkeypatch, tmp_path):
  """Index, warm start, GGUF tokenizer exports and registry models all resolve through
  models.cache.cache_root: $SSP_JAX_CACHE, else $XDG_CACHE_HOME/ssp-jax, else ~/.cache/ssp-jax;
  and no other module spells a cache directory of its own."""
  import models.checkpoint
  import retrieval.search
  from models import registry
  assert retrieval.search.cache_root is models.cache.cache_root
  assert models.checkpoint.cache_root is models.cache.cache_root
  assert W.cache_root is models.cache.cache_root
  monkeypatch.delenv("SSP_JAX_CACHE", raising=False)
  monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
  assert models.cache.cache_root() == os.path.expanduser("~/.cache/ssp-jax")
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  assert registry.cache_dir() == str(tmp_path / "xdg" / "ssp-jax" / "models")
  monkeypatch.setenv("SSP_JAX_CACHE", str(tmp_path / "c"))
  assert registry.cache_dir() == str(tmp_path / "c" / "models")
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  spelled = []
  for top in ("models", "retrieval", "ssp_jax"):
    for d, _, files in os.walk(os.path.join(repo, top)):
      for f in files:
        if f.endswith(".py") and f != "cache.py":
          text = open(os.path.join(d, f), encoding="utf-8").read()
          if '".cache"' in text or "~/.cache" in text.replace("~/.cache/ssp-jax", ""):
            spelled.append(os.path.join(d, f))
  assert not spelled, spelled


def _blocked_cache(tmp_path, monkeypatch):
  blocker = tmp_path / "a-file"
  blocker.write_text("")
  monkeypatch.setenv("SSP_JAX_CACHE", str(blocker / "cache"))
  return str(blocker / "cache")


def test_unwritable_cache_stops_the_warm_start_before_it_trains(assets, tmp_path, monkeypatch,
                                                                 capsys):
  cache = _blocked_cache(tmp_path, monkeypatch)
  monkeypatch.setattr(W, "_train_and_save", lambda *a: pytest.fail("trained anyway"))
  rc = cli.main(fast_args(assets, str(tmp_path / "run"), 1) + ["--config.warmstart.enabled=true"])
  line = _one_line_exit_2(rc, capsys.readouterr().err)
  assert cache in line and "not writable" in line and "SSP_JAX_CACHE" in line
  assert "workdir" not in line                  # the old message blamed the (writable) workdir


def test_full_cache_stops_the_warm_start_before_it_trains(assets, tmp_path, monkeypatch, capsys):
  monkeypatch.setenv("SSP_JAX_CACHE", str(tmp_path / "cache"))
  real = shutil.disk_usage
  monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(1 << 40, 1 << 40, 8 << 20)
                      if str(p).startswith(str(tmp_path / "cache")) else real(p))
  monkeypatch.setattr(W, "_train_and_save", lambda *a: pytest.fail("trained anyway"))
  rc = cli.main(fast_args(assets, str(tmp_path / "run"), 1) + ["--config.warmstart.enabled=true"])
  line = _one_line_exit_2(rc, capsys.readouterr().err)
  assert "8 MiB free" in line and "the warm start needs" in line and "SSP_JAX_CACHE" in line
  assert "workdir" not in line


def test_unwritable_cache_stops_a_gguf_tokenizer_export(tmp_path, monkeypatch):
  import models.checkpoint
  cache = _blocked_cache(tmp_path, monkeypatch)
  with pytest.raises(models.cache.CacheError, match=f"{cache}.*not writable.*SSP_JAX_CACHE"):
    models.checkpoint.gguf_tokenizer_dir(__file__)     # fails before the file is parsed


def test_cache_errors_are_not_taken_for_workdir_faults(tmp_path):
  """`ssp-jax train` turns OSErrors of a full or read-only disk into a workdir message; a
  CacheError carries neither the OS's text nor a chained OSError."""
  e = models.cache.write_failed(str(tmp_path), OSError(30, "Read-only file system"), "x")
  assert train_cli.disk_error(e) is None and "read-only file system" in str(e)


# -- the cached warmstart.json ---------------------------------------------------------------
@pytest.mark.parametrize("content,why", [
    ("", "not readable JSON"), ('{"demos": {"proposer": 3}, "epoch_', "not readable JSON"),
    ("[1, 2]", "not a JSON object"), ('{"demos": {}}', "lacks field"),
])
def test_damaged_warmstart_json_is_a_cache_miss(tmp_path, capsys, content, why):
  entry = tmp_path / "entry"
  entry.mkdir()
  (entry / "config.json").write_text("{}")
  (entry / "warmstart.json").write_text(content)
  assert W.read_meta(str(entry)) is None
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and why in err[0] and "training the warm start again" in err[0]
  (entry / "warmstart.json").write_text(json.dumps({"demos": {}, "epoch_loss": [1.0],
                                                    "version": W.VERSION}))
  assert W.read_meta(str(entry))["epoch_loss"] == [1.0]


def test_damaged_entry_goes_on_to_train_after_the_cache_check(tmp_path, monkeypatch, capsys):
  """warm_params with an empty warmstart.json in its entry: no JSONDecodeError; the miss goes
  on to the pre-training cache check (here: full), not to a traceback."""
  import numpy as np
  monkeypatch.setenv("SSP_JAX_CACHE", str(tmp_path / "cache"))
  config = CL.load_config_file(TINY)
  entry = tmp_path / "cache" / "warmstart" / W.cache_key(config)
  entry.mkdir(parents=True)
  (entry / "warmstart.json").write_text("")
  monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(1 << 40, 1 << 40, 0))
  params = {"w": np.zeros((1024, 1024), np.float32)}
  with pytest.raises(models.cache.CacheError, match=r"has 0 MiB free.*needs about 100 MiB"):
    W.warm_params(config, None, params, None, None)
  assert "treating it as a cache miss" in capsys.readouterr().err


def test_a_cached_warm_start_whose_loss_stayed_flat_is_named(tmp_path, monkeypatch, capsys):
  """The 2026-12-05 cuDNN fault left a warm start at loss 1.4508 -> 1.4483 that the run took
  silently; a cached entry like it is now named, with the way to train it again."""
  monkeypatch.setenv("SSP_JAX_CACHE", str(tmp_path / "cache"))
  config = CL.load_config_file(TINY)
  entry = tmp_path / "cache" / "warmstart" / W.cache_key(config)
  entry.mkdir(parents=True)
  (entry / "config.json").write_text("{}")
  (entry / "warmstart.json").write_text(json.dumps(
      {"demos": {"proposer": 1}, "epoch_loss": [1.4508, 1.4483], "version": W.VERSION}))
  monkeypatch.setattr(models.hf_io, "load_hf_checkpoint", lambda *a, **k: (None, {"w": 1}))
  assert W.warm_params(config, None, {"w": 0}, None, None, dtype="float32") == {"w": 1}
  err = capsys.readouterr().err
  assert "did not fall (1.4508 -> 1.4483" in err and "delete the entry" in err, err
  (entry / "warmstart.json").write_text(json.dumps(
      {"demos": {"proposer": 1}, "epoch_loss": [0.4061, 0.0345], "version": W.VERSION}))
  W.warm_params(config, None, {"w": 0}, None, None, dtype="float32")
  assert "WARNING" not in capsys.readouterr().err


def test_cudnn_warm_starts_have_their_own_cache_entries():
  """Entries trained with cuDNN before its padding-gradient fix are not reused."""
  config = CL.load_config_file(TINY)
  keys = {}
  for impl in ("xla", "cudnn"):
    with config.unlocked():
      config.rl.attn_impl = impl
    keys[impl] = W.cache_key(config)
  assert keys["xla"] != keys["cudnn"]


# -- answer sets (SSP): bad lines are counted ----------------------------------------------------
def test_answer_lines_nan_infinity_empty_and_deep_nesting_are_counted(tmp_path):
  p = tmp_path / "a.jsonl"
  p.write_text("\n".join([
      json.dumps({"ground_truth": "Paris", "search_turns": 2}),
      '{"ground_truth": NaN, "search_turns": 2}',
      '{"ground_truth": Infinity}',
      '{"ground_truth": 1e999}',
      '{"ground_truth": [NaN]}',
      '{"ground_truth": "   "}',
      '{"ground_truth": "x", "search_turns": ' + "[" * 50000 + "]" * 50000 + "}",
      json.dumps({"ground_truth": [1867, "Warsaw"]}),
  ]))
  items, stats = A.load_answers(str(p))
  assert [i.ground_truth for i in items] == ["Paris", ["1867", "Warsaw"]]
  assert stats.bad == 6 and "nan" not in repr([i.ground_truth for i in items])
  assert stats.first_bad.startswith(f"{p}:2:")


def test_answers_path_that_is_a_directory(tmp_path, capsys):
  with pytest.raises(ValueError, match="is a directory"):
    A.load_answers(str(tmp_path))
  rc = cli.main(["train", "--config", TINY, f"--config.workdir={tmp_path / 'never'}",
                 f"--config.ssp.answers_path={tmp_path}"])
  line = _one_line_exit_2(rc, capsys.readouterr().err)
  assert "ssp.answers_path" in line and "is a directory" in line


# -- SvS problem files -------------------------------------------------------------------------
def _problems_gz(path, n):
  lines = "".join(json.dumps({"problem": f"What is {i} + {i}? " + "Think. " * 20,
                              "answer": str(2 * i)}) + "\n" for i in range(n))
  raw = gzip.compress(lines.encode())
  return raw


def test_truncated_jsonl_gz_keeps_the_good_lines_with_one_warning(tmp_path, caplog):
  path = tmp_path / "set.jsonl.gz"
  raw = _problems_gz(path, 2000)
  path.write_bytes(raw[:len(raw) // 2])
  with caplog.at_level(logging.WARNING, logger="ssp_jax.svs.data"):
    problems = D.load_problems(str(path))
  assert 100 < len(problems) < 2000
  assert [p.answer for p in problems] == [str(2 * i) for i in range(len(problems))]
  warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
  assert len(warnings) == 1 and str(path) in warnings[0] and "truncated" in warnings[0]


def test_truncated_jsonl_gz_with_nothing_left_is_exit_2(tmp_path, capsys):
  path = tmp_path / "set.jsonl.gz"
  path.write_bytes(_problems_gz(path, 50)[:40])
  with pytest.raises(ValueError, match="truncated.*no problem could be read"):
    D.load_problems(str(path))
  rc = cli.main(["train", "--config", os.path.join(os.path.dirname(TINY), "svs_tiny.py"),
                 f"--config.workdir={tmp_path / 'run'}", f"--config.svs.train_path={path}"])
  line = _one_line_exit_2(rc, capsys.readouterr().err)
  assert str(path) in line and "truncated" in line


@pytest.mark.parametrize("line,needle", [
    ('{"problem": "What is 1+1?", "answer": NaN}', "`answer` is nan"),
    ('{"problem": "What is 1+1?", "answer": -Infinity}', "`answer` is -inf"),
    ('{"problem": "What is 1+1?", "answer": 1e999}', "`answer` is inf"),
    ('{"prompt": [{"role": "user", "content": "What is 1+1?"}], '
     '"reward_model": {"ground_truth": NaN}}', "`reward_model.ground_truth` is nan"),
    ('{"problem": "What is 1+1?", "answer": ' + "[" * 50000 + "]" * 50000 + "}",
     "nested too deeply"),
])
def test_svs_record_nan_infinity_or_deep_nesting_names_the_line(tmp_path, line, needle):
  """SvS keeps its rule for a malformed record: one error naming file, line and field (never
  the answer "nan", never a RecursionError traceback)."""
  path = tmp_path / "bad.jsonl"
  path.write_text(json.dumps({"problem": "ok?", "answer": "1"}) + "\n" + line + "\n")
  with pytest.raises(ValueError) as e:
    D.load_problems(str(path))
  assert f"{path}:2" in str(e.value) and needle in str(e.value)


def test_svs_train_path_that_is_a_directory(tmp_path):
  with pytest.raises(ValueError, match="is a directory"):
    D.load_problems(str(tmp_path))


def test_over_long_problems_are_left_out_counted_and_cheap_to_measure(caplog):
  """A 20 MB problem is left out (and counted) after tokenising ~one budget of it, not all."""
  problems = [D.MathProblem("short", "What is 2+2?", "4"),
              D.MathProblem("huge", "1 + " * (5 << 20), "0"),
              D.MathProblem("long", "word " * 300, "1")]
  seen = []

  def tokens(text):           # one token per 4 characters, recording what was tokenised
    seen.append(len(text))
    return len(text) // 4 + 10
  with caplog.at_level(logging.WARNING, logger="ssp_jax.svs.data"):
    kept, over = D.fit_prompt_budget(problems, tokens, budget=256, source="set.jsonl")
  assert [p.id for p in kept] == ["short"] and over == 2
  assert max(seen) <= 8 * 256          # the huge row was measured on a prefix
  (msg,) = [r.getMessage() for r in caplog.records]
  assert "2 of 3 problems" in msg and "256 tokens" in msg and "huge" in msg
  with pytest.raises(ValueError, match="every problem's solving prompt"):
    D.fit_prompt_budget(problems[1:], tokens, budget=256)


# -- plot --out ----------------------------------------------------------------------------------
def test_plot_out_onto_a_file_is_one_line(tmp_path, capsys):
  (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
  target = tmp_path / "plots.png"
  target.write_text("not a directory")
  for out in (target, target / "sub"):
    rc = cli.main(["plot", str(tmp_path), "--out", str(out), "--keys", "loss"])
    line = _one_line_exit_2(rc, capsys.readouterr().err)
    assert str(out) in line and "is a file" in line
  assert target.read_text() == "not a directory"


def test_svs_run_leaves_an_over_long_row_out_and_reports_it(tmp_path, caplog):
  """Through `ssp-jax train` (SvS, tiny model, one step): a 2 MB problem row is left out before
  the first step with one warning, and every step reports `data/over_budget` = 1 and no prompt
  the engine had to cut (`svs/prompt_truncated` = 0)."""
  from test_svs_train_cli import fast_args as svs_args, read_metrics
  from ssp_jax.testing.tiny_checkpoint import make_tiny_checkpoint
  ckpt = make_tiny_checkpoint(str(tmp_path / "ckpt"))
  train = tmp_path / "train.jsonl"
  rows = [{"problem": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(8)]
  rows.insert(3, {"problem": "Add these: " + "1 + " * (512 << 10) + "1", "answer": "1"})
  train.write_text("".join(json.dumps(r) + "\n" for r in rows))
  workdir = str(tmp_path / "run")
  with caplog.at_level(logging.WARNING, logger="ssp_jax.svs.data"):
    rc = cli.main(svs_args(ckpt, workdir, 1) + [f"--config.svs.train_path={train}"])
  assert rc == 0
  (msg,) = [r.getMessage() for r in caplog.records if r.name == "ssp_jax.svs.data"]
  assert "1 of 9 problems" in msg and "train-3" in msg
  (row,) = read_metrics(workdir)
  assert row["data/over_budget"] == 1 and row["svs/prompt_truncated"] == 0
