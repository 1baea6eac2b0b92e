#!/usr/bin/env bash
# The whole test suite: sets up (scripts/bootstrap.sh), brings up the two-node Slurm test cluster,
# runs pytest (arguments are passed on), and stops the cluster again if this script started it.
set -euo pipefail
GPUSCHED_NEED_SSHD=1 source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$REPO"
use_test_cluster
python -m pytest "$@"
