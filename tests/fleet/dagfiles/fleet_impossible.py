"""A request no host of the fleet can hold: refused when the file is parsed, naming the hosts' sizes."""

from __future__ import annotations

import datetime

from airflow.sdk import DAG

from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

with DAG("fleet_impossible", start_date=datetime.datetime(2026, 1, 1), schedule=None, catchup=False):
    LocalGPUOperator(task_id="five", gpus=5, command=["true"])
