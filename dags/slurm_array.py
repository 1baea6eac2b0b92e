"""A Slurm job array: four seeds of one experiment, at most two at a time (drop-in example)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

with DAG(
    dag_id="gpusched_slurm_array",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["gpusched", "slurm", "example"],
    doc_md=__doc__,
) as dag:
    SlurmJobOperator(
        task_id="seeds",
        command='echo "seed $SLURM_ARRAY_TASK_ID on GPU $CUDA_VISIBLE_DEVICES"; sleep 1',
        array="0-3%2",
        gpus=1,
        time_limit=10,
        poll_interval=1,
    )
