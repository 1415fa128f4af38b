"""Shared pytest setup: slow tests are skipped unless `-m slow` (or `--run-slow`) is given."""
import os

import pytest

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
