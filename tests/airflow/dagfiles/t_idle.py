import os

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

with DAG(dag_id="t_idle", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    SlurmJobOperator(task_id="fill", command="echo run; sleep 5", job_name=os.environ.get("GPUSCHED_TEST_JOB_NAME", "x"),
                     job_class="idle", gpus=4, poll_interval=0.5)
