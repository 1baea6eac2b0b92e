"""What gpusched's tasks report to OpenLineage: a local-GPU task, one that fails, a Slurm job and a sweep's
trials (dag.test with the OpenLineage provider's file transport)."""

import sys

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources
from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator
from airflow_provider_gpusched.operators.slurm import SlurmJobOperator
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group


def score(params):
    return {"acc": round(1 - abs(params["lr"] - 0.01), 6)}


with DAG("lineage_mixed", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as lineage_mixed:
    sweep_task_group(
        SweepSpec(
            name="lineage_grid",
            test_config=[{"lr": [0.001, 0.01]}],
            python_callable=score,
            objective=Objective("acc"),
            resources=TrialResources(gpu_memory="2GiB"),
        ),
        backend="local",
    )
    SlurmJobOperator(
        task_id="slurm_job",
        command=[sys.executable, "-c", "print('hello from slurm')"],
        partition="batch",
        poll_interval=1,
        retries=0,
        deferrable=False,
    )
    LocalGPUOperator(
        task_id="gpu_ok",
        command=[sys.executable, "-c", "print('ok')"],
        gpus=1,
        gpu_memory="3GiB",
        job_class="idle",
        priority=7,
    )
    LocalGPUOperator(
        task_id="gpu_fails", command=[sys.executable, "-c", "import sys; sys.exit(3)"], gpus=1, retries=0, oom_retries=0
    )
