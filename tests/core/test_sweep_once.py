"""A trial runs once, whichever DAG run asks for it; results that cannot be scored are 'invalid' with the
reason; trials whose task died are failed, not 'waiting' forever. No Airflow."""

import json
import subprocess
import sys
import time

import pytest

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
from airflow_provider_gpusched.core.sweep.running.trial_run import mark_unfinished, result_problem
from airflow_provider_gpusched.core.text import format_table

SLOW = (
    "import json, os, sys, time; open('../../executions.log', 'a').write(sys.argv[1] + chr(10)); "
    "time.sleep(float(sys.argv[2])); json.dump({'y': float(sys.argv[1])}, open('result.json', 'w'))"
)


def slow_spec(root, seconds=3.0, **kw):
    return SweepSpec(
        name="slow",
        test_config=[{"x": [1, 2]}],
        command=[sys.executable, "-c", SLOW, "{x}", str(seconds)],
        objective=Objective("y"),
        results_root=str(root),
        **kw,
    )


def runner(manifest, trial):
    return subprocess.Popen(
        [sys.executable, "-m", "airflow_provider_gpusched.core.sweep.running.trial_run", manifest.path, trial.trial_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.heavy  # 0.8 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_a_trial_running_for_another_run_is_waited_for_and_not_run_again(tmp_path):
    session = SweepSession(slow_spec(tmp_path))
    run_a = session.prepare(run="run-a")
    run_b = session.prepare(run="run-b")  # planned while nothing ran yet: both runs plan both trials
    assert run_a.path != run_b.path and len(run_b.pending) == 2
    trial = run_a.pending[0]
    first = runner(run_a, trial)
    deadline = time.monotonic() + 30
    # until the runner has said who holds the claim: between its lock and its write, the holder is {} (unknown)
    while not session.store.claim_holder(trial) and time.monotonic() < deadline:
        time.sleep(0.05)
    holder = session.store.claim_holder(trial)
    assert holder and holder["run"] == "run-a"
    second = runner(run_b, run_b.trial(trial.trial_id))
    out_b, _ = second.communicate(timeout=60)
    out_a, _ = first.communicate(timeout=60)
    assert first.returncode == 0 and second.returncode == 0, (out_a, out_b)
    assert "is being run by DAG run run-a" in out_b and "waiting for it instead of running it twice" in out_b
    assert "already succeeded (by DAG run run-a); not running it again" in out_b
    assert (tmp_path / "slow" / "executions.log").read_text().split() == ["1"]
    assert session.store.claim_holder(trial) is None  # released with its holder
    # the other run's collect sees the trial that run A finished
    records = {r["label"]: r["state"] for r in session.store.records(run_b.trials)}
    assert records == {"x=1": "succeeded", "x=2": "waiting"}


def test_a_killed_runner_frees_the_claim_and_the_trial_runs_again(tmp_path):
    session = SweepSession(slow_spec(tmp_path, seconds=30))
    manifest = session.prepare(run="a")
    trial = manifest.pending[0]
    proc = runner(manifest, trial)
    deadline = time.monotonic() + 30
    # kill it once the trial runs (the claim is taken first, the state written after it: wait for both)
    while (
        not (session.store.claim_holder(trial) is not None and session.store.state(trial) == "running")
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    # the kernel frees the claim once no process has its file open: the runner, and a trial process it was
    # forking at that moment, which holds the runner's descriptors until its exec closes them (on a busy host,
    # a while after the runner is reaped)
    deadline = time.monotonic() + 10
    while session.store.claim_holder(trial) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert session.store.claim_holder(trial) is None
    assert session.store.state(trial) == "running"  # what it left behind
    assert session.settle(None, "a") == 1  # the killed one; the one that never started keeps no record
    states = {r["label"]: (r["state"], r["error"]) for r in session.store.records(manifest.trials)}
    assert states["x=1"][0] == "failed" and "runner stopped" in states["x=1"][1]
    assert states["x=2"] == ("waiting", None)
    assert session.collect("a")["counts"]["not_started"] == 1  # in run a's counts: not started


def test_mark_unfinished_leaves_finished_trials_and_names_the_reason(tmp_path):
    session = SweepSession(slow_spec(tmp_path, seconds=0))
    manifest = session.prepare(run="r")
    done, never = manifest.pending
    assert runner(manifest, done).wait(timeout=60) == 0
    assert mark_unfinished(manifest, [never], "the trial's task failed: no GPU") == [
        f"trial {never.index} {never.label} marked failed: the trial's task failed: no GPU"
    ]
    assert session.store.state(never) == "failed"
    assert mark_unfinished(manifest, [done], "x") == []
    assert session.store.state(done) == "succeeded"


@pytest.mark.parametrize(
    "result, problem",
    [
        ({"y": 1.0}, ""),
        ({"eval": {"y": 2}}, ""),
        (None, "wrote no result.json"),
        ({"_unreadable": "result.json: Expecting value"}, "its result cannot be read"),
        ({"loss": 1}, "has no 'y' (its keys: loss)"),
        ({"y": float("nan")}, "y = nan is not a finite number"),
        ({"y": float("inf")}, "not a finite number"),
        ({"y": "high"}, "is not a number"),
        ({"y": True}, "is not a number"),
        ([1, 2], "not a JSON object"),
    ],
)
def test_result_problems_are_named(result, problem):
    objective = {"metric": "y" if not (isinstance(result, dict) and "eval" in result) else "eval.y", "mode": "maximize"}
    got = result_problem(result, objective)
    assert (problem in got) if problem else got == ""


def test_callable_returning_nan_is_invalid_and_recorded_when_asked(tmp_path):
    spec = SweepSpec(
        name="nan",
        test_config=[{"x": [1, 2]}],
        python_callable=_nan_for_two,
        objective=Objective("y"),
        results_root=str(tmp_path),
        on_invalid_result="record",
    )
    session = SweepSession(spec)
    manifest = session.prepare()
    import io

    from airflow_provider_gpusched.core.sweep.running.trial_run import run_trial

    codes = [run_trial(manifest, t, out=io.StringIO()) for t in manifest.pending]
    assert codes == [0, 0]  # recorded, not failed
    summary = session.collect()
    assert summary["counts"]["invalid"] == 1 and summary["best"]["label"] == "x=1"
    assert summary["problems"][0]["error"].startswith("invalid result:")


def _nan_for_two(params):
    return {"y": float("nan") if params["x"] == 2 else 1.0}


def test_labels_with_control_characters_cannot_break_a_table():
    table = format_table([("a\nb", 1.5), ("tab\there", 2)], ["label", "score"])
    lines = table.splitlines()
    assert len(lines) == 6 and "a\\nb" in table and "tab\\there" in table
    assert len({len(line) for line in lines}) == 1  # every row as wide as the frame


def test_spec_refuses_bad_policy_values(tmp_path):
    from airflow_provider_gpusched.core.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="on_invalid_result"):
        slow_spec(tmp_path, on_invalid_result="ignore")
    with pytest.raises(InvalidArgumentError, match="max_failed_trials"):
        slow_spec(tmp_path, max_failed_trials=-1)
    assert json.dumps(slow_spec(tmp_path).max_failed_trials) == "0"
