"""The typed batches (`ssp_jax.rl.batch.Batch`, `ssp_jax.rl.pack.PackedBatch`): a field that is
missing, of the wrong rank or dtype, or with another row count fails at construction with one
line naming it; the row helpers keep the layout."""
import numpy as np
import pytest

from rl_helpers import make_batch
from ssp_jax.rl import pack as pack_lib
from ssp_jax.rl.batch import Batch


def _fields(n=3, T=8):
  return dict(tokens=np.zeros((n, T), np.int32), loss_mask=np.ones((n, T), np.float32),
              old_logp=np.zeros((n, T), np.float32), advantages=np.zeros(n, np.float32),
              loss_weight=np.ones(n, np.float32), role=np.zeros(n, np.int32),
              prompt=np.arange(n, dtype=np.int32), length=np.full(n, T, np.int32))


@pytest.mark.parametrize("change, message", [
    (dict(length=None), r"^Batch.length is missing; it must be a int32 \[N\] array$"),
    (dict(advantages=np.zeros(4, np.float32)), r"^Batch.advantages has 4 rows but tokens has 3$"),
    (dict(old_logp=np.zeros((3, 9), np.float32)),
     r"^Batch.old_logp has 9 tokens a row but tokens has 8$"),
    (dict(role=np.zeros((3, 8), np.int32)), r"^Batch.role has shape \(3, 8\); it must be int32"),
    (dict(prompt=np.zeros(3, np.float32)), r"^Batch.prompt has dtype float32; it must be int32"),
])
def test_a_bad_field_fails_at_construction_naming_it(change, message):
  with pytest.raises(ValueError, match=message):
    Batch(**dict(_fields(), **change))


def test_a_missing_field_fails_naming_it():
  kw = _fields()
  del kw["loss_weight"]
  with pytest.raises(TypeError, match="loss_weight"):
    Batch(**kw)


def test_fields_are_cast_to_their_dtype_and_frozen():
  b = Batch(**dict(_fields(), advantages=np.zeros(3), role=[0, 1, 1]))   # float64, a list
  assert b.advantages.dtype == np.float32 and b.role.dtype == np.int32
  with pytest.raises(AttributeError):
    b.tokens = b.tokens


def test_row_helpers_keep_the_layout():
  b = make_batch(6)
  sub = b.take_rows(np.asarray([1, 3]))
  assert isinstance(sub, Batch) and sub.num_rows == 2 and sub.row_len == b.row_len
  padded = sub.pad_rows(4, pad_id=7)
  assert padded.num_rows == 4 and list(padded.prompt[2:]) == [-1, -1]
  assert np.all(padded.tokens[2:] == 7) and padded.loss_mask[2:].sum() == 0
  assert "length" in b.as_dict() and "length" not in b.step_inputs()
  pb, _, _ = pack_lib.pack_batch(b, 64)
  assert isinstance(pb.pad_rows(4), pack_lib.PackedBatch)
  assert set(pb.step_inputs()) == set(pack_lib.PackedBatch.step_fields())
