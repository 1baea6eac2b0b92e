"""bench/fleet_makespan.py's DAG: N one-GPU trials of S seconds (from the run's conf), no queue, no host named."""

from __future__ import annotations

import datetime

from airflow.sdk import DAG

from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

with DAG("bench_fleet", start_date=datetime.datetime(2026, 1, 1), schedule=None, catchup=False,
         is_paused_upon_creation=False, max_active_tasks=1024):
    LocalGPUOperator.partial(task_id="trial", gpus=1, poll_interval=1).expand(
        command=[["sleep", "{{ dag_run.conf.get('seconds', 1) }}"] for _ in range(192)])
