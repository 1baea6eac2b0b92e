"""MLflow, against a real ``mlflow server`` read back with MLflow's own client (issue 76): the run of an attempt its
trial started again (preempted, reclaimed) ends KILLED instead of staying RUNNING; a run sent after an outage, or
first by another task, carries the same ``airflow.*`` tags as one sent live; a connection's bad URL names it."""

import socket

import pytest

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.tracking import TrackingSync, parse_tracking
from tests.tracking_helpers import FakeSweep

AIRFLOW_TAGS = ("airflow.dag_id", "airflow.run_id", "airflow.task_id", "airflow.map_index", "airflow.try_number")


def sync(sweep, url, retry_after=60.0, **kwargs):
    (config,) = parse_tracking([{"kind": "mlflow", "tracking_uri": url}])
    callbacks = [config.build(sweep.store.dir)]
    outcome = TrackingSync(sweep.sweep_run(), callbacks, log=lambda line: None, retry_after=retry_after).sync(**kwargs)
    return outcome.callbacks["mlflow"]


def children(runs):
    return [r for r in runs.values() if "mlflow.parentRunId" in r["tags"]]


def dead_url():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def task(n):
    return {"dag_id": "dag-1", "run_id": "run-1", "task_id": "trk.trial", "map_index": n, "try_number": 2}


def test_the_run_of_an_attempt_its_trial_started_again_ends_killed(tmp_path, mlflow_server):
    """The reclaimed attempt's run was RUNNING for good: it now ends KILLED (gpusched.state stopped, saying why)
    at the next sync, and the trial's next attempt is a run of its own that finishes."""
    sweep = FakeSweep(tmp_path, name="mlf_reclaimed", lrs=(0.1,))
    sweep.start(0)
    sweep.report(0, 0, loss=1.0)
    assert sync(sweep, mlflow_server.url).error is None  # the worker's live send: the attempt's run is RUNNING
    (live,) = children(mlflow_server.read("mlf_reclaimed"))
    assert live["status"] == "RUNNING"
    first = sweep.store.status(sweep.trials[0])["started"]
    while sweep.store.status(sweep.trials[0])["started"] == first:  # reclaimed; the trial's next attempt starts
        sweep.start(0)
    sweep.report(0, 0, loss=0.8)
    sweep.finish(0, result={"acc": 0.9})
    assert sync(sweep, mlflow_server.url, final=True, summary=sweep.summary()).error is None
    runs = {r["status"]: r for r in children(mlflow_server.read("mlf_reclaimed"))}
    assert sorted(runs) == ["FINISHED", "KILLED"]
    killed, finished = runs["KILLED"], runs["FINISHED"]
    assert killed["tags"]["gpusched.state"] == "stopped"
    assert "ended without an outcome: the trial started again" in killed["tags"]["gpusched.error"]
    assert killed["metrics"]["loss"] == [(0, 1.0)] and killed["artifacts"] == []
    assert finished["tags"]["gpusched.state"] == "succeeded" and finished["metrics"]["loss"][0] == (0, 0.8)


def test_runs_sent_after_an_outage_or_by_the_collect_carry_the_airflow_tags(tmp_path, mlflow_server):
    """Trial 0's task synced while MLflow was down (it failed), trial 1's right after (skipped: tried once a
    minute); trial 2 was first sent running by a round's tell (no task known), then its task ended. The sweep's
    collect sends the rest: every child run has the airflow.* tags a live one has."""
    sweep = FakeSweep(tmp_path, name="mlf_late")
    folders = [t.folder for t in sweep.trials]
    for i in (0, 1):
        sweep.start(i)
        sweep.report(i, 0, loss=1.0)
        sweep.finish(i, result={"acc": 0.5})
    down = dead_url()
    assert "unreachable" in sync(sweep, down, folders=[folders[0]], tasks={folders[0]: task(0)}).error
    assert "failing since" in sync(sweep, down, folders=[folders[1]], tasks={folders[1]: task(1)}).skipped
    sweep.start(2)
    told = sync(sweep, mlflow_server.url, retry_after=0, folders=[folders[2]])  # (a minute later: it works again)
    assert told.error is None and told.told == 1
    sweep.finish(2, result={"acc": 0.7})
    told = sync(sweep, mlflow_server.url, retry_after=0, folders=[folders[2]], tasks={folders[2]: task(2)})
    assert told.error is None and told.told == 1
    assert sync(sweep, mlflow_server.url, final=True, summary=sweep.summary()).error is None
    runs = children(mlflow_server.read("mlf_late"))
    assert len(runs) == 3 and all(r["status"] == "FINISHED" for r in runs)
    tags = sorted((tuple(r["tags"].get(k) for k in AIRFLOW_TAGS) for r in runs), key=str)
    assert tags == [("dag-1", "run-1", "trk.trial", str(n), "2") for n in range(3)]


def test_a_connections_bad_url_is_named_with_the_connection(tmp_path):
    (config,) = parse_tracking(["mlflow"])
    with pytest.raises(
        GpuschedError,
        match=r"MLflow tracking URI \(the Airflow connection mlflow_lab\) 'htp://mlflow:5000': expected an MLflow "
        r"tracking server's URL.*did you mean http://mlflow:5000\?",
    ):
        config.build(
            str(tmp_path), {"tracking_uri": "htp://mlflow:5000", "uri_source": "the Airflow connection mlflow_lab"}
        )
