#!/usr/bin/env bash
# Runs `ssp-jax train` on this machine, setting up .venv first when it is missing (idempotent,
# through launch/setup_venv.sh).
#   launch/run_local.sh                                   # the tiny CPU default
#   launch/run_local.sh --config configs/tiny.py --config.total_steps=10
# All hyper-parameters live in the config file; this script only sets up and forwards arguments.
# SSP_PIP_EXTRA names an accelerator JAX build to add ("jax[tpu]", "jax[cuda12]").
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
if [[ ! -x .venv/bin/ssp-jax ]]; then
  bash launch/setup_venv.sh
  if [[ -n "${SSP_PIP_EXTRA:-}" ]]; then .venv/bin/python -m pip install -q "$SSP_PIP_EXTRA"; fi
fi
exec .venv/bin/ssp-jax train "$@"
