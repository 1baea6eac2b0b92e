"""`gpusched queue list / stop` on this host's GPU leases, with real holder and child processes (SIMULATED
GPUs: this machine has none)."""

import contextlib
import json
import os
import subprocess
import sys
import time

import pytest

from airflow_provider_gpusched.core.gpu.lease_store import _started_at
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.work_tag import WorkTag

from .test_cli import gpusched

#: a task's holder: takes a lease tagged with its task, runs `sleep 60` on it (the operators' attempt loop,
#: run_attempt, asking for stop and yield requests every 0.2 s) and prints the attempt as JSON
HOLDER = """
import json, sys
from dataclasses import asdict
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.supervisor import Work, run_attempt
from airflow_provider_gpusched.core.work_tag import WorkTag
state_dir, dag, hang = sys.argv[1], sys.argv[2], sys.argv[3] == "hang"
manager = LeaseManager(SimulatedInventory("4x24GiB"), state_dir)
tag = WorkTag(dag_id=dag, run_id="manual__1", task_id="train", map_index=2, try_number=1, sweep="lr", trial="lr=0.1",
              job_class="normal")
lease, why = manager.try_acquire(GPURequest(gpu_memory="6GiB"), "holder", work=tag, grace=2)
if hang:  # a holder that never looks at its requests: only the stopper's own kill can end its child
    import subprocess, time
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    manager.record_child(lease, child.pid)
    print("READY", flush=True)
    time.sleep(60)
request = GPURequest(gpu_memory="6GiB")
outcome = run_attempt(manager, lease, Work(argv=["sleep", "60"]), number=1, request=request, log_path=sys.argv[4],
                      grace=2, yield_interval=0.2)
manager.release(lease)
print("ATTEMPT " + json.dumps(asdict(outcome.attempt)), flush=True)
"""


def gone(pid):
    """The process has exited (a zombie its parent has not reaped yet counts as gone)."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def start_holder(state_dir, tmp_path, dag="d1", hang=False):
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, state_dir, dag, "hang" if hang else "run", str(tmp_path / f"{dag}.log")],
        stdout=subprocess.PIPE,
        text=True,
    )
    return proc


def stop_holders(state_dir, *holders):
    """Kill the holders and the GPU children they leave (each in a session of its own): a holder killed alone leaves
    its child running as an orphan until the next look at the leases stops it."""
    import signal

    children = [e["pid"] for e in listed(state_dir)["entries"] if e.get("pid")]
    for p in holders:
        p.kill()
        p.wait()
    for pid in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def listed(state_dir, *args):
    out = gpusched("queue", "list", "--json", "--no-slurm", "--simulate", "4x24GiB", "--state-dir", state_dir, *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def wait_running(state_dir, count=1):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        entries = listed(state_dir)["entries"]
        if len([e for e in entries if e["state"] == "running"]) >= count:
            return entries
        time.sleep(0.2)
    raise AssertionError(f"no running lease in {state_dir}")


@pytest.mark.heavy  # 1.0 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_list_shows_each_lease_with_its_task_and_filters(manager, state_dir, tmp_path):
    one, two = start_holder(state_dir, tmp_path, "d1"), start_holder(state_dir, tmp_path, "d2")
    try:
        entries = wait_running(state_dir, 2)
        assert sorted(e["tag"]["dag_id"] for e in entries) == ["d1", "d2"]
        e = next(e for e in entries if e["tag"]["dag_id"] == "d1")
        assert e["backend"] == "local" and e["where"].startswith("GPU ") and e["tag"]["task_id"] == "train"
        assert (e["tag"]["map_index"], e["tag"]["sweep"], e["tag"]["trial"]) == (2, "lr", "lr=0.1")
        assert [x["tag"]["dag_id"] for x in listed(state_dir, "--dag", "d2")["entries"]] == ["d2"]
        assert listed(state_dir, "--dag", "d2", "--run", "other")["entries"] == []
        assert len(listed(state_dir, "--sweep", "lr", "--class", "normal", "--state", "RUNNING")["entries"]) == 2
        table = gpusched("queue", "list", "--no-slurm", "--simulate", "4x24GiB", "--state-dir", state_dir)
        assert "d1.train[2]" in table.stdout and "lr: lr=0.1" in table.stdout and "manual__1" in table.stdout
        assert "Slurm not looked at (--no-slurm)" in table.stdout
        watched = gpusched(
            "queue",
            "list",
            "--no-slurm",
            "--simulate",
            "4x24GiB",
            "--state-dir",
            state_dir,
            "--watch",
            "0.1",
            "--count",
            "3",
        )
        assert watched.stdout.count("2 of 2 running") == 3
    finally:
        stop_holders(state_dir, one, two)


@pytest.mark.heavy  # 0.8 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_stop_by_dag_stops_the_child_through_its_holder_and_says_who(manager, state_dir, tmp_path):
    keep, stop = start_holder(state_dir, tmp_path, "keep"), start_holder(state_dir, tmp_path, "stopme")
    try:
        entries = wait_running(state_dir, 2)
        child = next(e["pid"] for e in entries if e["tag"]["dag_id"] == "stopme")
        dry = gpusched(
            "queue",
            "stop",
            "--dag",
            "stopme",
            "--dry-run",
            "--no-slurm",
            "--simulate",
            "4x24GiB",
            "--state-dir",
            state_dir,
        )
        assert dry.returncode == 0 and "would stop 1" in dry.stdout and _started_at(child)
        started = time.monotonic()
        out = gpusched(
            "queue",
            "stop",
            "--dag",
            "stopme",
            "--reason",
            "node reboot; sorry 'all'",
            "--hold",
            "0",
            "--no-slurm",
            "--simulate",
            "4x24GiB",
            "--state-dir",
            state_dir,
            "--json",
        )
        took = time.monotonic() - started
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        assert [(s["task"], s["action"]) for s in result["stopped"]] == [("stopme.train[2]", "stopped")]
        assert result["stop_order"] is None  # --hold 0
        attempt = json.loads(stop.communicate(timeout=30)[0].split("ATTEMPT ", 1)[1])
        assert attempt["stopped"] and attempt["exit_code"] != 0 and attempt["preempted"] is None
        assert (
            "stopped by `gpusched queue stop`" in attempt["halted"] and "node reboot; sorry 'all'" in attempt["halted"]
        )
        assert gone(child), "the child still runs"
        assert took < 10, f"stopping took {took:.1f}s"
        assert [e["tag"]["dag_id"] for e in listed(state_dir)["entries"]] == ["keep"]  # the other work runs on
    finally:
        stop_holders(state_dir, keep, stop)


def test_a_holder_that_does_not_act_has_its_child_killed(manager, state_dir, tmp_path):
    hung = start_holder(state_dir, tmp_path, "hung", hang=True)
    try:
        assert hung.stdout.readline().strip() == "READY"
        [entry] = listed(state_dir)["entries"]
        out = gpusched(
            "queue",
            "stop",
            entry["id"],
            "--wait",
            "0.5",
            "--no-slurm",
            "--simulate",
            "4x24GiB",
            "--state-dir",
            state_dir,
            "--json",
        )
        [stopped] = json.loads(out.stdout)["stopped"]
        assert stopped["action"] == "forced" and "did not stop it" in stopped["detail"], stopped
        assert gone(entry["pid"])
    finally:
        hung.kill()
        hung.wait()


def test_stop_needs_a_selection_and_names_unknown_ids(manager, state_dir):
    out = gpusched("queue", "stop", "--no-slurm", "--simulate", "4x24GiB", "--state-dir", state_dir)
    assert out.returncode == 2 and "say what to stop" in out.stderr and "Traceback" not in out.stderr
    out = gpusched("queue", "stop", "0123456789abcdef", "--no-slurm", "--simulate", "4x24GiB", "--state-dir", state_dir)
    assert out.returncode == 1 and "0123456789abcdef: not running" in out.stdout
    out = gpusched("queue", "stop", "--all", "--dag", "x", "--no-slurm", "--state-dir", state_dir)
    assert out.returncode == 2 and "--all stops everything" in out.stderr


def test_a_lease_taken_outside_airflow_is_listed_without_a_task(manager, state_dir):
    lease, _ = manager.try_acquire(GPURequest(gpus=1), "a notebook")
    try:
        [entry] = listed(state_dir)["entries"]
        assert entry["tag"] == WorkTag(job_class="normal").to_dict() and entry["job_name"] == "a notebook"
        assert entry["state"] == "starting"  # no child recorded
    finally:
        manager.release(lease)


def test_health_checks_the_lease_directory(state_dir, tmp_path):
    out = gpusched(
        "queue", "health", "--no-slurm", "--no-airflow", "--simulate", "2x16GiB", "--state-dir", str(tmp_path)
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[warn] GPU inventory: SIMULATED: 2 GPU(s)" in out.stdout and "[  ok] lease directory" in out.stdout
    assert "[skip] slurm reachable: Slurm not looked at (--no-slurm)" in out.stdout
    os.chmod(tmp_path, 0o777)
    try:
        out = gpusched(
            "queue",
            "health",
            "--no-slurm",
            "--no-airflow",
            "--simulate",
            "2x16GiB",
            "--state-dir",
            str(tmp_path),
            "--json",
        )
        assert out.returncode == 1
        [bad] = [c for c in json.loads(out.stdout)["checks"] if c["status"] == "FAIL"]
        assert bad["name"] == "lease directory" and "writable by every user" in bad["detail"]
    finally:
        os.chmod(tmp_path, 0o700)
    out = gpusched("queue", "health", "--no-slurm", "--no-airflow", "--state-dir", str(tmp_path))
    assert out.returncode == 1 and "[FAIL] GPU inventory: No GPU inventory" in out.stdout


def test_health_names_stale_leases_of_dead_holders(state_dir, tmp_path):
    """A holder that died without releasing leaves its lease file; health warns about it (and changes nothing)."""
    died = subprocess.run(
        [
            sys.executable,
            "-c",
            HOLDER.split("request = GPURequest")[0].replace("if hang:", "import os; os._exit(0)\nif hang:"),
            state_dir,
            "dead",
            "run",
            str(tmp_path / "x.log"),
        ]
    )
    assert died.returncode == 0
    out = gpusched(
        "queue", "health", "--no-slurm", "--no-airflow", "--simulate", "4x24GiB", "--state-dir", state_dir, "--json"
    )
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert (
        checks["stale leases"]["status"] == "warn"
        and "1 lease file(s) of dead processes" in checks["stale leases"]["detail"]
    ), checks
    assert checks["orphaned GPU processes"]["status"] == "ok"
    assert out.returncode == 0  # a warning, not a failure
    assert any(name.endswith(".json") and len(name) == 21 for name in os.listdir(state_dir))  # left as it was


def test_a_stop_of_one_batched_group_records_every_trial_in_flight_as_stopped(manager, state_dir, tmp_path):
    """Batched mode: `gpusched queue stop` may reach one group's lease before another's (the stop command asks
    each holder in turn, and each looks once a second). The first halt stops every group in flight through the
    runner's shared stop; the trials of the other groups must still read "stopped by ...", not "its runner
    stopped before recording an outcome" (issue 29: the trial starting when the stop arrived)."""
    import threading

    from airflow_provider_gpusched.core.gpu.sweep_batch import run_local_batch
    from airflow_provider_gpusched.core.stops import StopRequest, WorkHalted
    from airflow_provider_gpusched.core.sweep import Objective, SweepSpec
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession

    spec = SweepSpec(
        name="halt",
        test_config=[{"x": [1, 2]}],
        objective=Objective("y"),
        command=[sys.executable, "-c", "import time; time.sleep(60)", "{x}"],
        results_root=str(tmp_path / "results"),
    )
    session = SweepSession(spec)
    manifest = session.prepare()
    tag = WorkTag(dag_id="d", run_id="r", task_id="halt.run_batch", sweep="halt", job_class="normal")
    raised = []

    def run():
        try:
            run_local_batch(
                manifest,
                manifest.pending,
                manager,
                GPURequest(gpu_memory="4GiB"),
                parallel=2,
                trials_per_process=1,
                work=tag,
            )
        except WorkHalted as exc:
            raised.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        leases = [lease for lease in manager.leases() if lease.child_pids]
        if len(leases) == 2 and all(session.store.state(t) == "running" for t in manifest.pending):
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the two groups never ran")
    request = StopRequest.now("only the first lease is asked")
    manager.store.request_stop(leases[0].lease_id, request.to_dict())  # the other group hears it from the runner
    runner.join(30)
    assert not runner.is_alive(), "the batch did not stop"
    assert raised and "stopped by `gpusched queue stop`" in str(raised[0])
    for trial in manifest.pending:
        status = session.store.status(trial)
        assert status["state"] == "stopped", status  # started and stopped: not a failure
        assert "stopped by `gpusched queue stop`" in status["error"] and "only the first lease" in status["error"], (
            status
        )
    assert not manager.leases()
