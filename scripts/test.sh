#!/usr/bin/env bash
# The whole test suite: sets up (scripts/bootstrap.sh), brings up the single-node Slurm test cluster,
# runs pytest (arguments are passed on), and stops the cluster again if this script started it.
set -euo pipefail
GPUSCHED_NEED_SSHD=1 source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$REPO"
started=""
if ! SLURM_CONF="$REPO/.slurm/etc/slurm.conf" sinfo -h >/dev/null 2>&1; then
  bash scripts/slurm-cluster.sh up
  started=1
fi
cleanup() { [ -z "$started" ] || bash "$REPO/scripts/slurm-cluster.sh" down; }
trap cleanup EXIT
export SLURM_CONF="$REPO/.slurm/etc/slurm.conf"
python -m pytest "$@"
