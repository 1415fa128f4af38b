#!/usr/bin/env bash
# `ssp-jax train` on one GPU host (all its GPUs form the mesh of config.mesh).
#   launch/run_gpu.sh --config configs/ssp_qwen2_5_7b_instruct.py:gpu,root=/data/ssp
# Multi-host GPU: run this on every host with --config.distributed=true and
# JAX_COORDINATOR_ADDRESS=host0:port, JAX_NUM_PROCESSES, JAX_PROCESS_ID set (not needed under
# SLURM or Open MPI: JAX detects them); --config.workdir must be on storage every host sees.
# Tested with 2 local CPU processes (tests/test_multiprocess.py), not yet on GPU hosts;
# docs/training.md, "Several hosts".
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SSP_PIP_EXTRA="${SSP_PIP_EXTRA:-jax[cuda12]}"
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.92}"
exec "$REPO/launch/run_local.sh" "$@"
