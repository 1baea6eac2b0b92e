"""`gpusched sweep run --backend slurm` / run_sweep(backend="slurm"): a sweep from a terminal as Slurm job arrays
on the project's two-node cluster, in the same results folder and with the same leaderboard."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slurm

WRITE = (
    "import json, os, sys; x = float(sys.argv[1]);"
    " json.dump(dict(y=1 - (x - 2) ** 2, job=os.environ['SLURM_ARRAY_JOB_ID'], host=os.uname().nodename),"
    " open('result.json', 'w'))"
)


def test_run_sweep_on_slurm_runs_every_trial_as_array_tasks_and_a_rerun_skips_them(client, tmp_path):
    from airflow_provider_gpusched import Objective, SweepSpec, TrialResources, run_sweep

    spec = SweepSpec(
        name="on_slurm",
        test_config=[{"x": [0, 1, 2, 3, 4]}],
        command=[sys.executable, "-c", WRITE, "{x}"],
        objective=Objective("y", "maximize"),
        resources=TrialResources(gpus=0, cpus=1, time_limit=5),
        max_workers=3,
    )
    summary = run_sweep(
        spec, backend="slurm", slurm=client, results_root=str(tmp_path), progress=False, poll_interval=0.5
    )
    assert summary["counts"]["succeeded"] == 5 and summary["best"]["score"] == 1.0
    records = json.loads((tmp_path / "on_slurm" / "summary.json").read_text())["records"]
    assert len({r["result"]["job"] for r in records}) == 1  # one job array
    assert {r["result"]["host"] for r in records} <= {"n1", "n2"}
    again = run_sweep(spec, backend="slurm", slurm=client, results_root=str(tmp_path), progress=False)
    assert again["counts"]["skipped"] == 5


def test_gpusched_sweep_run_backend_slurm_from_a_terminal(slurm_cluster, tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": "cli_slurm",
                "test_config": [{"x": [1, 2]}],
                "objective": "maximize y",
                "command": [sys.executable, "-c", WRITE, "{x}"],
                "resources": {"gpus": 0, "cpus": 1, "time_limit": 5},
            }
        )
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_provider_gpusched.cli",
            "sweep",
            "run",
            str(spec),
            "--backend",
            "slurm",
            "--results-root",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SLURM_CONF": slurm_cluster},
    )
    assert out.returncode == 0, out.stderr
    assert "x=2" in out.stdout and "succeeded" in out.stdout
