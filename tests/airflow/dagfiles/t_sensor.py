import os

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.sensors.slurm import SlurmJobSensor

with DAG(dag_id="t_sensor", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    ok = os.environ.get("GPUSCHED_TEST_OK_JOB", "0")
    SlurmJobSensor(task_id="deferred_ok", job_id=ok, poll_interval=0.5)
    SlurmJobSensor(task_id="poke_ok", job_id=ok, deferrable=False, poll_interval=0.5)
    SlurmJobSensor(task_id="deferred_bad", job_id=os.environ.get("GPUSCHED_TEST_BAD_JOB", "0"), poll_interval=0.5)
