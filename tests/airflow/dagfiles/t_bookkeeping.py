"""A two-trial sweep whose bookkeeping tasks tests/airflow/test_bookkeeping_retries.py watches (the DAG id and results
root from GPUSCHED_TEST_DAG_ID and GPUSCHED_TEST_RESULTS)."""

import os

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.core.sweep import SweepSpec
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

with DAG(
    os.environ.get("GPUSCHED_TEST_DAG_ID", "t_bookkeeping"),
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
) as dag:
    sweep_task_group(
        SweepSpec(name="books", test_config=[{"x": [1, 2]}], command=["true", "{x}"]),
        results_root=os.environ.get("GPUSCHED_TEST_RESULTS"),
    )
