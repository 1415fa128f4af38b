"""The first run (issue 16): planned encoding shapes, the shared passage + window pass, the
default index's cache key, and a log free of library chatter. The build time itself is a
benchmark (bench/index_build.py), not a test."""
import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

pytest.importorskip("transformers")

from retrieval import index as index_lib  # noqa: E402
from retrieval import windows  # noqa: E402
from retrieval.corpus import default_corpus_path  # noqa: E402
from retrieval.encoders import (DenseEncoder, bucket, default_encoder_path, detect_spec,  # noqa: E402
                                encoder_digest, length_bucket, load_tokenizer, plan_batches,
                                plan_lengths)
from retrieval.search import default_index_key, load_retriever  # noqa: E402
from retrieval_helpers import corpus_records, make_tiny_bert, write_corpus  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU = [jax.devices("cpu")[0]]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
  return make_tiny_bert(str(tmp_path_factory.mktemp("tiny_bert")))


def check_plan(lengths, plan, n_dev=1):
  rows = np.concatenate([r for r, _, _ in plan])
  assert sorted(rows.tolist()) == list(range(len(lengths)))        # every text exactly once
  for r, B, T in plan:
    assert len(r) <= B and B % n_dev == 0 and max(lengths[i] for i in r) <= T


def test_plan_covers_every_text_with_few_shapes():
  rng = np.random.default_rng(0)
  lengths = np.concatenate([rng.integers(5, 60, 5000), rng.integers(100, 256, 800), [256, 3]])
  padded = plan_lengths(lengths, 256)
  assert padded[-1] == 256 and padded == sorted(set(padded)) and len(padded) <= 32
  for n_dev in (1, 8):
    plan = plan_batches(lengths, padded, n_dev)
    check_plan(lengths, plan, n_dev)
    assert len({(B, T) for _, B, T in plan}) == len(padded)        # one shape per length
  assert plan_lengths([7, 7, 7], 256) == [8]
  assert plan_lengths([], 256) == [] and plan_batches([], [], 1) == []
  # a costly compile buys fewer lengths; a free one as many as help
  assert len(plan_lengths(lengths, 256, compile_tokens=1e9)) == 1
  assert len(plan_lengths(lengths, 256, compile_tokens=0)) > len(padded)


def test_plan_pads_the_default_index_far_less_than_fixed_buckets():
  """The shipped corpus's passages and 1-sentence windows, as the default index encodes them."""
  spec = detect_spec()
  tok = load_tokenizer(spec.path, spec.max_length)
  recs = corpus_records()
  texts = [r["contents"] for r in recs]
  texts += [w for r in recs for w in windows.passage_windows(r["contents"], 1)]
  lengths = [len(e.ids) for e in tok.encode_batch(texts)]
  plan = plan_batches(lengths, plan_lengths(lengths, spec.max_length), 1)
  check_plan(lengths, plan)
  planned = sum(B * T for _, B, T in plan)
  fixed = 0     # the fixed buckets (steps of 32, batches of 256), passages and windows apart
  for part in (lengths[:len(recs)], lengths[len(recs):]):
    s = sorted(part)
    for i in range(0, len(s), 256):
      fixed += bucket(len(s[i:i + 256]), 1, 256) * length_bucket(s[i + 255 if i + 255 < len(s)
                                                                     else -1], 256)
  real = sum(lengths)
  assert planned / real < 1.08 and fixed / real > 1.25


def test_encode_many_equals_encode_ids(tiny_bert):
  enc = DenseEncoder(detect_spec(tiny_bert), batch_size=8, devices=CPU)
  recs = corpus_records()[:30]
  texts = [r["contents"][:n] for r, n in zip(recs, [20, 60, 200, 400, 1000] * 6)]
  ids = enc.tokenize(texts + texts[:3], "passage")                  # with duplicates
  seen = []
  many = enc.encode_many(ids, progress=seen.append)
  np.testing.assert_allclose(many, enc.encode_ids(ids), atol=1e-5)
  single = np.concatenate([enc.encode_ids([x]) for x in ids[:6]])
  np.testing.assert_allclose(many[:6], single, atol=1e-5)
  assert sum(seen) == len(ids)


def test_separate_window_encoding_equals_encoding_each_text(tiny_bert, tmp_path):
  recs = corpus_records()[:20]
  recs.append({"id": "x", "contents": '"One"\nA single sentence passage.'})   # its own window
  corpus = write_corpus(str(tmp_path / "c.jsonl"), recs)
  spec = detect_spec(tiny_bert)
  enc = DenseEncoder(spec, batch_size=8, devices=CPU)
  out = str(tmp_path / "idx")
  meta = index_lib.build_dense(corpus, out, spec, encoder=enc, shard_size=8, sentence_windows=1,
                               window_encoding="separate", progress=False)
  passages = np.concatenate([np.load(index_lib.shard_path(out, k)) for k in range(3)])
  wins = np.concatenate([np.load(windows.shard_path(out, k)) for k in range(3)])
  want_p = enc.encode([r["contents"] for r in recs], "passage")
  want_w = enc.encode([w for r in recs for w in windows.passage_windows(r["contents"], 1)],
                      "passage")
  np.testing.assert_allclose(passages, want_p, atol=1e-5)
  np.testing.assert_allclose(wins, want_w, atol=1e-5)
  np.testing.assert_array_equal(wins[-1], passages[-1])          # encoded once, shared
  assert meta["windows"]["num_windows"] == len(want_w)
  assert meta["encoder_digest"] == encoder_digest(tiny_bert)


def copy_encoder(src, dst):
  shutil.copytree(src, dst)
  return dst


def test_cache_key_ignores_where_things_are_installed(tmp_path):
  spec = detect_spec()
  moved = detect_spec(copy_encoder(spec.path, str(tmp_path / "elsewhere" / "model")))
  corpus = default_corpus_path()
  assert moved.path != spec.path
  assert default_index_key(corpus, moved) == default_index_key(corpus, spec)
  import dataclasses
  assert default_index_key(corpus, dataclasses.replace(spec, max_length=128)) != \
      default_index_key(corpus, spec)
  with open(os.path.join(moved.path, "config.json")) as f:
    cfg = json.load(f)
  cfg["layer_norm_eps"] = 1e-6                                      # other bytes: other index
  with open(os.path.join(moved.path, "config.json"), "w") as f:
    json.dump(cfg, f)
  assert default_index_key(corpus, moved) != default_index_key(corpus, spec)


def test_index_finds_the_installed_encoder_when_its_recorded_one_is_gone(tmp_path):
  """An index built from another checkout's virtualenv (since removed) loads with this one's
  byte-identical encoder."""
  other = copy_encoder(default_encoder_path(), str(tmp_path / "other_venv" / "model"))
  corpus = write_corpus(str(tmp_path / "c.jsonl"), corpus_records()[:6])
  out = str(tmp_path / "idx")
  index_lib.build_dense(corpus, out, detect_spec(other), devices=CPU, progress=False)
  shutil.rmtree(str(tmp_path / "other_venv"))
  r = load_retriever(out)
  assert r.spec.path == default_encoder_path()
  assert r.search([corpus_records()[2]["contents"]], 1)[0][0]["id"] == corpus_records()[2]["id"]


NOISE = ("xla_bridge", "faiss.loader", "Loading faiss", "PyTorch was not found",
         "Unable to initialize backend")


def run_logged(code: str) -> str:
  """stderr of a fresh interpreter that logs at INFO (as `ssp-jax train` does) and runs code."""
  env = {k: v for k, v in os.environ.items()
         if k not in ("TF_CPP_MIN_LOG_LEVEL", "TRANSFORMERS_NO_ADVISORY_WARNINGS",
                      "SSP_JAX_DEBUG")}
  env.update(PYTHONPATH=ROOT, JAX_PLATFORMS="")   # let jax probe its backends
  pre = ("import logging, sys; logging.basicConfig(level=logging.INFO, "
         "format='%(levelname)s %(name)s: %(message)s')\n")
  p = subprocess.run([sys.executable, "-c", pre + code], env=env, capture_output=True,
                     text=True, timeout=300)
  assert p.returncode == 0, p.stderr
  return p.stderr


def test_library_chatter_is_quieted_and_own_messages_stay(tiny_bert, tmp_path):
  probe = ("import jax; jax.devices(); import faiss, transformers\n"
           "logging.getLogger('ssp_jax.x').info('own message')\n")
  loud = run_logged(probe)
  assert any(n in loud for n in NOISE)          # the chatter exists here, so the test can fail
  quiet = run_logged("from ssp_jax.quiet import quiet_libraries; quiet_libraries()\n" + probe)
  assert not [n for n in NOISE if n in quiet], quiet
  assert "own message" in quiet
  # The CLI entry quiets before a verb imports anything: an index build logs nothing else.
  corpus = write_corpus(str(tmp_path / "c.jsonl"), corpus_records()[:3])
  err = run_logged("from ssp_jax import cli\n"
                   f"sys.exit(cli.main(['index', 'build', '--corpus', {corpus!r}, '--out', "
                   f"{str(tmp_path / 'idx')!r}, '--encoder-path', {tiny_bert!r}, '--quiet']))\n")
  assert not [ln for ln in err.splitlines() if ln.startswith(("INFO", "WARNING"))], err
