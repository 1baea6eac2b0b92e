"""Sweeps done once and results right: two DAG runs of one sweep at once run every trial once; unusable
results and trials that never started are visible, with the reason, and the run is not green."""

import json
import threading
import time

import pytest

from .conftest import REPO, load_dag_file, run_and_collect, run_in_subprocess

pytestmark = pytest.mark.airflow

DAGFILE = REPO / "tests" / "airflow" / "dagfiles" / "t_sweep_hardening.py"


@pytest.fixture
def sweeps_root(tmp_path, monkeypatch, airflow_db):
    root = tmp_path / "sweeps"
    monkeypatch.setenv("AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT", str(root))
    return root


def trial_states(root, sweep):
    out = {}
    for status in (root / sweep / "trials").glob("*/status.json"):
        data = json.loads(status.read_text())
        out[data["label"]] = (data["state"], data.get("error"))
    return out


def test_two_runs_of_one_sweep_at_once_run_each_trial_once(sweeps_root, capfd):
    other: dict = {}

    def second_run():
        other.update(run_in_subprocess(DAGFILE, "t_sweep_twice", timeout=300))

    helper = threading.Thread(target=second_run, daemon=True)
    helper.start()
    # start this run while the other one's trials are running
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and "running" not in str(trial_states(sweeps_root, "twice")):
        time.sleep(0.2)
    assert "running" in str(trial_states(sweeps_root, "twice")), "the other run never started its trials"
    state, xcoms, states = run_and_collect(load_dag_file(DAGFILE).twice)
    helper.join(timeout=300)
    assert state == "success", states
    assert other.get("state") == "success", other
    executions = (sweeps_root / "twice" / "executions.log").read_text().split()
    assert sorted(executions[0::2]) == ["1", "2", "3", "4"]  # every trial ran exactly once
    best = xcoms["twice.leaderboard"]["return_value"]
    assert best["label"] == "x=4" and best["score"] == 8.0
    assert other["xcoms"]["twice.leaderboard"]["return_value"]["score"] == 8.0
    out = capfd.readouterr().out
    assert "waiting for it instead of running it twice" in out or "already succeeded" in out, out[-3000:]
    assert json.loads((sweeps_root / "twice" / "best.json").read_text())["score"] == 8.0
    counts = xcoms["twice.collect"]["return_value"]["counts"]
    assert counts["succeeded"] == 4 and counts["failed"] == 0


def test_unusable_results_are_invalid_with_the_reason_and_the_run_is_not_green(sweeps_root):
    state, xcoms, states = run_and_collect(load_dag_file(DAGFILE).invalid)
    assert state == "failed"
    assert states["invalid.check_trials"][0] == "failed"
    assert states["invalid.leaderboard"][0] == "success"  # the good trial is still published
    assert xcoms["invalid.leaderboard"]["return_value"]["label"] == "x=1"
    trial_tasks = sorted(states[k][0] for k in states if isinstance(k, tuple) and k[0] == "invalid.trial")
    assert trial_tasks == ["failed", "failed", "failed", "success"]
    got = trial_states(sweeps_root, "invalid")
    assert got["x=1"][0] == "succeeded"
    assert got["x=2"][0] == "invalid" and "not valid JSON" in got["x=2"][1]
    assert got["x=3"][0] == "invalid" and "not a finite number" in got["x=3"][1]
    assert got["x=4"][0] == "invalid" and "has no 'y'" in got["x=4"][1] and "loss" in got["x=4"][1]
    counts = xcoms["invalid.collect"]["return_value"]["counts"]
    assert counts["invalid"] == 3 and counts["succeeded"] == 1
    # a re-run tries them again instead of skipping them as succeeded
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession

    spec = load_dag_file(DAGFILE).invalid_spec("invalid")
    spec.results_root = str(sweeps_root)
    manifest = SweepSession(spec).prepare()
    assert sorted(t.label for t in manifest.pending) == ["x=2", "x=3", "x=4"]


def test_invalid_results_recorded_only_when_asked(sweeps_root):
    state, xcoms, states = run_and_collect(load_dag_file(DAGFILE).invalid_recorded)
    assert state == "success", states
    assert all(states[k][0] == "success" for k in states if isinstance(k, tuple))
    assert xcoms["invalid_recorded.collect"]["return_value"]["counts"]["invalid"] == 3


def test_trial_whose_task_failed_before_it_started_is_failed_with_the_reason(sweeps_root):
    state, xcoms, states = run_and_collect(load_dag_file(DAGFILE).never_started)
    assert state == "failed"
    got = trial_states(sweeps_root, "never_started")
    assert set(got) == {"x=1", "x=2"}
    for label, (trial_state, error) in got.items():
        assert trial_state == "failed" and "gpu_memory" in error and "24.0GiB" in error, (label, error)
    counts = xcoms["never_started.collect"]["return_value"]["counts"]
    assert counts["failed"] == 2 and counts["waiting"] == 0


def test_a_slurm_trial_is_the_same_work_in_every_run(tmp_path):
    """Each run has its own manifest, so the trial commands differ; the work (sweep folder, trial, resources) not."""
    import sys

    from airflow_provider_gpusched.backends.slurm import SweepTrialSlurmOperator
    from airflow_provider_gpusched.core.slurm import SlurmJobSpec
    from airflow_provider_gpusched.core.sweep import Objective, SweepSpec
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession
    from airflow_provider_gpusched.core.sweep.running.trial_run import trial_argv, trial_set

    session = SweepSession(
        SweepSpec(
            name="w",
            test_config=[{"x": [1, 2]}],
            command=["true", "{x}"],
            objective=Objective("y"),
            results_root=str(tmp_path),
        )
    )
    a, b = session.prepare(run="run-a"), session.prepare(run="run-b")
    keys = {}
    for name, manifest, trial in (("a1", a, a.pending[0]), ("b1", b, b.pending[0]), ("a2", a, a.pending[1])):
        argv = trial_argv(manifest, trial, sys.executable)
        op = SweepTrialSlurmOperator(task_id=f"t_{name}", command=argv, gpus=1, trials=trial_set(manifest, [trial]))
        keys[name] = op.work_key({}, SlurmJobSpec(command=argv, gpus=1))
    assert keys["a1"] == keys["b1"] != keys["a2"]
