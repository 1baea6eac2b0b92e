"""Idle-time filling through Airflow: a normal task takes the GPUs of a running idle-class task, both
tasks succeed, and the idle task says when and how often it was preempted. Two DAG runs at once: the
idle one in this process, the normal one in a second process (a second worker).

Local GPUs are SIMULATED (4 x 24 GiB); the Slurm test uses the project's real two-node cluster."""

import json
import threading
import time
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager

from .conftest import REPO, jobs_named, load_dag_file, preempted_by_normal_work, run_and_collect, run_in_subprocess

pytestmark = pytest.mark.airflow

DAGFILE = REPO / "tests" / "airflow" / "dagfiles" / "t_idle_fill.py"
FAST_CLASSES = json.dumps(
    {"idle": {"local": {"idle_for": 0, "min_runtime": 0, "grace_period": 3, "backoff": 0.5, "max_backoff": 1}}}
)


def test_local_normal_task_preempts_idle_task_and_both_succeed(airflow_db, monkeypatch):
    import os

    monkeypatch.setenv("AIRFLOW__GPUSCHED__JOB_CLASSES", FAST_CLASSES)
    manager = LeaseManager(SimulatedInventory("4x24GiB"), os.environ["AIRFLOW__GPUSCHED__GPU_STATE_DIR"])
    # the idle task works until it is preempted (up to 120 s: however long the second process takes to start)
    runs = Path(os.environ["AIRFLOW__GPUSCHED__LOCAL_RUN_DIR"])
    normal, state, xcoms, states = preempted_by_normal_work(
        load_dag_file(DAGFILE).local_idle,
        DAGFILE,
        "t_local_normal",
        manager,
        # the trainer has written its first checkpoint, so its SIGTERM handler is set: preempted, it exits 143
        # (a preemption in its first instant, on a fast machine, killed it before: -15)
        ready=lambda: any(runs.glob("**/step")),
    )
    assert normal.get("state") == "success", normal
    assert state == "success", states
    assert states["fill"] == ("success", 1)  # relaunched within the same try: no Airflow retry used
    gpu_time = xcoms["fill"]["gpu_time"]
    assert gpu_time["job_class"] == "idle" and gpu_time["preemptions"] == 1
    assert "preempted for t_local_normal.urgent" in gpu_time["events"][0]
    assert gpu_time["gpu_seconds"] > gpu_time["lost_gpu_seconds"] > 0
    attempts = xcoms["fill"]["return_value"]["attempts"]
    assert [a["exit_code"] for a in attempts] == [143, 0] and attempts[0]["preempted"]
    assert manager.leases() == []


@pytest.mark.slurm
def test_slurm_normal_task_preempts_idle_task_requeued_and_both_succeed(run_dag, slurm, monkeypatch):
    import uuid

    name = f"idle-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("GPUSCHED_TEST_JOB_NAME", name)
    normal: dict = {}

    def run_normal_then_release_the_requeued_job():
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not (
            jobs_named(slurm, name) and jobs_named(slurm, name)[0][1] == "RUNNING"
        ):
            time.sleep(0.3)
        job_id = jobs_named(slurm, name)[0][0]
        normal.update(run_in_subprocess(DAGFILE, "t_slurm_normal"))
        time.sleep(3)  # not within the second of the requeue (see requeue_then_release below)
        while time.monotonic() < deadline + 90:  # Slurm holds a requeued job (cred_expire + 1 s): start it now
            state = dict(jobs_named(slurm, name)).get(job_id)
            if state != "PENDING":
                return
            if (
                slurm.runner.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=False).returncode
                == 0
            ):
                return
            time.sleep(0.5)

    helper = threading.Thread(target=run_normal_then_release_the_requeued_job, daemon=True)
    helper.start()
    state, xcoms, states = run_dag(load_dag_file(DAGFILE).slurm_idle)
    helper.join(timeout=240)
    assert normal.get("state") == "success", normal
    assert state == "success", states
    result = xcoms["fill"]["return_value"]
    assert result["partition"] == "idle" and result["preemptions"] >= 1
    assert "preempted/requeued (restart 1, seen " in result["preemption_events"][0]
    # ran, was preempted, ran again: the work's own lines (the shim's note on a process the preemption left "running"
    # is in the same output: CI, 3031e5f, counted it as a third run)
    assert Path(result["output_path"]).read_text().splitlines().count("run") == 2


@pytest.mark.slurm
def test_a_requeued_python_call_is_judged_by_its_second_start(run_dag, slurm, monkeypatch, tmp_path):
    """The first start left an error record (SystemExit on SIGTERM); the requeued start's value is the result."""
    import uuid

    name = f"requeue-{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "handler-installed"
    monkeypatch.setenv("GPUSCHED_TEST_JOB_NAME", name)
    monkeypatch.setenv("GPUSCHED_TEST_MARKER", str(marker))
    done = threading.Event()

    def requeue_then_release():
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline and not done.is_set():
            time.sleep(0.2)
        if not marker.exists():
            return
        job_id = jobs_named(slurm, name)[0][0]
        slurm.runner.run(["scontrol", "requeue", job_id], check=True)
        # Slurm holds a requeued job (cred_expire + 1 s): start it now, but not within the second of the requeue: a
        # node refuses a credential made in the same second as the old one's revocation ("Job credential revoked")
        # and the job fails instead (a CI run, 2026-11-29)
        time.sleep(3)
        while time.monotonic() < deadline + 60 and not done.is_set():
            if (
                dict(jobs_named(slurm, name)).get(job_id) == "PENDING"
                and slurm.runner.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=False).returncode
                == 0
            ):
                return
            time.sleep(0.5)

    helper = threading.Thread(target=requeue_then_release, daemon=True)
    helper.start()
    state, xcoms, states = run_dag(load_dag_file(DAGFILE).slurm_requeue_python)
    done.set()
    helper.join(timeout=30)
    assert state == "success", states
    assert xcoms["call"]["return_value"] == {"restarts": 1}


def test_example_idle_fill_dag(airflow_db, monkeypatch):
    monkeypatch.setenv("AIRFLOW__GPUSCHED__JOB_CLASSES", FAST_CLASSES)
    module = load_dag_file(REPO / "dags" / "idle_fill.py")
    from airflow.sdk import DAG

    dags = {v.dag_id: v for v in vars(module).values() if isinstance(v, DAG)}
    fill = dags["gpusched_idle_fill"]
    run = fill.test(run_conf={"fillers": 2, "evaluations": 3, "seconds_each": 0.2})
    from .conftest import dag_run_results

    xcoms, states = dag_run_results(run)
    assert run.state == "success", states
    report = xcoms["report"]["return_value"]
    assert report["gpu_seconds"] >= 2 * 3 * 0.2 and report["preemptions"] == 0 and report["best"]["score"] > 0
    assert fill.task_dict["search"].pool == "gpusched_idle"
    state, _, states = run_and_collect(dags["gpusched_train_main"])
    assert state == "success", states
