"""`--config PATH[:ARG] --config.a.b=value ...` for the `ssp-jax` verbs.

Works like `ml_collections.config_flags` without absl: the config file is a python module with
`get_config(arg=None)` returning a `ConfigDict`; each `--config.a.b=value` (or `--config.a.b
value`) override is parsed against the type of the existing field. An unknown key or a value of
the wrong type is rejected before any compute, naming the key and suggesting the closest ones.
"""
from __future__ import annotations

import argparse
import ast
import difflib
import importlib.util
import os
from typing import Any, Optional, Sequence

import ml_collections

PREFIX = "--config."


class ConfigOverrideError(ValueError):
  """A bad `--config.*` override or config path; the message names the key and the fix."""


def repo_path(*parts: str) -> str:
  """A path inside the repository checkout (configs/ lives next to ssp_jax/)."""
  return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), *parts)


def platform_and_root(arg: Optional[str], default_root: str,
                      platforms: Sequence[str] = ("tpu", "gpu")) -> tuple[str, str]:
  """The `:ARG` of the paper-setting configs: "gpu,root=/data" -> ("gpu", "/data"); the first of
  `platforms` is the default platform."""
  platform, root = platforms[0], default_root
  for part in filter(None, (arg or "").split(",")):
    if part.startswith("root="):
      root = part[len("root="):]
    elif part in platforms:
      platform = part
    else:
      raise ValueError(f"config arg {part!r}: use {'|'.join(platforms)} and root=PATH, e.g. "
                       f"'{platforms[-1]},root=/data'")
  return platform, root


def load_config_file(spec: str) -> ml_collections.ConfigDict:
  """Runs `get_config(arg)` of the file in `spec` ("path.py" or "path.py:arg")."""
  path, _, arg = spec.partition(":") if not os.path.exists(spec) else (spec, "", "")
  if not os.path.exists(path):
    raise ConfigOverrideError(f"--config: file {path!r} does not exist (e.g. configs/tiny.py)")
  mod_spec = importlib.util.spec_from_file_location(
      "_ssp_config_" + os.path.basename(path).removesuffix(".py"), path)
  module = importlib.util.module_from_spec(mod_spec)
  try:
    mod_spec.loader.exec_module(module)
  except SyntaxError as e:
    raise ConfigOverrideError(f"--config: {e.filename or path}:{e.lineno}: syntax error: "
                              f"{e.msg}; fix the file") from None
  except Exception as e:
    raise ConfigOverrideError(f"--config: importing {path} failed: {_where(e, path)}"
                              f"{type(e).__name__}: {e}") from None
  if not hasattr(module, "get_config"):
    raise ConfigOverrideError(f"--config: {path} defines no get_config(arg=None)")
  try:
    cfg = module.get_config(arg) if arg else module.get_config()
  except ConfigOverrideError:
    raise
  except Exception as e:
    raise ConfigOverrideError(f"--config: get_config({arg!r}) of {path} failed: "
                              f"{_where(e, path)}{type(e).__name__}: {e}") from None
  if not isinstance(cfg, ml_collections.ConfigDict):
    raise ConfigOverrideError(f"--config: get_config() of {path} must return a ConfigDict")
  return cfg


def _where(e: BaseException, path: str) -> str:
  """"line N: " of the innermost traceback frame inside the config file, else ""."""
  import traceback
  frames = [f for f in traceback.extract_tb(e.__traceback__)
            if os.path.abspath(f.filename) == os.path.abspath(path)]
  return f"line {frames[-1].lineno}: " if frames else ""


def split_overrides(argv: Sequence[str]) -> tuple[list[tuple[str, str]], list[str]]:
  """Separates `--config.key=value` / `--config.key value` items from the other arguments."""
  overrides, rest, i = [], [], 0
  argv = list(argv)
  while i < len(argv):
    a = argv[i]
    if a.startswith(PREFIX):
      key, eq, value = a[len(PREFIX):].partition("=")
      if not eq:
        if i + 1 >= len(argv):
          raise ConfigOverrideError(f"--config.{key}: missing value (use --config.{key}=VALUE)")
        value = argv[i + 1]
        i += 1
      overrides.append((key, value))
    else:
      rest.append(a)
    i += 1
  return overrides, rest


def _all_keys(cfg: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
  keys = []
  for k, v in cfg.items():
    keys.append(prefix + k)
    if isinstance(v, ml_collections.ConfigDict):
      keys += _all_keys(v, prefix + k + ".")
  return keys


def _unknown(cfg, key: str) -> ConfigOverrideError:
  close = difflib.get_close_matches(key, _all_keys(cfg), n=3, cutoff=0.5)
  hint = f"; did you mean {', '.join('--config.' + c for c in close)}?" if close else ""
  return ConfigOverrideError(f"unknown config key --config.{key}{hint}")


def _parse_value(key: str, text: str, current: Any) -> Any:
  if isinstance(current, bool):
    low = text.strip().lower()
    if low in ("true", "1", "yes"):
      return True
    if low in ("false", "0", "no"):
      return False
    raise ConfigOverrideError(f"--config.{key}={text!r}: expected true or false")
  if isinstance(current, str):
    return text
  try:
    value = ast.literal_eval(text)
  except (ValueError, SyntaxError):
    if current is None:
      return text
    raise ConfigOverrideError(f"--config.{key}={text!r}: expected type "
                              f"{type(current).__name__} (like {current!r})") from None
  if current is None or value is None:   # None switches an optional knob off (rl.dual_clip)
    return value
  if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
    return float(value)
  if isinstance(current, (tuple, list)) and isinstance(value, (tuple, list)):
    return type(current)(value)
  if type(value) is not type(current):
    raise ConfigOverrideError(f"--config.{key}={text!r}: expected type {type(current).__name__} "
                              f"(like {current!r}), got {type(value).__name__}")
  return value


def apply_overrides(cfg: ml_collections.ConfigDict,
                    overrides: Sequence[tuple[str, str]]) -> ml_collections.ConfigDict:
  """Sets each dotted key (must exist) to its value parsed against the field's current type."""
  for key, text in overrides:
    node, parts = cfg, key.split(".")
    for i, part in enumerate(parts):
      if not isinstance(node, ml_collections.ConfigDict) or part not in node:
        raise _unknown(cfg, key)
      if i < len(parts) - 1:
        node = node[part]
    current = node[parts[-1]]
    if isinstance(current, ml_collections.ConfigDict):
      raise ConfigOverrideError(f"--config.{key} is a section; set one of its fields "
                                f"(--config.{key}.FIELD=VALUE)")
    with node.unlocked() if hasattr(node, "unlocked") else _null():
      node[parts[-1]] = _parse_value(key, text, current)
  return cfg


class _null:
  def __enter__(self):
    return self

  def __exit__(self, *a):
    return False


def add_config_arguments(parser: argparse.ArgumentParser, default: Optional[str] = None) -> None:
  """Adds `--config PATH[:ARG]` and lets the parser accept `--config.KEY=VALUE` overrides, which
  land in `args.config_overrides` as (key, value) pairs (argparse alone rejects them)."""
  parser.add_argument("--config", default=default, metavar="PATH[:ARG]",
                      help="config file with get_config(); override fields with "
                           "--config.FIELD=VALUE" + (f" (default: {default})" if default else ""))
  original = parser.parse_known_args

  def parse_known_args(args=None, namespace=None):
    overrides, rest = split_overrides(args if args is not None else [])
    ns, extras = original(rest, namespace)
    ns.config_overrides = overrides
    return ns, extras

  parser.parse_known_args = parse_known_args


def config_from_args(args: argparse.Namespace) -> ml_collections.ConfigDict:
  """The loaded config with all overrides applied (raises ConfigOverrideError)."""
  if not args.config:
    raise ConfigOverrideError("--config PATH is required (e.g. --config configs/tiny.py)")
  cfg = load_config_file(args.config)
  return apply_overrides(cfg, getattr(args, "config_overrides", []))
