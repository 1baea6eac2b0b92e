"""DAGs the UI API tests read back: a sweep, a Slurm array job and a local-GPU task in a DAG only some users may
read ("ui_private_*"), and a Slurm job in a DAG everyone may read."""

import sys

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources
from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator
from airflow_provider_gpusched.operators.slurm import SlurmJobOperator
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def score(params):
    if params["lr"] == 0.3:
        raise ValueError("diverged")
    return {"acc": round(1 - abs(params["lr"] - 0.01) - 0.01 * params["depth"], 6)}


with DAG("ui_private_mixed", schedule=None, start_date=START) as private:
    sweep_task_group(
        SweepSpec(
            name="ui_grid",
            test_config=[{"lr": [0.001, 0.01, 0.3], "depth": [2, 4]}],
            python_callable=score,
            objective=Objective("acc"),
            resources=TrialResources(gpu_memory="2GiB"),
        ),
        backend="local",
    )
    SlurmJobOperator(
        task_id="array",
        command=[sys.executable, "-c", "import os; print('array task', os.environ['SLURM_ARRAY_TASK_ID'], 'done')"],
        array="0-2",
        partition="batch",
        poll_interval=1,
    )
    LocalGPUOperator(
        task_id="gpu_work",
        command=[sys.executable, "-c", "print('on', __import__('os').environ['CUDA_VISIBLE_DEVICES'])"],
        gpus=1,
        job_class="idle",
    )

with DAG("ui_open_job", schedule=None, start_date=START) as public:
    SlurmJobOperator(
        task_id="job",
        command=["bash", "-c", "echo line one; echo 'line two; with a quote \"'; exit 3"],
        partition="batch",
        poll_interval=1,
        retries=0,
    )
