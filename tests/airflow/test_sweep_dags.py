"""Sweep task groups through dag.test() on SIMULATED GPUs (local backend) and the real Slurm test cluster."""

import json
import os

import pytest

from .conftest import REPO, dag_run_results, the_dag

pytestmark = pytest.mark.airflow


@pytest.fixture
def sweeps_root(tmp_path, monkeypatch):
    root = tmp_path / "sweeps"
    monkeypatch.setenv("AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT", str(root))
    return root


@pytest.fixture
def run(airflow_db, sweeps_root):
    def go(dag):
        dag_run = dag.test()
        xcoms, states = dag_run_results(dag_run)
        return dag_run.state, xcoms, states
    return go


def test_grid_sweep_example_runs_the_four_seed_trials_and_ranks_them(run, sweeps_root, capfd):
    state, xcoms, states = run(the_dag(REPO / "dags" / "sweep_grid.py"))
    assert state == "success", states
    trials = sorted(k for k in states if isinstance(k, tuple) and k[0] == "gan_grid.trial")
    assert len(trials) == 4 and all(states[k][0] == "success" for k in trials)
    best = xcoms["gan_grid.leaderboard"]["return_value"]
    assert best["label"] == "method=WGAN,num_packing=3,num_zmode=1" and best["score"] == pytest.approx(7.7)
    board = json.loads((sweeps_root / "gan_grid" / "leaderboard.json").read_text())["leaderboard"]
    assert [r["score"] for r in board] == pytest.approx([7.7, 7.5, 6.5, 6.2])
    summary = xcoms["gan_grid.collect"]["return_value"]
    assert summary["counts"]["succeeded"] == 4 and summary["counts"]["skipped"] == 0
    out = capfd.readouterr().out
    assert "inception_score (maximize)" in out
