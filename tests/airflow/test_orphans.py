"""A worker SIGKILLed while its Slurm job runs leaves that job behind; the next DAG run of the same task finds
it: re-attaches where it is the same work, cancels it otherwise, and says so in its log (real Slurm cluster)."""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from .conftest import REPO, jobs_named, load_dag_file, run_and_collect

pytestmark = [pytest.mark.airflow, pytest.mark.slurm]

DAGFILE = REPO / "tests" / "airflow" / "dagfiles" / "t_orphan.py"


def kill_worker_while_its_job_runs(slurm, name):
    """dag.test() in a second process, SIGKILLed once its job runs; then its task instance is marked failed,
    as the scheduler does when a task's heartbeat stops. Returns (run id, job id)."""
    script = (
        f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
        "from tests.airflow.conftest import load_dag_file\n"
        f"load_dag_file(__import__('pathlib').Path({str(DAGFILE)!r})).dag.test()\n"
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(state == "RUNNING" for _, state in jobs_named(slurm, name)):
        time.sleep(0.3)
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()
    [(job_id, state)] = jobs_named(slurm, name)
    assert state == "RUNNING"
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        # (dag.test() leaves it 'queued' while it runs in-process; a deployed worker's shows 'running')
        ti = session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_id == "t_orphan", TaskInstance.state.in_(["queued", "running", "deferred"])
            )
        ).one()
        ti.state = "failed"  # the scheduler's verdict on a task whose worker died
        return ti.run_id, job_id


def test_same_work_left_by_a_killed_worker_is_re_attached(run_dag, slurm, monkeypatch, capfd, tmp_path):
    """The orphan waits for a gate that opens only once the new run's task follows a job (its XCom
    slurm_job_id): however long the new run takes to start, the orphan is still there to be found."""
    import threading

    name = f"orphan-{uuid.uuid4().hex[:8]}"
    gate = tmp_path / "gate"
    monkeypatch.setenv("GPUSCHED_TEST_JOB_NAME", name)
    monkeypatch.setenv("GPUSCHED_TEST_ORPHAN_CMD", f"while [ ! -e {gate} ]; do sleep 0.2; done; echo done")
    old_run, orphan = kill_worker_while_its_job_runs(slurm, name)
    opener = threading.Thread(target=_open_when_a_new_run_follows, args=(orphan, old_run, gate), daemon=True)
    opener.start()
    state, xcoms, states = run_and_collect(load_dag_file(DAGFILE).dag)
    assert state == "success", states
    assert xcoms["job"]["return_value"]["job_id"] == orphan  # its result is the orphan's
    assert [j for j, _ in jobs_named(slurm, name)] == [orphan]  # no second job
    out = capfd.readouterr().out
    assert f"Re-attaching to Slurm job {orphan}, left running by DAG run {old_run}" in out


def _open_when_a_new_run_follows(job_id, old_run, gate, timeout=240):
    """Opens ``gate`` once a DAG run other than ``old_run`` published ``job_id`` as its Slurm job (or after
    ``timeout``: a run that submitted a job of its own then ends, and the test says so)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with create_session() as session:
            rows = session.execute(
                select(XComModel.value).where(
                    XComModel.dag_id == "t_orphan", XComModel.key == "slurm_job_id", XComModel.run_id != old_run
                )
            ).all()
        if any(str(XComModel.deserialize_value(row)) == job_id for row in rows):  # "86" reads back as 86
            break
        time.sleep(0.3)
    gate.write_text("")


def test_other_work_left_by_a_killed_worker_is_cancelled(run_dag, slurm, monkeypatch, capfd):
    name = f"orphan-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("GPUSCHED_TEST_JOB_NAME", name)
    monkeypatch.setenv("GPUSCHED_TEST_ORPHAN_CMD", "sleep 300")
    old_run, orphan = kill_worker_while_its_job_runs(slurm, name)
    monkeypatch.setenv("GPUSCHED_TEST_ORPHAN_CMD", "echo new work")  # the new run's templated command differs
    state, xcoms, states = run_and_collect(load_dag_file(DAGFILE).dag)
    assert state == "success", states
    new = xcoms["job"]["return_value"]["job_id"]
    assert new != orphan
    jobs = dict(jobs_named(slurm, name))
    assert jobs[orphan] == "CANCELLED" and jobs[new] == "COMPLETED"
    out = capfd.readouterr().out
    assert f"Cancelled orphaned Slurm job {orphan} of DAG run {old_run}: its task is failed" in out


def test_job_of_a_run_whose_task_still_runs_is_left_alone(run_dag, slurm, slurm_cluster, monkeypatch, capfd):
    from airflow_provider_gpusched.core.slurm import SlurmJobSpec
    from airflow_provider_gpusched.core.slurm.job import job_comment, task_family_key, task_key

    name = f"orphan-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("GPUSCHED_TEST_JOB_NAME", name)
    monkeypatch.setenv("GPUSCHED_TEST_ORPHAN_CMD", "echo mine")
    # a job of this task in a run Airflow does not know: nobody waits for it, so it is cancelled...
    comment = job_comment(
        task_key("t_orphan", "ghost_run", "job", -1),
        1,
        task=task_family_key("t_orphan", "job"),
        work="0" * 16,
        run="ghost_run",
    )
    ghost = slurm.submit(SlurmJobSpec(command="sleep 300", job_name=name, comment=comment, output="/dev/null")).job_id
    state, xcoms, states = run_and_collect(load_dag_file(DAGFILE).dag)
    assert state == "success", states
    assert dict(jobs_named(slurm, name))[ghost] == "CANCELLED"
    assert f"Cancelled orphaned Slurm job {ghost} of DAG run ghost_run: its task is absent" in capfd.readouterr().out
