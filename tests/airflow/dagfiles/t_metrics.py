"""DAGs whose tasks send gpusched's metrics: an attempt that runs out of GPU memory and is retried bigger, a sweep's
trials, and a deferred Slurm job (its shared poller counts the jobs per partition)."""

import sys

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources
from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator
from airflow_provider_gpusched.operators.slurm import SlurmJobOperator
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

OOM_ONCE = (
    "import os, sys\n"
    "if not os.path.exists('tried'):\n"
    "    open('tried', 'w').close()\n"
    "    print('RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB')\n"
    "    sys.exit(1)\n"
    "print('fits now')"
)


def score(params):
    return {"acc": params["lr"]}


with DAG("metrics_events", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as metrics_events:
    LocalGPUOperator(
        task_id="oom_once",
        command=[sys.executable, "-c", OOM_ONCE],
        gpus=1,
        gpu_memory="2GiB",
        oom_retries=1,
        retries=0,
    )
    sweep_task_group(
        SweepSpec(
            name="metric_grid",
            test_config=[{"lr": [0.1, 0.2]}],
            python_callable=score,
            objective=Objective("acc"),
            resources=TrialResources(gpu_memory="1GiB"),
        ),
        backend="local",
    )
    SlurmJobOperator(
        task_id="slurm_job", command=["sleep", "4"], partition="batch", poll_interval=1, retries=0, deferrable=True
    )
