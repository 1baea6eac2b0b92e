"""A blocking-mode Slurm task whose job runs for minutes (for the kill tests). JOB_NAME comes from the env;
GPUSCHED_TEST_NODES=2 makes it a distributed job over two nodes (srun, one rank per GPU) whose processes carry
GPUSCHED_TEST_TOKEN."""

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

with DAG(dag_id="test_blocking_long_job", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    SlurmJobOperator(
        task_id="long",
        command="sleep 300",
        job_name=os.environ.get("GPUSCHED_TEST_JOB_NAME", "long"),
        deferrable=False,
        poll_interval=0.5,
        execution_timeout=timedelta(seconds=float(os.environ.get("GPUSCHED_TEST_TIMEOUT", "600"))),
        **(
            {
                "nodes": int(os.environ["GPUSCHED_TEST_NODES"]),
                "gpus_per_node": 2,
                "distributed": "srun",
                "env": {"GPUSCHED_TEST_TOKEN": os.environ.get("GPUSCHED_TEST_TOKEN", "")},
            }
            if os.environ.get("GPUSCHED_TEST_NODES")
            else {}
        ),
    )
