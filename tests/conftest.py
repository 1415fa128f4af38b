"""Shared pytest setup: slow tests are skipped unless `-m slow` (or `--run-slow`) is given."""
import atexit
import gc
import os
import shutil
import sys
import tempfile

import pytest

# Every test process sees 8 fake CPU devices, so the multi-device tests (tests/*_multidevice.py)
# run in the same `pytest` invocation as the rest. This must happen before jax is imported;
# single-device tests are unaffected (arrays live on device 0 unless sharded explicitly).
if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# JAX's persistent compilation cache, in a directory of this test session's own (removed at its
# end), never the user's: the suite drops its compiled programs after every file (below), and many
# files and CLI subprocesses compile the same tiny programs again, so a later one reads them back
# instead. The CLIs' own `compile_cache` (ssp_jax/compile_cache.py) yields to the variable.
# SSP_JAX_TEST_COMPILE_CACHE=0 turns it off (every program compiled afresh, as a user's first run).
if os.environ.get("SSP_JAX_TEST_COMPILE_CACHE", "1") == "0":
  os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
else:
  if not os.environ.get("SSP_JAX_TEST_COMPILE_CACHE_DIR"):   # pytest-xdist workers inherit it
    os.environ["SSP_JAX_TEST_COMPILE_CACHE_DIR"] = tempfile.mkdtemp(prefix="ssp_jax_test_xla_")
    atexit.register(shutil.rmtree, os.environ["SSP_JAX_TEST_COMPILE_CACHE_DIR"], True)
  os.environ["JAX_COMPILATION_CACHE_DIR"] = os.environ["SSP_JAX_TEST_COMPILE_CACHE_DIR"]
  os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "true"
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.3")
  # A size bound turns on the cache's file lock: parallel workers never read a half-written entry.
  os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(8 << 30))

# Keep CPU test runs deterministic and quiet.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_addoption(parser):
  parser.addoption("--run-slow", action="store_true", default=False, help="also run slow tests")


def pytest_configure(config):
  config.addinivalue_line("markers", "slow: long-running test, skipped by default")


def pytest_collection_modifyitems(config, items):
  if config.getoption("--run-slow") or "slow" in (config.getoption("-m") or ""):
    return
  skip = pytest.mark.skip(reason="slow: run with --run-slow or -m slow")
  for item in items:
    if "slow" in item.keywords:
      item.add_marker(skip)


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
  """Drops every jitted program after each test file. The suite runs ~1000 tests in one process;
  without this the compiled executables of all of them stay resident and the process grows until
  the compiler runs out of memory late in the run."""
  yield
  jax = sys.modules.get("jax")
  if jax is not None:
    jax.clear_caches()
  gc.collect()
