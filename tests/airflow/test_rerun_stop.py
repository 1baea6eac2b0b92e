"""Issue 52, as the new user met it, through real DAG runs (dag.test on SQLite, simulated GPUs) and the real
`gpusched queue stop`: run a sweep (3 succeeded, 2 pruned), re-run it with force_rerun and stop it while its first
trial runs, then run it plainly. Every trial record, the run's counts, the Sweeps API's answer for each run and the
sweep's leaderboard and best are checked; nothing the first run established may be lost or rewritten. Before the
fix the stopped re-run rewrote the pruned trials to failed, kept the succeeded ones as its own successes, and the
next plain run ran the pruned ones again."""

import json
import os
import uuid
from pathlib import Path

import pytest

from .conftest import REPO, load_dag_file, run_and_collect
from .test_queue import StopWhenRunning, gpusched

pytestmark = pytest.mark.airflow

DAGFILE = REPO / "tests" / "airflow" / "dagfiles" / "t_rerun_stop.py"


def sweeps_api(run_id):
    from airflow.utils.session import create_session

    from airflow_provider_gpusched.plugins.api.sweeps import sweeps

    with create_session() as session:
        return sweeps("t_rerun_stop", run_id, session)


def records(folder):
    out = {}
    for name in sorted(os.listdir(os.path.join(folder, "trials"))):
        trial = os.path.join(folder, "trials", name)
        out[name] = {
            f: Path(os.path.join(trial, f)).read_bytes() for f in sorted(os.listdir(trial)) if f != "claim.lock"
        }
    return out


def test_run_force_rerun_stop_and_plain_rerun(airflow_db, monkeypatch, tmp_path):
    sweep = f"rr{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("GPUSCHED_TEST_SWEEP", sweep)
    monkeypatch.setenv("GPUSCHED_TEST_LOG_DIR", str(tmp_path))
    dag = load_dag_file(DAGFILE).dag
    executions = tmp_path / "executions.log"

    state, xcoms, _ = run_and_collect(dag)
    summary = xcoms[f"{sweep}.collect"]["return_value"]
    done = (summary["counts"]["succeeded"], summary["counts"]["pruned"])
    assert done == (3, 2), summary["counts"]
    folder = summary["folder"]
    first = records(folder)
    best = json.loads(Path(os.path.join(folder, "best.json")).read_text())
    board = json.loads(Path(os.path.join(folder, "leaderboard.json")).read_text())["leaderboard"]
    assert best["score"] == 0.1 and len(board) == done[0]
    run1 = sweeps_api(None)["run_id"]
    executions.unlink()

    # the forced re-run, stopped while its first trial runs
    monkeypatch.setenv("GPUSCHED_TEST_SLOW", "1")
    stopper = StopWhenRunning(sweep, {"running"}, ["--no-slurm"])
    stopper.start()
    state, xcoms, states = run_and_collect(dag, run_conf={"force_rerun": True})
    stopper.join(5)
    monkeypatch.delenv("GPUSCHED_TEST_SLOW")
    assert stopper.stop is not None and stopper.stop.returncode == 0, stopper.stop and stopper.stop.stderr
    started = executions.read_text().split()
    assert len(started) == 1, started  # only the first trial started
    executions.unlink()
    assert state == "failed"

    # every record is the first run's; the one trial the re-run started carries a note of its stop
    second = records(folder)
    assert second.keys() == first.keys()
    noted = []
    for name, files in second.items():
        status = json.loads(files["status.json"])
        if "interrupted" in status:
            noted.append(name)
            interrupted = status.pop("interrupted")
            assert interrupted["state"] == "stopped" and "gpusched queue stop" in interrupted["reason"]
            assert status == json.loads(first[name]["status.json"])
            files = {k: v for k, v in files.items() if k not in ("status.json", "reports.interrupted.jsonl")}
            assert files == {k: v for k, v in first[name].items() if k != "status.json"}, name
        else:
            assert files == first[name], name  # byte for byte
    assert noted == started  # the one trial the re-run started: its folder
    assert json.loads(Path(os.path.join(folder, "best.json")).read_text()) == best
    now = json.loads(Path(os.path.join(folder, "leaderboard.json")).read_text())["leaderboard"]
    assert [(r["trial_id"], r["score"], r["rank"]) for r in now] == [
        (r["trial_id"], r["score"], r["rank"]) for r in board
    ]

    # run 2's Sweeps tab: one stopped, four not started, no success and no best of its own, none from earlier
    api = sweeps_api(None)
    run2 = api["run_id"]
    assert run2 != run1 and api["problems"] == []
    (view,) = api["sweeps"]
    counts = view["counts"]
    assert (
        counts["stopped"],
        counts["not_started"],
        counts["succeeded"],
        counts["pruned"],
        counts["failed"],
        counts["skipped"],
    ) == (1, 4, 0, 0, 0, 0), counts
    assert view["best"] is None and view["leaderboard"] == [] and view["problems"] == []
    # run 1's tab is as it was
    (view1,) = sweeps_api(run1)["sweeps"]
    assert (view1["counts"]["succeeded"], view1["counts"]["pruned"]) == done and view1["best"]["score"] == 0.1

    # the next plain run runs nothing again: succeeded and pruned trials alike stand
    assert gpusched("lift", "--sweep", sweep).returncode == 0
    state, xcoms, _ = run_and_collect(dag)
    assert state == "success" and not executions.exists()
    (view3,) = sweeps_api(None)["sweeps"]
    assert view3["counts"]["skipped"] == 5 and view3["best"]["score"] == 0.1
    assert (view3["counts"]["succeeded"], view3["counts"]["pruned"]) == done
    assert records(folder) == second
