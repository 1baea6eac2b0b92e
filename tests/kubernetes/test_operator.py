"""KubernetesGpuJobOperator through dag.test() on SQLite against the real test cluster: deferred to its trigger
(dag.test runs triggers in its own process), the container's log in the task's log, the Job deleted once read; a
missing image fails the task at once however many retries it has; a worker-side wait says the exit code."""

import pytest

from ..airflow.conftest import load_dag_file, run_and_collect
from ..conftest import REPO

pytestmark = pytest.mark.kubernetes
DAGS = REPO / "tests" / "airflow" / "dagfiles" / "t_k8s_jobs.py"


@pytest.fixture
def dags(k8s_cluster, namespace, airflow_db, monkeypatch):
    monkeypatch.setenv("GPUSCHED_TEST_KUBECONFIG", k8s_cluster)
    monkeypatch.setenv("GPUSCHED_TEST_NAMESPACE", namespace)
    monkeypatch.setenv("AIRFLOW__GPUSCHED__MIN_DEFERRAL", "0")
    return load_dag_file(DAGS)


def _jobs(k8s_access, namespace):
    from airflow_provider_gpusched.core.kubernetes.jobs import JobClient

    with JobClient(k8s_access) as c:
        return c.list_managed(namespace)


def test_a_deferred_training_job_succeeds_and_its_job_is_deleted(dags, k8s_access, namespace, capfd):
    state, xcoms, states = run_and_collect(dags.train)
    out = capfd.readouterr().out
    assert "epoch 2 gpus" in out  # the container's log, followed by the trigger into the task's log
    assert "succeeded on node-" in out
    assert state == "success", states
    record = xcoms["train"]["return_value"]
    assert record["namespace"] == namespace and record["node"] in ("node-1", "node-2")
    assert _jobs(k8s_access, namespace) == []  # read, then deleted


def test_a_missing_image_fails_the_task_without_its_retries(dags, capfd):
    state, _xcoms, states = run_and_collect(dags.broken)
    assert state == "failed"
    assert states["train"] == ("failed", 1), states  # retries=3, none used
    out = capfd.readouterr().out
    assert "failed (image): ErrImageNeverPull" in out and "no retry" in out
    assert "event: Pod" in out and "Warning ErrImageNeverPull" in out  # the pod's events, in the task's log


def test_a_worker_side_wait_fails_naming_the_exit_code(dags, capfd):
    state, _xcoms, states = run_and_collect(dags.exits)
    assert state == "failed" and states["train"][0] in ("failed", "up_for_retry"), states
    out = capfd.readouterr().out
    assert "diverged at step 7" in out  # the log's tail, read once the Job ended (no trigger followed it)
    assert "failed (exit-code): exit code 5" in out
