"""`gpusched queue list / stop` in the middle of running sweeps: real DAGs through dag.test(), simulated GPUs
(the Airflow tier's 4 x 24 GiB) and the real Slurm test cluster; the CLI runs as a separate process."""

import json
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest

from .conftest import REPO, load_dag_file, run_and_collect

pytestmark = pytest.mark.airflow

DAGFILE = REPO / "tests" / "airflow" / "dagfiles" / "t_queue.py"


def gpusched(*args, timeout=120):
    result = subprocess.run(
        [sys.executable, "-m", "airflow_provider_gpusched.cli", "queue", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    return result


class StopWhenRunning(threading.Thread):
    """Waits until `gpusched queue list --json` shows the sweep's work running, lists it, then stops the sweep
    with the real CLI; keeps what both printed."""

    def __init__(self, sweep, want, extra=()):
        super().__init__(daemon=True)
        self.sweep, self.want, self.extra = sweep, want, list(extra)
        self.listed = self.stop = None
        self.stopped_at = None

    def run(self):
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            out = gpusched("list", "--sweep", self.sweep, "--json", *self.extra)
            entries = json.loads(out.stdout)["entries"] if out.returncode == 0 else []
            if any(e["state"] in self.want for e in entries):
                self.listed = entries
                break
            time.sleep(0.5)
        else:
            return
        time.sleep(1)  # let the trial print its first line
        self.stop = gpusched(
            "stop", "--sweep", self.sweep, "--reason", "GPU 0 is needed; it's urgent", "--json", *self.extra
        )
        self.stopped_at = time.monotonic()


def run_and_stop(monkeypatch, kind, want, extra):
    """dag.test() of t_queue's ``kind`` DAG under a fresh sweep name while a :class:`StopWhenRunning` stops it:
    (sweep name, run state, xcoms, task states, seconds the run took, the stopper)."""
    sweep = f"q{uuid.uuid4().hex[:6]}_{kind}"
    monkeypatch.setenv("GPUSCHED_TEST_SWEEP", sweep[: -len(kind) - 1])
    dag = getattr(load_dag_file(DAGFILE), kind)
    stopper = StopWhenRunning(sweep, want, extra)
    stopper.start()
    started = time.monotonic()
    state, xcoms, states = run_and_collect(dag)
    took = time.monotonic() - started
    stopper.join(5)
    assert stopper.listed, f"the {kind} sweep's work never showed in gpusched queue list"
    return sweep, state, xcoms, states, took, stopper


def test_stop_a_running_local_sweep(airflow_db, monkeypatch, capfd):
    sweep, state, xcoms, states, took, stopper = run_and_stop(monkeypatch, "local", {"running"}, ["--no-slurm"])
    [entry] = stopper.listed
    assert entry["backend"] == "local" and entry["tag"]["dag_id"] == "t_queue_local"
    assert entry["tag"]["sweep"] == sweep and entry["tag"]["trial"] in ("x=1", "x=2", "x=3")
    assert entry["tag"]["task_id"] == f"{sweep}.trial" and entry["tag"]["map_index"] >= 0
    stop = json.loads(stopper.stop.stdout)
    assert stopper.stop.returncode == 0, stopper.stop.stderr
    assert [s["action"] for s in stop["stopped"]] == ["stopped"], stop
    assert stop["stop_order"], "a stop by sweep leaves an order for its trials that have not started"
    # every trial task failed once (no retry), the stopped one saying who stopped it, the others not started
    trials = {k: v for k, v in states.items() if isinstance(k, tuple)}
    assert len(trials) == 3 and all(s == ("failed", 1) for s in trials.values()), states
    assert state == "failed"
    out = capfd.readouterr().out
    assert "marked failed" not in out  # a stop is not a failure
    marked = [line for line in out.splitlines() if "marked stopped: the trial's task was stopped" in line]
    # only the trial the run had started is marked; the two it never started keep no record (issue 52)
    assert len(marked) == 1 and "work on GPU(s)" in marked[0], marked
    assert "stopped by `gpusched queue stop`" in marked[0] and "GPU 0 is needed; it's urgent" in marked[0]
    assert took < 55, f"the sweep took {took:.0f}s: the stop did not end it (a trial runs 60 s)"
    # nothing of it still runs, and the trials say why they failed
    left = json.loads(gpusched("list", "--sweep", sweep, "--json", "--no-slurm").stdout)
    assert left["entries"] == []
    outcomes = [o for v in xcoms.values() for o in (v.get("gpusched_trial_outcomes") or [])]
    assert sorted(o["state"] for o in outcomes) == ["not_started", "not_started", "stopped"], outcomes
    stopped = next(o for o in outcomes if o["state"] == "stopped")
    assert "gpusched queue stop" in stopped["error"], stopped
    assert gpusched("lift", "--sweep", sweep).stdout.strip() == "lifted 1 stop order(s)"


@pytest.mark.slurm
def test_stop_a_running_slurm_sweep(run_dag, slurm, monkeypatch, capfd):
    sweep, state, xcoms, states, took, stopper = run_and_stop(monkeypatch, "slurm", {"RUNNING"}, ["--no-local"])
    for entry in stopper.listed:
        assert entry["backend"] == "slurm" and entry["tag"]["dag_id"] == "t_queue_slurm"
        assert entry["tag"]["sweep"] == sweep and entry["tag"]["run_id"]
        assert entry["job_name"] == f"sweep.{sweep}" and entry["output"]
    stop = json.loads(stopper.stop.stdout)
    assert stopper.stop.returncode == 0, stopper.stop.stderr
    assert stop["stopped"] and all(s["action"] == "cancelled" for s in stop["stopped"]), stop
    cancelled = {s["id"] for s in stop["stopped"]}
    for job_id in cancelled:
        assert slurm.status(job_id).state == "CANCELLED"
    trials = {k: v for k, v in states.items() if isinstance(k, tuple)}
    assert len(trials) == 2 and all(s == ("failed", 1) for s in trials.values()), states
    out = capfd.readouterr().out
    assert "stopped by `gpusched queue stop`" in out and "Slurm says" in out
    assert took < 55, f"the sweep took {took:.0f}s: the stop did not end it"
    # the trials whose jobs ran are stopped (not failed); one whose job never started keeps no record (issue 52)
    outcomes = [o for v in xcoms.values() for o in (v.get("gpusched_trial_outcomes") or [])]
    assert len(outcomes) == 2 and {o["state"] for o in outcomes} <= {"stopped", "not_started"}, outcomes
    assert any(o["state"] == "stopped" and "gpusched queue stop" in o["error"] for o in outcomes), outcomes
    gpusched("lift", "--sweep", sweep)


def test_stop_a_batched_local_sweep(airflow_db, monkeypatch, capfd):
    """Batched mode: one runner task holds several leases; stopping the sweep stops every group in flight, fails
    the task without retry and marks the trials in flight stopped; those that never ran keep no record."""
    sweep, state, xcoms, states, took, stopper = run_and_stop(monkeypatch, "batched", {"running"}, ["--no-slurm"])
    assert stopper.listed and {e["tag"]["trial"] for e in stopper.listed} == {"chunk 0"}
    assert all(e["tag"]["task_id"] == f"{sweep}.run_batch" for e in stopper.listed)
    stop = json.loads(stopper.stop.stdout)
    assert stop["stopped"] and {s["action"] for s in stop["stopped"]} == {"stopped"}, stop
    assert states[(f"{sweep}.run_batch", 0)] == ("failed", 1), states
    outcomes = xcoms[(f"{sweep}.run_batch", 0)]["gpusched_trial_outcomes"]
    states = [o["state"] for o in outcomes]
    # the trials in flight (2 leases at most) are stopped; those never started keep no record (issue 52)
    assert (
        len(outcomes) == 6
        and 1 <= states.count("stopped") <= 2
        and states.count("stopped") + states.count("not_started") == 6
    ), outcomes
    assert all("gpusched queue stop" in o["error"] for o in outcomes if o["state"] == "stopped"), outcomes
    assert took < 55, f"the sweep took {took:.0f}s: the stop did not end it"
    gpusched("lift", "--sweep", sweep)


@pytest.mark.slurm
def test_list_and_health_through_an_ssh_login_host_connection(airflow_db, login_host, slurm, slurm_cluster, tmp_path):
    """`--slurm-conn-id`: the same Airflow connection the operators use (here ssh to a login host)."""
    from airflow_provider_gpusched.core.slurm import SlurmJobSpec
    from airflow_provider_gpusched.core.slurm.job import job_comment
    from airflow_provider_gpusched.core.work_tag import WorkTag

    port, options = login_host
    conn = json.dumps(
        {
            "conn_type": "slurm",
            "host": "127.0.0.1",
            "login": "root",
            "port": port,
            "extra": {"ssh_options": " ".join(options), "slurm_conf": slurm_cluster},
        }
    )
    dag_id = f"remote_{uuid.uuid4().hex[:6]}"
    tag = WorkTag(dag_id=dag_id, run_id="r1", task_id="train", job_class="normal")
    job = slurm.submit(
        SlurmJobSpec(
            command="sleep 60", comment=job_comment("k" * 24, 1, run="r1", tag=tag), output=str(tmp_path / "%j.out")
        )
    )
    env = {**os.environ, "AIRFLOW_CONN_SLURM_SSH": conn}
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "airflow_provider_gpusched.cli",
                "queue",
                "list",
                "--slurm-conn-id",
                "slurm_ssh",
                "--no-local",
                "--dag",
                dag_id,
                "--json",
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
        )
        listing = json.loads(out.stdout)
        assert listing["slurm"] == "connection 'slurm_ssh' (ssh to 127.0.0.1)"
        assert [(e["id"], e["tag"]["task_id"]) for e in listing["entries"]] == [(job.job_id, "train")]
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "airflow_provider_gpusched.cli",
                "queue",
                "health",
                "--slurm-conn-id",
                "slurm_ssh",
                "--no-airflow",
                "--simulate",
                "1x8GiB",
                "--state-dir",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
        )
        assert "[  ok] slurm reachable: connection 'slurm_ssh' (ssh to 127.0.0.1)" in out.stdout, (
            out.stdout + out.stderr
        )
        out = subprocess.run(
            [sys.executable, "-m", "airflow_provider_gpusched.cli", "queue", "list", "--slurm-conn-id", "nope"],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
        )
        assert out.returncode == 2 and "--slurm-conn-id nope: no such Airflow connection" in out.stderr
    finally:
        slurm.cancel([job.job_id])
