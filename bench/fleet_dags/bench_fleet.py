"""bench/fleet_makespan.py's DAG: N one-GPU trials of S seconds (from the run's conf), no queue, no host named."""

from __future__ import annotations

import datetime

from airflow.sdk import DAG

from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

with DAG(
    "bench_fleet",
    start_date=datetime.datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    is_paused_upon_creation=False,
    max_active_tasks=1024,
):
    LocalGPUOperator.partial(task_id="trial", gpus=1, poll_interval=1).expand(
        command=[["sleep", "{{ dag_run.conf.get('seconds', 1) }}"] for _ in range(192)]
    )

# mixed sizes: what placement by GPU count is worth (a 4-GPU task offered to a host with 1 free GPU must move on)
MIXED = [1] * 24 + [2] * 12 + [4] * 6

with DAG(
    "bench_fleet_mixed",
    start_date=datetime.datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    is_paused_upon_creation=False,
    max_active_tasks=1024,
):
    for size in (1, 2, 4):
        LocalGPUOperator.partial(task_id=f"trial_{size}gpu", gpus=size, poll_interval=1).expand(
            command=[["sleep", "{{ dag_run.conf.get('seconds', 2) }}"] for n in MIXED if n == size]
        )
