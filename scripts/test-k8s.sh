#!/usr/bin/env bash
# The Kubernetes tier: the tests marked `kubernetes` (tests/kubernetes/) on a real cluster built here (root).
#   bash scripts/test-k8s.sh            # sets up .venv, builds the cluster's programs once per machine (about 20 min
#                                       # on 2 cores the first time, cached in ~/.cache/gpusched-k8s), starts the
#                                       # cluster, runs the tier, stops the cluster
#   GPUSCHED_K8S_KUBECONFIG=.k8s/kubeconfig bash scripts/test-k8s.sh -x   # a cluster already up (k8s-cluster.sh up)
# Not yet part of the whole suite (scripts/test.sh): the first build on a fresh machine is not yet fitted into CI's
# time (docs/kubernetes.md "Not done yet"). Arguments go to pytest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
source "$here/scripts/bootstrap.sh"
if [ -z "${GPUSCHED_K8S_KUBECONFIG:-}" ]; then
  bash "$here/scripts/k8s-build.sh" core >/dev/null
  bash "$here/scripts/k8s/images.sh" >/dev/null
fi
exec "$here/.venv/bin/python" -m pytest -m kubernetes -p no:cacheprovider tests/kubernetes -v "$@"
