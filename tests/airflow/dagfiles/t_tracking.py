"""Sweeps that send their trials to MLflow (the connection mlflow_default) and TensorBoard: mapped and batched
asynchronous trials on (simulated) local GPUs, and mapped trials on the real Slurm test cluster."""

import sys

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources, uniform
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

START = pendulum.datetime(2026, 1, 1, tz="UTC")
TRACKING = ["mlflow", "tensorboard"]


def learn(params):
    from airflow_provider_gpusched.trial import report

    for step in range(3):
        report(step=step, loss=params["x"] + 1.0 / (step + 1))
    return {"y": round(1 - (params["x"] - 0.3) ** 2, 6)}


with DAG("t_track_mapped", schedule=None, start_date=START) as mapped:
    sweep_task_group(
        SweepSpec(
            name="trk_mapped",
            test_config=[{"x": [0.1, 0.3, 0.5]}],
            python_callable=learn,
            objective=Objective("y"),
            resources=TrialResources(gpu_memory="4GiB"),
            tracking=TRACKING,
        ),
        backend="local",
    )

with DAG("t_track_async", schedule=None, start_date=START) as asynchronous:
    sweep_task_group(
        SweepSpec(
            name="trk_async",
            search="optuna",
            asynchronous=True,
            count=4,
            max_workers=2,
            seed=3,
            space={"x": uniform(0, 1)},
            python_callable=learn,
            objective=Objective("y"),
            resources=TrialResources(gpu_memory="4GiB"),
            tracking=TRACKING,
        ),
        backend="local",
    )

REPORTING = (
    "import json, os, sys\n"
    "x = float(sys.argv[1])\n"
    "for step in range(3):\n"
    "    open(os.environ['GPUSCHED_REPORT_FILE'], 'a').write('step=%d loss=%s\\n' % (step, x + 1 / (step + 1)))\n"
    "print('trained on', os.environ.get('SLURMD_NODENAME'))\n"
    "json.dump(dict(y=1 - (x - 0.3) ** 2), open('result.json', 'w'))\n"
)

with DAG("t_track_slurm", schedule=None, start_date=START) as slurm:
    sweep_task_group(
        SweepSpec(
            name="trk_slurm",
            test_config=[{"x": [0.2, 0.4]}],
            command=[sys.executable, "-c", REPORTING, "{x}"],
            objective=Objective("y"),
            resources=TrialResources(gpus=1, cpus=1, partition="batch"),
            tracking=TRACKING,
        ),
        backend="slurm",
        poll_interval=1,
    )
