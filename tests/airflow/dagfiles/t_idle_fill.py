"""Idle filling test DAGs: an idle-class task and a normal task that takes its GPUs (local and Slurm)."""

import os
import sys

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator
from airflow_provider_gpusched.operators.slurm import SlurmJobOperator, SlurmPythonOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")

#: tests/checkpointing_trainer.py (the DAG file is copied into the test DAGs folder)
TRAINER = os.environ.get("GPUSCHED_TEST_TRAINER", "checkpointing_trainer.py")

with DAG(dag_id="t_local_idle", schedule=None, start_date=START) as local_idle:
    LocalGPUOperator(
        task_id="fill",
        job_class="idle",
        gpus=4,
        poll_interval=0.3,
        # up to 120 s until preempted (the normal task's process needs ~10 s to start), then 15 s
        command=[sys.executable, TRAINER, "150", "1200"],
    )

with DAG(dag_id="t_local_normal", schedule=None, start_date=START) as local_normal:
    LocalGPUOperator(task_id="urgent", gpus=4, poll_interval=0.3, command=["sleep", "1"])

NAME = os.environ.get("GPUSCHED_TEST_JOB_NAME", "idle-fill")

with DAG(dag_id="t_slurm_idle", schedule=None, start_date=START) as slurm_idle:
    # every GPU of the two-node cluster, so that the normal job (4 GPUs on one node) must preempt it
    SlurmJobOperator(
        task_id="fill",
        job_name=NAME,
        job_class="idle",
        nodes=2,
        gpus_per_node=4,
        poll_interval=0.5,
        # long the first time (it gets preempted), short once requeued
        command='echo run; if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then sleep 120; else sleep 1; fi',
    )

with DAG(dag_id="t_slurm_normal", schedule=None, start_date=START) as slurm_normal:
    SlurmJobOperator(task_id="urgent", job_name=NAME + "-normal", gpus=4, poll_interval=0.5, command="sleep 1")


def until_requeued(marker: str) -> dict:
    """Its first start turns SIGTERM into SystemExit (as checkpointing training code does: an error record is
    left behind) and waits to be requeued; the second start returns."""
    import os
    import signal
    import sys
    import time

    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    if restarts == 0:
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
        open(marker, "w").close()  # the test requeues the job now
        time.sleep(120)
    return {"restarts": restarts}


with DAG(dag_id="t_slurm_requeue_python", schedule=None, start_date=START) as slurm_requeue_python:
    SlurmPythonOperator(
        task_id="call",
        job_name=NAME,
        requeue=True,
        poll_interval=0.5,
        python_callable=until_requeued,
        op_kwargs={"marker": os.environ.get("GPUSCHED_TEST_MARKER", "/nonexistent")},
    )
