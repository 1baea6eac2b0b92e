"""Jobs on the real test cluster (scripts/k8s-cluster.sh) through the product's one client
(core/kubernetes/jobs.py): real containers on real kubelets with simulated GPUs, each way a Job ends classified as
it really shows, a retry that attaches, the preflight's refusals, and many Jobs on kwok's fake GPU nodes followed by
one shared watch."""

import asyncio
import time

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.kubernetes.job_spec import job_name, job_spec, work_key_of
from airflow_provider_gpusched.core.kubernetes.jobs import JobClient
from airflow_provider_gpusched.core.kubernetes.states import JobPhase
from airflow_provider_gpusched.core.kubernetes.watch import SharedJobWatch
from airflow_provider_gpusched.core.work_tag import WorkTag

pytestmark = pytest.mark.kubernetes
PYTHON = "gpusched.local/python:3.11"
REAL = {"gpusched.io/node-kind": "real"}
ON_KWOK = {
    "node_selector": {"type": "kwok"},
    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
}


def tag(task, map_index=-1, try_number=1):
    return WorkTag(dag_id="k8s_tests", run_id="r1", task_id=task, map_index=map_index, try_number=try_number)


def wait_end(client, name, namespace, timeout=120, **classify):
    deadline = time.monotonic() + timeout
    while True:
        view = client.view(name, namespace, **classify)
        if view.phase.is_terminal or time.monotonic() > deadline:
            return view
        time.sleep(0.5)


@pytest.fixture
def client(k8s_access):
    with JobClient(k8s_access) as c:
        yield c


def test_a_command_runs_in_a_container_on_a_real_node_with_its_simulated_gpus(client, namespace):
    spec = job_spec(
        {
            "image": PYTHON,
            "image_pull_policy": "Never",
            "command": ["python3", "-c"],
            "args": [
                "import os, socket; print('gpus', os.environ['CUDA_VISIBLE_DEVICES'], os.environ['GPUSCHED_SIMULATED_GPU'], 'arg', os.environ['A'])"
            ],
            "env": {"A": "x; echo injected"},
            "gpus": 2,
            "node_selector": REAL,
        }
    )
    sub = client.submit(spec, tag("one"), namespace=namespace)
    assert not sub.attached and sub.name == job_name(work_key_of(tag("one")))
    view = wait_end(client, sub.name, namespace)
    assert view.phase is JobPhase.SUCCEEDED, view.describe
    assert view.node in ("node-1", "node-2")
    out = client.log_text(view.pods[-1].name, namespace)
    gpus = out.split()[1].split(",")
    assert len(gpus) == 2 and all(g in "0123" for g in gpus), out  # two of the node's four, as the plugin gave them
    assert " 1 arg x; echo injected" in out  # SIMULATED (said so), and the value as given, never through a shell


def test_an_exit_code_fails_the_job_naming_it_and_a_retry_runs_it_again(client, namespace):
    spec = job_spec(
        {
            "image": PYTHON,
            "image_pull_policy": "Never",
            "command": ["python3", "-c", "import sys; print('bad'); sys.exit(3)"],
            "node_selector": REAL,
        }
    )
    sub = client.submit(spec, tag("fails"), namespace=namespace)
    view = wait_end(client, sub.name, namespace)
    assert view.phase is JobPhase.FAILED and view.failure.kind == "exit-code" and view.failure.retry
    assert "exit code 3" in view.message
    again = client.submit(spec, tag("fails", try_number=2), namespace=namespace)
    assert not again.attached and again.uid != sub.uid  # the failed Job replaced, not attached to


def test_a_missing_image_fails_at_once_without_waiting_for_a_deadline(client, namespace):
    spec = job_spec(
        {
            "image": "gpusched.local/not-built:1",
            "image_pull_policy": "Never",
            "command": ["true"],
            "node_selector": REAL,
        }
    )
    sub = client.submit(spec, tag("image"), namespace=namespace)
    started = time.monotonic()
    view = wait_end(client, sub.name, namespace, timeout=60)
    assert view.phase is JobPhase.FAILED and view.failure.kind == "image" and not view.failure.retry
    assert "ErrImageNeverPull" in view.message and time.monotonic() - started < 60


def test_more_gpus_than_any_node_has_is_refused_before_anything_is_created(client, namespace):
    spec = job_spec({"image": PYTHON, "command": ["true"], "gpus": 9})
    with pytest.raises(InvalidArgumentError) as err:
        client.submit(spec, tag("nine"), namespace=namespace)
    assert "gpus" in str(err.value) and "kwok-1: 8" in str(err.value) and "node-1: 4" in str(err.value)
    assert client.read_job(job_name(work_key_of(tag("nine"))), namespace) is None


def test_an_unschedulable_pod_says_what_no_node_has(client, namespace):
    # 8 GPUs: only the kwok nodes have them, and their taint is not tolerated
    spec = job_spec({"image": PYTHON, "image_pull_policy": "Never", "command": ["true"], "gpus": 8})
    sub = client.submit(spec, tag("eight"), namespace=namespace)
    deadline = time.monotonic() + 60
    while True:
        view = client.view(sub.name, namespace, unschedulable_for=1, unschedulable_limit=0)
        if view.phase.is_terminal or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert view.failure is not None and view.failure.kind == "unschedulable", view.describe
    assert "Insufficient nvidia.com/gpu" in view.message and "untolerated taint" in view.message


def test_a_retry_attaches_to_the_running_job_of_the_try_before(client, namespace):
    spec = job_spec({"image": PYTHON, "image_pull_policy": "Never", "command": ["sleep", "30"], "node_selector": REAL})
    first = client.submit(spec, tag("attach"), namespace=namespace)
    second = client.submit(spec, tag("attach", try_number=2), namespace=namespace)
    assert second.attached and second.uid == first.uid and "still" in second.note
    assert client.delete(first.name, namespace, wait=60)
    assert client.read_job(first.name, namespace) is None
    assert client.view(first.name, namespace).phase is JobPhase.DELETED


def test_a_namespace_the_credentials_cannot_write_is_refused_naming_what_is_missing(k8s_access, namespace):
    from kubernetes import client as k

    from airflow_provider_gpusched.core.kubernetes.access import ClusterAccess

    api = k8s_access.api_client()
    core, rbac = k.CoreV1Api(api), k.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    rbac.create_namespaced_role(
        namespace,
        {"metadata": {"name": "read"}, "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]}]},
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "read"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    token = core.create_namespaced_service_account_token(
        "reader", namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token
    host, ca = api.configuration.host, api.configuration.ssl_ca_cert
    api.close()
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": host, "certificate-authority": ca}}],
        "users": [{"name": "reader", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "reader"}}],
        "current-context": "c",
    }
    reader = ClusterAccess(kubeconfig=kubeconfig, namespace=namespace, source="connection 'reader'")
    with JobClient(reader) as c, pytest.raises(InvalidArgumentError) as err:
        c.submit(job_spec({"image": PYTHON, "command": ["true"]}), tag("reader"), namespace=namespace)
    text = str(err.value)
    assert text.startswith("namespace") and "connection 'reader'" in text and "create jobs (batch)" in text


def test_a_hundred_jobs_on_fake_gpu_nodes_are_followed_by_one_shared_watch(k8s_access, client, namespace):
    spec = job_spec(
        {
            "image": PYTHON,
            "command": ["true"],
            "gpus": 2,
            # on the pod, where kwok's stages read it: each pod runs 3 s, then succeeds
            "pod_template": {
                "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "3s"}},
                "spec": {"containers": [{"name": "main", "image": PYTHON}]},
            },
            **ON_KWOK,
        }
    )
    names = [client.submit(spec, tag("many", i), namespace=namespace, preflight=i == 0).name for i in range(100)]

    async def follow():
        watch = SharedJobWatch(k8s_access, namespace)
        watch.start()
        subs = [watch.subscribe(n) for n in names]
        ended = {}
        try:
            deadline = time.monotonic() + 180
            while len(ended) < len(names) and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                for s in subs:
                    if s.name in ended:
                        continue
                    listed, job, pods = s.snapshot()
                    if listed and job is not None:
                        conditions = {c["type"]: c["status"] for c in (job.get("status") or {}).get("conditions") or []}
                        if conditions.get("Complete") == "True":
                            ended[s.name] = pods
            return ended, dict(watch.stats)
        finally:
            for s in subs:
                s.close()
            watch.stop()

    ended, stats = asyncio.run(follow())
    assert len(ended) == 100, f"{len(ended)} of 100 ended; {stats}"
    assert all(p and p[0]["spec"]["nodeName"].startswith("kwok-") for p in ended.values())
    # one list and (re)watches of each kind for 100 Jobs, not a request per Job
    assert stats["list jobs"] == 1 and stats["list pods"] == 1, stats
    assert stats["watch jobs"] <= 3 and stats["watch pods"] <= 3, stats
