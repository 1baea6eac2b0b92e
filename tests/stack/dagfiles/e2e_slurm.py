"""End-to-end: many deferred Slurm tasks at once (one triggerer, one shared squeue per poll).

100 tasks: the poll's cost does not grow with their number (one squeue for all), which 100 show as well as 200 at
half the task processes; bench/slurm_tracking.py measures the poller at 200 jobs (docs/benchmarks.md)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

with DAG(
    "e2e_slurm_many",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"count": 100},
):
    SlurmJobOperator.partial(task_id="job", poll_interval=2, retries=0, deferrable=True).expand(
        command=[["sh", "-c", f"echo job {i}; sleep 1"] for i in range(100)]
    )


# a job that writes a line a second: its lines reach the task log while it runs (the triggerer follows the file)
with DAG("e2e_slurm_live_output", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    SlurmJobOperator(
        task_id="job",
        poll_interval=1,
        retries=0,
        deferrable=True,
        command=[
            "python3",
            "-u",
            "-c",
            "import time\nfor i in range(25):\n    print('live line', i)\n    time.sleep(1)",
        ],
    )
