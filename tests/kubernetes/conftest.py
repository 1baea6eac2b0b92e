"""The Kubernetes tier: one real cluster for the tier (its tests run on one worker: tests/conftest.py
SHARED_DEPLOYMENTS), started by scripts/k8s-cluster.sh with kwok's fake GPU nodes and real nodes in namespaces,
stopped at the end. The programs are built once per machine (scripts/k8s-build.sh, a cache outside the checkout)."""

import os
import subprocess
import time
import uuid

import pytest

from airflow_provider_gpusched.core.kubernetes.access import ClusterAccess

from .. import services
from ..conftest import IN_CI, REPO, WORKER, no_service_in_the_fast_tier

pytestmark = pytest.mark.kubernetes
SCRIPT = REPO / "scripts" / "k8s-cluster.sh"
FAKE_NODES, FAKE_GPUS = 4, 8
REAL_NODES, REAL_GPUS = 2, 4


@pytest.fixture(scope="session")
def k8s_cluster():
    """The cluster's admin kubeconfig (system:masters). kwok-1..4 (8 simulated GPUs each, tainted
    kwok.x-k8s.io/node=fake) and node-1..2 (real kubelets, 4 simulated GPUs each)."""
    no_service_in_the_fast_tier("the Kubernetes test cluster")
    root = REPO / (f".k8s-{WORKER}" if WORKER else ".k8s")
    env = {
        **os.environ,
        "GPUSCHED_K8S_ROOT": str(root),
        "GPUSCHED_K8S_FAKE_NODES": str(FAKE_NODES),
        "GPUSCHED_K8S_FAKE_GPUS": str(FAKE_GPUS),
        "GPUSCHED_K8S_NODES": str(REAL_NODES),
        "GPUSCHED_K8S_NODE_GPUS": str(REAL_GPUS),
    }
    given = os.environ.get("GPUSCHED_K8S_KUBECONFIG")  # a cluster already up (scripts/k8s-cluster.sh up): used as it is
    if given:
        yield given
        return
    if os.geteuid() != 0:
        if IN_CI:
            pytest.fail("the Kubernetes test cluster needs root")
        pytest.skip("the Kubernetes test cluster needs root")
    record = services.register(f"k8s-cluster-{root.name}", stop=["bash", str(SCRIPT), "down"], env=env)
    started = time.monotonic()
    proc = subprocess.run(["bash", str(SCRIPT), "up"], env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        subprocess.run(["bash", str(SCRIPT), "down"], env=env, capture_output=True, timeout=300)
        services.stopped(record)
        pytest.fail(f"scripts/k8s-cluster.sh up failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    print(f"the Kubernetes test cluster started in {time.monotonic() - started:.0f} s")
    try:
        yield str(root / "kubeconfig")
    finally:
        subprocess.run(["bash", str(SCRIPT), "down"], env=env, capture_output=True, timeout=300)
        services.stopped(record)


@pytest.fixture(scope="session")
def k8s_access(k8s_cluster):
    return ClusterAccess(kubeconfig_path=k8s_cluster, namespace="default", source="the test cluster")


@pytest.fixture
def namespace(k8s_access):
    """A namespace of the test's own (deleted after it)."""
    from kubernetes import client

    name = f"t-{uuid.uuid4().hex[:8]}"
    api = k8s_access.api_client()
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    for _ in range(100):  # the service account controller makes 'default' in it
        if any(sa.metadata.name == "default" for sa in core.list_namespaced_service_account(name).items):
            break
        time.sleep(0.1)
    try:
        yield name
    finally:
        core.delete_namespace(name, propagation_policy="Background")
        api.close()
