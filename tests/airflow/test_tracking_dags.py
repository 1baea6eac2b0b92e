"""Sweeps that track to a real MLflow server (the connection mlflow_default) and TensorBoard, through dag.test():
mapped local trials, an asynchronous search's workers, and mapped trials on the real Slurm test cluster (the
compute node never talks to MLflow: the trial's task sends from the results folder when the job ends)."""

import json
from pathlib import Path

import pytest

from .conftest import REPO, run_and_collect

pytestmark = pytest.mark.airflow

DAGS = REPO / "tests" / "airflow" / "dagfiles" / "t_tracking.py"


@pytest.fixture
def tracking_env(airflow_db, mlflow_server, tmp_path, monkeypatch):
    root = tmp_path / "sweeps"
    monkeypatch.setenv("AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT", str(root))
    host, port = mlflow_server.url.rsplit(":", 1)
    conn = {"conn_type": "http", "host": host.split("//")[1], "port": int(port)}
    monkeypatch.setenv("AIRFLOW_CONN_MLFLOW_DEFAULT", json.dumps(conn))
    return root


def dag_named(dag_id):
    from .conftest import load_dag_file

    module = load_dag_file(DAGS)
    return next(v for v in vars(module).values() if getattr(v, "dag_id", None) == dag_id)


def check_tracked(mlflow_server, root: Path, sweep: str, dag_id: str, trials: int, trial_task: str | None):
    runs = mlflow_server.read(sweep)
    parents = [r for r in runs.values() if "mlflow.parentRunId" not in r["tags"]]
    assert len(parents) == 1, parents
    (parent,) = parents
    assert parent["status"] == "FINISHED" and parent["tags"]["airflow.dag_id"] == dag_id
    assert parent["metrics"]["trials_succeeded"] == [(0, float(trials))]
    assert "best_score" in parent["metrics"] and parent["artifacts"] == [
        "best.json",
        "leaderboard.json",
        "summary.json",
    ]
    children = [r for r in runs.values() if r["tags"].get("mlflow.parentRunId")]
    assert len(children) == trials
    for child in children:
        assert child["status"] == "FINISHED" and child["tags"]["gpusched.state"] == "succeeded"
        assert [s for s, _ in child["metrics"]["loss"]] == [0, 1, 2]
        assert child["tags"]["airflow.run_id"] == parent["tags"]["airflow.run_id"]
        if trial_task is not None:  # told by the trial's own task: the task instance it ran in
            assert child["tags"]["airflow.task_id"] == trial_task
        assert "output.log" in child["artifacts"]
    tb = root / sweep / "tensorboard"
    (run_dir,) = tb.iterdir()
    assert len([p for p in run_dir.iterdir() if p.is_dir()]) == trials
    return children


def test_mapped_local_trials_are_tracked_by_their_tasks(tracking_env, mlflow_server):
    state, _xcoms, states = run_and_collect(dag_named("t_track_mapped"))
    assert state == "success", states
    children = check_tracked(mlflow_server, tracking_env, "trk_mapped", "t_track_mapped", 3, "trk_mapped.trial")
    assert sorted(c["tags"]["airflow.map_index"] for c in children) == ["0", "1", "2"]
    assert sorted(c["params"]["x"] for c in children) == ["0.1", "0.3", "0.5"]


def test_an_asynchronous_searchs_workers_track_each_trial(tracking_env, mlflow_server):
    state, _xcoms, states = run_and_collect(dag_named("t_track_async"))
    assert state == "success", states
    check_tracked(mlflow_server, tracking_env, "trk_async", "t_track_async", 4, None)


def test_slurm_trials_are_tracked_from_the_results_folder(tracking_env, mlflow_server, slurm_cluster):
    state, _xcoms, states = run_and_collect(dag_named("t_track_slurm"))
    assert state == "success", states
    children = check_tracked(mlflow_server, tracking_env, "trk_slurm", "t_track_slurm", 2, "trk_slurm.trial")
    assert all(c["tags"].get("gpusched.slurm_job") for c in children)


@pytest.mark.parametrize(
    ("conn", "expected"),
    [
        ({"host": "mlflow.lab"}, {"tracking_uri": "http://mlflow.lab:5000", "username": None, "password": None}),
        ({"host": "mlflow.lab", "port": 8080, "schema": "https"}, {"tracking_uri": "https://mlflow.lab:8080"}),
        ({"host": "https://mlflow.lab/prefix/"}, {"tracking_uri": "https://mlflow.lab/prefix"}),
        ({"host": "mlflow.lab", "login": "ann", "password": "s3"}, {"username": "ann", "password": "s3"}),
        ({"host": "mlflow.lab", "password": "tok", "extra": {"auth": "bearer"}}, {"token": "tok"}),
    ],
)
def test_the_mlflow_connection_gives_the_server_and_its_credentials(airflow_db, monkeypatch, conn, expected):
    from airflow_provider_gpusched.tracking import mlflow_connection

    monkeypatch.setenv("AIRFLOW_CONN_MLFLOW_LAB", json.dumps({"conn_type": "http", **conn}))
    found = mlflow_connection("mlflow_lab")
    assert {k: found.get(k) for k in expected} == expected
    assert mlflow_connection("no_such_connection") == {}
