"""`compile_cache` (ssp_jax/compile_cache.py): the CLIs store compiled programs under the cache
root, so a second process loads them instead of compiling; off with "" or when the user chose a
directory; a directory that cannot be made is a warning, not a failed run."""
import json
import os
import subprocess
import sys

from ssp_jax import compile_cache

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = r"""
import json, sys
import jax, jax.numpy as jnp
from ssp_jax import compile_cache
hits = []
jax.monitoring.register_event_listener(
    lambda e, **kw: hits.append(e) if e == "/jax/compilation_cache/cache_hits" else None)
path = compile_cache.enable(sys.argv[1])
@jax.jit
def f(x):
  for _ in range(20):
    x = jnp.tanh(x @ x) + x
  return x
f(jnp.ones((32, 32))).block_until_ready()
print(json.dumps({"path": path, "hits": len(hits)}))
"""


def _run(setting: str, env_extra: dict, tmp_path) -> dict:
  env = dict(os.environ, PYTHONPATH=REPO, SSP_JAX_CACHE=str(tmp_path / "cache"),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PLATFORMS="cpu")
  env.pop("JAX_ENABLE_COMPILATION_CACHE", None)     # the suite's own setting (conftest.py)
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  env.update(env_extra)
  out = subprocess.run([sys.executable, "-c", PROGRAM, setting], env=env, capture_output=True,
                       text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  return json.loads(out.stdout.strip().splitlines()[-1]) | {"stderr": out.stderr}


def test_a_second_process_loads_the_programs_the_first_compiled(tmp_path):
  first = _run("auto", {}, tmp_path)
  assert first["path"].startswith(str(tmp_path / "cache" / "xla" / "cpu-"))
  assert os.listdir(first["path"]) and first["hits"] == 0
  second = _run("auto", {}, tmp_path)
  assert second["path"] == first["path"] and second["hits"] >= 1


def test_off_user_directory_and_unwritable_directory(tmp_path):
  assert _run("", {}, tmp_path)["path"] is None
  assert not (tmp_path / "cache").exists()
  assert _run("auto", {"JAX_ENABLE_COMPILATION_CACHE": "false"}, tmp_path)["path"] is None
  mine = tmp_path / "mine"
  r = _run("auto", {"JAX_COMPILATION_CACHE_DIR": str(mine)}, tmp_path)
  assert r["path"] is None and os.listdir(mine)          # JAX used the user's directory
  blocker = tmp_path / "file"
  blocker.write_text("x")
  r = _run(str(blocker / "sub"), {}, tmp_path)
  assert r["path"] is None and "running without the compilation cache" in r["stderr"]


def test_host_tags_name_the_backend_and_the_cpu():
  assert compile_cache.host_tag("gpu").startswith("gpu-")
  assert compile_cache.host_tag("cpu") != compile_cache.host_tag("gpu")
  assert compile_cache.resolve("off", "cpu") is None
  assert compile_cache.resolve("~/x", "cpu") == os.path.expanduser("~/x")
