"""A Slurm task whose worker gets SIGKILLed (by the test) while its job runs; a later DAG run must find the
orphaned job: re-attach when it does the same work, cancel it otherwise."""

import os

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

with DAG(
    dag_id="t_orphan", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), max_active_runs=2
) as dag:
    SlurmJobOperator(
        task_id="job",
        command=os.environ.get("GPUSCHED_TEST_ORPHAN_CMD", "sleep 12; echo done"),
        job_name=os.environ.get("GPUSCHED_TEST_JOB_NAME", "orphan"),
        poll_interval=0.5,
    )
