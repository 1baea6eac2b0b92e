"""LocalGPUOperator, @task.local_gpu and GPUAvailableSensor through dag.test() on SIMULATED GPUs."""

import os
import socket
import threading
import time

import psutil
import pytest

from airflow_provider_gpusched.core.board import LEASE_XCOM, build_board, read_lease_record
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest

from .conftest import REPO, load_dag_file, the_dag

pytestmark = pytest.mark.airflow


@pytest.fixture
def run(airflow_db):
    from .conftest import run_and_collect

    return run_and_collect


def shared_manager():
    return LeaseManager(SimulatedInventory("4x24GiB"), os.environ["AIRFLOW__GPUSCHED__GPU_STATE_DIR"])


def test_example_local_gpu_dag(run):
    state, xcoms, states = run(the_dag(REPO / "dags" / "local_gpu_trials.py"))
    assert state == "success", states
    losses = sorted(v["return_value"]["loss"] for k, v in xcoms.items() if isinstance(k, tuple) and k[0] == "trial")
    assert losses == [0.0, 0.07, 0.09, 0.2]
    gpus = xcoms[("trial", 0)]["gpus_used"]
    assert gpus[0]["uuid"].startswith("GPU-SIMULATED-") and gpus[0]["simulated"] is True
    two = xcoms["two_gpu_trial"]["return_value"]
    assert len({g["index"] for g in two["gpus"]}) == 2 and two["simulated"]
    oom = xcoms["oom_then_retry"]["return_value"]
    assert oom["oom_retries"] == 1
    assert [a["request"] for a in oom["attempts"]] == ["4.0GiB on 1 GPU", "6.0GiB on 1 GPU"]
    assert xcoms["best"]["return_value"]["lr"] == 0.01
    assert shared_manager().leases() == []
    # each try published its lease for the UI's GPU board (the api-server may be on another host)
    records = [read_lease_record(v[LEASE_XCOM], str(k)) for k, v in xcoms.items() if LEASE_XCOM in v]
    assert sorted(r.map_index for r in records if r.task_id == "trial") == [0, 1, 2, 3]
    assert {r.dag_id for r in records} == {"gpusched_local_gpu_trials"}
    board = build_board(records)
    assert [h["host"] for h in board["hosts"]] == [socket.gethostname()] and board["hosts"][0]["simulated"]
    trial0 = next(r for r in records if r.task_id == "trial" and r.map_index == 0)
    assert trial0.gpus == [g["index"] for g in gpus] and trial0.job_class == "normal"


def test_task_defers_while_gpus_are_busy_then_runs(run):
    manager = shared_manager()
    held, _ = manager.try_acquire(GPURequest(gpus=1), "someone else")
    releaser = threading.Timer(2.0, manager.release, args=[held])
    releaser.start()
    started = time.monotonic()
    state, xcoms, states = run(load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_local_gpu.py").whole_host)
    releaser.join()
    assert state == "success", states
    assert time.monotonic() - started >= 2.0
    assert sorted(g["index"] for g in xcoms["all_gpus"]["return_value"]["gpus"]) == [0, 1, 2, 3]


def release_once_waited(manager, lease, seconds: float) -> threading.Thread:
    """Release ``lease`` ``seconds`` after some request is marked waiting for GPUs (the task has looked)."""

    def release():
        deadline = time.monotonic() + 120
        while not manager.yields.waiting() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(seconds)
        manager.release(lease)

    thread = threading.Thread(target=release)
    thread.start()
    return thread


def test_defer_after_takes_a_gpu_that_frees_soon_without_deferring(run, capfd):
    """With defer_after, a task that finds the GPUs busy looks again in its worker and takes them when they free
    (no deferral, no task restart); one that finds them busy for longer than defer_after defers as before."""
    dags = load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_local_gpu.py")
    manager = shared_manager()
    held, _ = manager.try_acquire(GPURequest(gpus=1), "someone else")
    releaser = release_once_waited(manager, held, 1.0)
    state, _, states = run(dags.looks_again_here)
    releaser.join()
    assert state == "success", states
    text = "".join(capfd.readouterr())
    assert "looking again here for 60s before deferring" in text
    assert "Pausing task as DEFERRED" not in text

    held, _ = manager.try_acquire(GPURequest(gpus=1), "someone else")
    releaser = release_once_waited(manager, held, 3.0)
    dags.looks_again_here.get_task("all_gpus").defer_after = 1.0
    state, _, states = run(dags.looks_again_here)
    releaser.join()
    assert state == "success", states
    text = "".join(capfd.readouterr())
    assert "looking again here for 1s before deferring" in text and "Pausing task as DEFERRED" in text


def test_timeout_kills_the_process_group_and_frees_the_gpu(run, tmp_path, monkeypatch):
    pidfile = tmp_path / "grandchild.pid"
    monkeypatch.setenv("GPUSCHED_TEST_PIDFILE", str(pidfile))
    state, _, states = run(load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_local_gpu.py").kill)
    assert state == "failed"
    grandchild = int(pidfile.read_text())
    time.sleep(0.3)
    assert not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
    assert shared_manager().leases() == []


def test_impossible_request_and_callable_exception_fail_clearly(run, capfd):
    state, _, states = run(load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_local_gpu.py").errors)
    assert state == "failed"
    assert states["too_many"][0] == "failed" and states["raises"][0] == "failed"
    text = "".join(capfd.readouterr())
    assert "gpus: expected at most 4" in text
    assert "KeyError: 'missing-column'" in text and "deep" in text


def test_operator_rejects_bad_arguments_at_parse_time():
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

    with pytest.raises(AirflowException, match="gpu_memory"):
        LocalGPUOperator(task_id="x", command=["true"], gpu_memory="lots")
    with pytest.raises(AirflowException, match="argv list"):
        LocalGPUOperator(task_id="y", command="python train.py")
    with pytest.raises(AirflowException, match="exactly one"):
        LocalGPUOperator(task_id="z")
    with pytest.raises(AirflowException, match="defer_after: expected seconds"):
        LocalGPUOperator(task_id="v", command=["true"], defer_after=-1)
    assert LocalGPUOperator(task_id="w", command=["true"], gpus=3).pool_slots == 3


def test_gpu_available_sensor_waits_for_free_gpus(run):
    manager = shared_manager()
    held = [manager.try_acquire(GPURequest(gpus=1), f"other {i}")[0] for i in range(3)]  # one GPU left
    filler, _ = manager.try_acquire(GPURequest(gpu_memory="10GiB"), "filler")  # ...and it is partly used
    timers = [threading.Timer(1.5, manager.release, args=[lease]) for lease in [*held, filler]]
    for t in timers:
        t.start()
    started = time.monotonic()
    state, _, states = run(load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_local_gpu.py").sensor)
    for t in timers:
        t.join()
    assert state == "success", states
    assert time.monotonic() - started >= 1.5
