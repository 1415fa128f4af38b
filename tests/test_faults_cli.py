"""Issue 16 drills on checkpoints and the CLIs: corrupt or incomplete HF directories and GGUF
files are named in one line (exit 2); `generate` keeps `</search>` as a stop when it searches and
refuses (or cuts, keeping the template) over-long prompts; answer lines with bad hop counts or
invalid UTF-8 are skipped and counted. Real tiny safetensors checkpoints, the real shipped GGUF
cut short, a real BM25 index."""
import json
import os
import shutil

import pytest

import models
from ssp_jax import cli
from ssp_jax.rollout import RolloutEngine
from ssp_jax.ssp.answers import load_answers
from ssp_jax.testing.small_retriever import WIKI_SNIPPETS
from ssp_jax.testing.tiny_checkpoint import make_tiny_checkpoint


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  return make_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny") / "ckpt"))


def _one_line_exit_2(rc, err):
  lines = [l for l in err.strip().splitlines() if l.strip()]
  assert rc == 2, err
  assert len(lines) == 1 and "Traceback" not in err, err
  return lines[0]


def _generate(path, *extra):
  return cli.main(["generate", "--checkpoint", str(path), "--prompt", "Who wrote Moby-Dick?",
                   "--max-new-tokens", "4", *extra])


# -- damaged checkpoints ----------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_corrupt_safetensors_named_in_one_line(tiny, tmp_path, capsys, damage):
  bad = tmp_path / "bad"
  shutil.copytree(tiny, bad)
  f = bad / "model.safetensors"
  if damage == "truncated":
    with open(f, "r+b") as fh:
      fh.truncate(os.path.getsize(f) // 2)
  else:
    f.write_bytes(b"not a safetensors file" * 4)
  line = _one_line_exit_2(_generate(bad), capsys.readouterr().err)
  assert str(f) in line and "corrupt or incomplete" in line


@pytest.mark.parametrize("field", ["num_attention_heads", "hidden_size", "vocab_size"])
def test_config_json_missing_field(tiny, tmp_path, capsys, field):
  bad = tmp_path / "bad"
  shutil.copytree(tiny, bad)
  cfg = json.loads((bad / "config.json").read_text())
  del cfg[field]
  (bad / "config.json").write_text(json.dumps(cfg))
  line = _one_line_exit_2(_generate(bad), capsys.readouterr().err)
  assert "config.json" in line and repr(field) in line


def test_config_json_not_json(tiny, tmp_path, capsys):
  bad = tmp_path / "bad"
  shutil.copytree(tiny, bad)
  (bad / "config.json").write_text("{\"model_type\": ")
  line = _one_line_exit_2(_generate(bad), capsys.readouterr().err)
  assert "config.json is not valid JSON" in line


@pytest.mark.parametrize("keep", [0.5, 0.002])   # mid-weights, and inside the metadata
def test_truncated_gguf_named_in_one_line(tmp_path, capsys, keep):
  src = models.default_model_path()
  cut = tmp_path / "cut.gguf"
  with open(src, "rb") as f_in, open(cut, "wb") as f_out:
    f_out.write(f_in.read(int(os.path.getsize(src) * keep)))
  line = _one_line_exit_2(_generate(cut), capsys.readouterr().err)
  assert str(cut) in line and "truncated or corrupt" in line
  assert "cannot reshape" not in line or str(cut) in line


# -- generate: stops and long prompts ------------------------------------------------------------
@pytest.fixture
def bm25_index(tmp_path):
  corpus = tmp_path / "corpus.jsonl"
  corpus.write_text("".join(json.dumps({"id": str(i), "contents": c}) + "\n"
                            for i, c in enumerate(WIKI_SNIPPETS)))
  from retrieval.index import build_bm25
  build_bm25(str(corpus), str(tmp_path / "index"), progress=False)
  return str(tmp_path / "index")


@pytest.fixture
def seen_stops(monkeypatch):
  """Records the stop strings each real `RolloutEngine.generate` call gets."""
  seen = []
  real = RolloutEngine.generate

  def spy(self, *a, **kw):
    seen.append(tuple(kw.get("stop") or ()))
    return real(self, *a, **kw)
  monkeypatch.setattr(RolloutEngine, "generate", spy)
  return seen


def test_generate_keeps_search_stop_when_searching(tiny, bm25_index, seen_stops, capsys):
  assert _generate(tiny, "--index-dir", bm25_index) == 0
  assert _generate(tiny, "--index-dir", bm25_index, "--stop", ".") == 0
  assert _generate(tiny, "--stop", "</answer>") == 0            # no retriever: no search stop
  # searching: </answer> by default (as the solver), --stop replaces it; </search> always
  assert seen_stops == [("</answer>", "</search>"), (".", "</search>"), ("</answer>",)]
  lines = [json.loads(l) for l in capsys.readouterr().out.strip().splitlines()]
  assert len(lines) == 3 and all(l["truncated"] is False for l in lines)


def test_over_long_prompt_refused_with_limit(tiny, capsys):
  rc = cli.main(["generate", "--checkpoint", tiny, "--prompt", "Paris is a city. " * 200,
                 "--max-new-tokens", "2", "--max-prompt-tokens", "64"])
  line = _one_line_exit_2(rc, capsys.readouterr().err)
  assert "--max-prompt-tokens=64" in line and "prompt 1 has" in line


def test_over_long_prompt_truncated_keeps_template(tiny, capsys):
  from ssp_jax.tokenizer import Tokenizer
  tok = Tokenizer.from_dir(tiny)
  question = "Paris is a city. " * 200
  rc = cli.main(["generate", "--checkpoint", tiny, "--prompt", question, "--system",
                 "Answer briefly.", "--max-new-tokens", "2", "--max-prompt-tokens", "64",
                 "--long-prompt", "truncate"])
  assert rc == 0
  out = json.loads(capsys.readouterr().out)
  assert out["truncated"] is True and out["num_prompt_tokens"] <= 64
  # what ran is the template around a cut user message: rebuild it and compare the ids
  empty = tok.prompt_ids([{"role": "system", "content": "Answer briefly."},
                          {"role": "user", "content": ""}])
  assert 0 < 64 - len(empty)
  from ssp_jax.generate_cli import fit_prompt
  msgs, cut = fit_prompt(tok, [{"role": "system", "content": "Answer briefly."},
                               {"role": "user", "content": question}], 64, "truncate", "p")
  assert cut and msgs[0]["content"] == "Answer briefly."
  assert question.startswith(msgs[1]["content"]) and 0 < len(msgs[1]["content"]) < len(question)
  text = tok.chat_text(msgs)
  assert text.startswith(tok.chat_text(msgs[:1] + [{"role": "user", "content": ""}])[:20])
  assert text.endswith(tok.chat_text([{"role": "user", "content": "x"}])[-12:])


# -- the answer set --------------------------------------------------------------------------
def test_answer_lines_with_bad_hops_or_bytes_are_skipped_and_counted(tmp_path):
  good = [{"ground_truth": "Paris", "search_turns": 1},
          {"ground_truth": "Warsaw", "search_turns": 10},
          {"ground_truth": "Lima", "search_turns": "3"}]
  bad = [{"ground_truth": "x", "search_turns": 1e9}, {"ground_truth": "x", "search_turns": 11},
         {"ground_truth": "x", "search_turns": 0}, {"ground_truth": "x", "search_turns": 2.5},
         {"ground_truth": "x", "search_turns": True}]
  path = tmp_path / "answers.jsonl"
  with open(path, "wb") as f:
    for rec in good[:1] + bad:
      f.write(json.dumps(rec).encode() + b"\n")
    f.write(b'{"ground_truth": "caf\xe9", "search_turns": 2}\n')   # Latin-1, not UTF-8
    f.write(b"\xff\xfe\x00garbage\n")
    for rec in good[1:]:
      f.write(json.dumps(rec).encode() + b"\n")
  items, stats = load_answers(str(path))
  assert [i.ground_truth for i in items] == ["Paris", "Warsaw", "Lima"]
  assert [i.hops for i in items] == [1, 10, 3]
  assert (stats.good, stats.bad) == (3, 7)
  assert stats.first_bad.startswith(f"{path}:2:") and "outside 1..10" in stats.first_bad


@pytest.mark.parametrize("verb", ["export", "plot", "index"])
@pytest.mark.parametrize("where", ["file", "under_file"])
def test_out_onto_a_file_is_one_line_before_any_work(tmp_path, capsys, verb, where):
  """`--out` onto a file, or under one: one line naming it, exit 2, the file untouched, before
  the checkpoint, metrics or corpus are read (none of them exists here)."""
  f = tmp_path / "afile"
  f.write_text("keep")
  out = str(f) if where == "file" else str(f / "sub")
  args = {"export": [verb, "--checkpoint", str(tmp_path / "no_run"), "--out", out],
          "plot": [verb, str(tmp_path / "no_run"), "--out", out],
          "index": [verb, "build", "--corpus", str(tmp_path / "no.jsonl"), "--encoder", "bm25",
                    "--out", out]}[verb]
  assert cli.main(args) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "--out" in err[0] and str(f) in err[0] and "directory" in err[0]
  assert f.read_text() == "keep"
