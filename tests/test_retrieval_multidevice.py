"""Dense encoding split over 8 (fake CPU) devices equals encoding on one."""
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("transformers")

from retrieval.encoders import DenseEncoder, detect_spec  # noqa: E402
from retrieval_helpers import corpus_records, make_tiny_bert  # noqa: E402


def test_data_parallel_encoding_equals_single_device(tmp_path):
  devices = jax.devices("cpu")
  if len(devices) < 8:
    pytest.skip("needs 8 CPU devices (XLA_FLAGS set before jax was imported elsewhere)")
  spec = detect_spec(make_tiny_bert(str(tmp_path / "tiny-e5")))
  texts = [r["contents"] for r in corpus_records()[:21]]
  one = DenseEncoder(spec, batch_size=16, devices=devices[:1]).encode(texts, "passage")
  enc8 = DenseEncoder(spec, batch_size=16, devices=devices[:8])
  assert enc8.batch_size == 16 and enc8.n_dev == 8
  many = enc8.encode(texts, "passage")
  assert np.max(np.abs(one - many)) < 1e-5
  ids = enc8.tokenize(texts, "passage")    # an index build's planned shapes, rows split over 8
  assert np.max(np.abs(one - enc8.encode_many(ids))) < 1e-5
