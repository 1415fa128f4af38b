#!/usr/bin/env bash
# Runs `ssp-jax train` on every worker of a TPU VM slice (e.g. v5p-64) at once.
#   TPU_NAME=my-v5p-64 ZONE=us-east5-a [PROJECT=my-project] launch/run_tpu_pod.sh \
#       --config configs/ssp_qwen2_5_7b_instruct.py:tpu,root=/data/ssp
# Copies this checkout to $REMOTE_DIR on all workers (rsync over gcloud scp), then runs
# launch/run_local.sh there, which creates the venv once (idempotent) and starts training.
# The config sets distributed=true so each worker calls jax.distributed.initialize() (Cloud TPU
# gives JAX the coordinator and worker ids) and all workers run the same SPMD loop over one mesh.
# --config.workdir must be on storage every worker sees (NFS, Filestore, a gcsfuse mount): all
# workers write checkpoint shards there, worker 0 the metrics. Multi-process runs are tested with
# 2 local CPU processes (tests/test_multiprocess.py), not yet on a real slice; docs/training.md,
# "Several hosts". Single-host TPU VMs also work with --config.distributed=false.
set -euo pipefail
: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REMOTE_DIR="${REMOTE_DIR:-ssp-jax}"
GCLOUD=(gcloud compute tpus tpu-vm --zone "$ZONE" ${PROJECT:+--project "$PROJECT"})

tar -C "$REPO" --exclude .venv --exclude runs --exclude .git -czf /tmp/ssp-jax-src.tgz .
"${GCLOUD[@]}" scp /tmp/ssp-jax-src.tgz "$TPU_NAME:/tmp/ssp-jax-src.tgz" --worker=all
ARGS=$(printf '%q ' "$@")
"${GCLOUD[@]}" ssh "$TPU_NAME" --worker=all --command \
  "mkdir -p $REMOTE_DIR && tar -xzf /tmp/ssp-jax-src.tgz -C $REMOTE_DIR && \
   SSP_PIP_EXTRA='jax[tpu]' bash $REMOTE_DIR/launch/run_local.sh $ARGS"
