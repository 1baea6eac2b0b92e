"""MLflow tracking against a real ``mlflow server`` (SQLite backend, artifacts served; tests/conftest.py), read back
with MLflow's own client: the sweep run as a parent run, each trial attempt a child run with its parameters, its
reports at their steps, its result, state and files, and tags back to Airflow; a server that is down or never
answers fails and slows nothing, and gets everything later."""

import socket
import threading
import time

import pytest

from airflow_provider_gpusched.core.tracking import TrackingSync, parse_tracking
from tests.cli import gpusched
from tests.tracking_helpers import FakeSweep


def send(sweep, url, **settings):
    (config,) = parse_tracking([{"kind": "mlflow", "tracking_uri": url, **settings}])
    callback = config.build(sweep.store.dir)
    said = []
    outcome = TrackingSync(sweep.sweep_run(), [callback], score=sweep.spec.objective.score, log=said.append).sync(
        final=True, summary=sweep.summary()
    )
    return outcome.callbacks["mlflow"], said


def by_parent(runs):
    parents = {k: v for k, v in runs.items() if "mlflow.parentRunId" not in v["tags"]}
    children = {}
    for run in runs.values():
        if "mlflow.parentRunId" in run["tags"]:
            children.setdefault(run["tags"]["mlflow.parentRunId"], []).append(run)
    return parents, children


def test_a_sweep_run_is_a_parent_run_and_each_trial_a_child_run(tmp_path, mlflow_server):
    sweep = FakeSweep(tmp_path, name="mlf_full")
    for i in range(3):
        sweep.start(i)
        for s in range(3):
            sweep.report(i, s, loss=1.0 / (s + 1), acc=0.5 + 0.1 * s)
    sweep.finish(0, result={"acc": 0.9, "eval": {"f1": 0.8}})
    sweep.finish(1, state="pruned", result={"acc": 0.6})
    sweep.finish(2, state="failed", output="Traceback: boom\n")
    outcome, said = send(sweep, mlflow_server.url)
    assert outcome.error is None and outcome.told == 3 * 5 + 1, said
    runs = mlflow_server.read("mlf_full")
    parents, children = by_parent(runs)
    ((parent_id, parent),) = parents.items()
    assert parent["name"] == "mlf_full run-1" and parent["status"] == "FINISHED"
    assert parent["tags"]["airflow.dag_id"] == "dag-1" and parent["tags"]["airflow.run_id"] == "run-1"
    assert parent["params"] == {"objective.metric": "acc", "objective.mode": "maximize"}
    assert parent["metrics"]["best_score"] == [(0, 0.9)] and parent["metrics"]["trials_succeeded"] == [(0, 1.0)]
    assert parent["artifacts"] == ["best.json", "leaderboard.json", "summary.json"]
    kids = {r["name"]: r for r in children[parent_id]}
    assert sorted(kids) == sorted(t.label for t in sweep.trials)
    labels = [t.label for t in sweep.trials]
    first, pruned, failed = kids[labels[0]], kids[labels[1]], kids[labels[2]]
    assert first["params"] == {"lr": str(sweep.trials[0].params["lr"]), "opt": "sgd"}
    assert first["metrics"]["loss"] == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    # the result at the last reported step, after the reports: MLflow's latest value of acc is the result's
    assert first["metrics"]["acc"] == [(0, 0.5), (1, 0.6), (2, pytest.approx(0.7)), (2, 0.9)]
    assert first["metrics"]["eval.f1"] == [(2, 0.8)] and first["metrics"]["score"] == [(2, 0.9)]
    assert first["tags"]["gpusched.state"] == "succeeded" and first["status"] == "FINISHED"
    assert first["tags"]["gpusched.trial_id"] == sweep.trials[0].trial_id
    assert first["artifacts"] == ["output.log", "result.json"]
    assert (pruned["status"], pruned["tags"]["gpusched.state"]) == ("FINISHED", "pruned")
    assert (failed["status"], failed["tags"]["gpusched.state"]) == ("FAILED", "failed")
    assert failed["artifacts"] == ["output.log"] and "score" not in failed["metrics"]


def test_a_server_that_is_down_or_never_answers_slows_nothing_and_gets_it_all_later(tmp_path, mlflow_server):
    sweep = FakeSweep(tmp_path, name="mlf_outage", lrs=(0.1, 0.2))
    sweep.run_all(steps=2)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    t0 = time.monotonic()
    outcome, said = send(sweep, dead)
    assert time.monotonic() - t0 < 2
    assert "unreachable" in outcome.error and len(said) == 1 and "Nothing is lost" in said[0]
    # a server that accepts and never answers: one request's timeout, then the rest waits
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    held = []
    threading.Thread(target=lambda: held.extend(silent.accept() for _ in range(2)), daemon=True).start()
    t0 = time.monotonic()
    outcome, said = send(sweep, f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=1)
    assert time.monotonic() - t0 < 4 and "timed out" in outcome.error
    silent.close()
    assert mlflow_server.read("mlf_outage") == {}
    outcome, said = send(sweep, mlflow_server.url)
    assert outcome.error is None and outcome.told == 2 * 4 + 1 and any("works again" in s for s in said)
    parents, children = by_parent(mlflow_server.read("mlf_outage"))
    (parent_id,) = parents
    assert len(children[parent_id]) == 2
    assert all(len(r["metrics"]["loss"]) == 2 for r in children[parent_id])


def test_gpusched_sweep_track_sends_a_sweep_that_ran_without_a_tracker(tmp_path, mlflow_server):
    first = FakeSweep(tmp_path, name="mlf_cli", lrs=(0.1,))
    first.run_all(steps=1)
    first.summary()
    second = FakeSweep(tmp_path, name="mlf_cli", lrs=(0.2,), run="run-2")
    second.run_all(steps=1)
    second.summary()
    env = {"MLFLOW_TRACKING_URI": mlflow_server.url}
    out = gpusched("sweep", "track", "mlf_cli", "--results-root", str(tmp_path), "--to", "mlflow", env=env)
    assert out.returncode == 0, out.stderr
    # run-1's end is not told: summary.json is the last collect's, run-2's (its parent run stays RUNNING)
    assert "run run-1: tracking: mlflow: 3 event(s) sent" in out.stdout
    assert "run run-2: tracking: mlflow: 4 event(s) sent" in out.stdout
    parents, children = by_parent(mlflow_server.read("mlf_cli"))
    assert sorted(p["name"] for p in parents.values()) == ["mlf_cli run-1", "mlf_cli run-2"]
    run2 = next(k for k, p in parents.items() if p["name"] == "mlf_cli run-2")
    assert parents[run2]["status"] == "FINISHED" and len(children[run2]) == 1
    again = gpusched("sweep", "track", "mlf_cli", "--results-root", str(tmp_path), "--to", "mlflow", env=env)
    assert "run run-2: tracking: mlflow: 0 event(s) sent" in again.stdout
    bad = gpusched("sweep", "track", "nope", "--results-root", str(tmp_path))
    assert bad.returncode == 2 and "not a sweep's folder (no trials/ in it)" in bad.stderr
