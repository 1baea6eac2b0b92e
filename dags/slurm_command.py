"""A command and a shell script as Slurm jobs, one after the other (drop-in example).

Runs on any Slurm cluster the ``slurm_default`` connection reaches (or the local Slurm CLI). The
argv form passes every argument verbatim; the script form is a shell script on purpose.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

with DAG(
    dag_id="gpusched_slurm_command",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["gpusched", "slurm", "example"],
    doc_md=__doc__,
) as dag:
    train = SlurmJobOperator(
        task_id="train",
        command=[
            "python3",
            "-c",
            "import os, sys; print('args', sys.argv[1:]); print('GPUs', os.environ.get('CUDA_VISIBLE_DEVICES'))",
            "--lr",
            "3e-4",
            "--note",
            "a b; c",
        ],
        gpus=2,
        cpus=2,
        mem="2G",
        time_limit="00:10:00",
        env={"EXPERIMENT": "{{ dag_run.run_id }}"},
        poll_interval=1,
    )
    report = SlurmJobOperator(
        task_id="report",
        script="""
echo "job $SLURM_JOB_ID on $(hostname) in partition $SLURM_JOB_PARTITION"
echo "train output was {{ ti.xcom_pull(task_ids='train')['output_path'] }}"
""",
        time_limit=5,
        poll_interval=1,
    )
    train >> report
