"""Stop strings are matched exactly in the decoded bytes, whatever the tokenization."""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssp_jax.sampling import build_stop_tables, check_stop, first_stop_end
from ssp_jax.sampling.stops import PAD
from ssp_jax.testing.tiny_checkpoint import make_tokenizer
from ssp_jax.tokenizer import IncrementalDecoder, Tokenizer


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("tok"))
  make_tokenizer(path, "chatml")
  return Tokenizer.from_dir(path)


def test_token_bytes_concatenate_to_hf_decode(tok):
  text = "<think> café 東京 </think><search> Moby-Dick author </search>\n\n"
  ids = tok.encode(text)
  assert tok.decode(ids) == text
  assert tok.decode(ids) == tok.hf.decode(ids, clean_up_tokenization_spaces=False)
  rng = np.random.default_rng(0)
  rand = rng.integers(0, tok.vocab_size, size=200).tolist()
  assert tok.ids_to_bytes(rand) == b"".join(tok.token_bytes[i] for i in rand)
  inc = IncrementalDecoder(tok)
  streamed = "".join(inc.push([i]) for i in ids) + inc.flush()
  assert streamed == text


def _first_completion(tok, ids, stops):
  """Reference: the smallest k such that the bytes of ids[:k] contain a stop string."""
  for k in range(1, len(ids) + 1):
    if first_stop_end(tok.ids_to_bytes(ids[:k]), stops)[0] >= 0:
      return k
  return None


def _device_first_hit(tables, ids):
  check = jax.jit(check_stop)
  window = jnp.full((1, tables.prefix_VM.shape[1]), PAD, jnp.int16)
  for k, t in enumerate(ids, 1):
    hit, window = check(window, jnp.asarray([t], jnp.int32), tables)
    if bool(hit[0]):
      return k
  return None


def test_check_stop_matches_bytes_reference(tok):
  rng = np.random.default_rng(1)
  text_ids = tok.encode("<search> who wrote the novel </search> then <answer> Melville </answer>")
  for trial in range(12):
    ids = text_ids + rng.integers(0, tok.vocab_size, size=30).tolist()
    if trial % 2:
      ids = rng.permutation(ids).tolist()
    raw = tok.ids_to_bytes(ids)
    # stop strings cut from the text at arbitrary byte offsets (so they start mid-token)
    stops = []
    for _ in range(3):
      a = int(rng.integers(0, len(raw) - 6))
      s = raw[a:a + int(rng.integers(1, 9))]
      try:
        stops.append(s.decode("utf-8"))
      except UnicodeDecodeError:
        continue
    stops += ["</search>", "</answer>"]
    tables = build_stop_tables(tok.token_bytes, stops).to_device()
    assert _device_first_hit(tables, ids) == _first_completion(tok, ids, stops)


def test_window_tracks_last_bytes(tok):
  tables = build_stop_tables(tok.token_bytes, ["abcdefgh"]).to_device()
  ids = tok.encode("Paris is the capital of France; café 東京")
  window = jnp.full((1, tables.prefix_VM.shape[1]), PAD, jnp.int16)
  for t in ids:
    _, window = check_stop(window, jnp.asarray([t], jnp.int32), tables)
  M = tables.prefix_VM.shape[1]
  want = tok.ids_to_bytes(ids)[-M:]
  assert bytes(np.asarray(window[0]).astype(np.uint8).tolist()) == want
