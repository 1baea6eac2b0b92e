"""PipelinePartitionOperator with a missing input file: fails at once, naming the file (no retries)."""

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.operators.partition import PipelinePartitionOperator

with DAG("t_partition_bad", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    PipelinePartitionOperator(task_id="partition", retries=3, models_file="/nonexistent/models.yml")
