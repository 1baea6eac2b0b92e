"""Sweeps that `gpusched queue stop` stops in the middle (tests/airflow/test_queue.py): each trial runs a
minute unless stopped."""

import os
import sys

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

START = pendulum.datetime(2026, 1, 1, tz="UTC")
NAME = os.environ.get("GPUSCHED_TEST_SWEEP", "queue_stop")
LONG = "import sys, time; print('trial', sys.argv[1], 'training', flush=True); time.sleep(60)"

with DAG("t_queue_local", schedule=None, start_date=START) as local:
    sweep_task_group(
        SweepSpec(
            name=NAME + "_local",
            test_config=[{"x": [1, 2, 3]}],
            command=[sys.executable, "-c", LONG, "{x}"],
            objective=Objective("y"),
            resources=TrialResources(gpu_memory="4GiB"),
        ),
        backend="local",
        trial_kwargs={"grace_period": 5},
    )

with DAG("t_queue_slurm", schedule=None, start_date=START) as slurm:
    sweep_task_group(
        SweepSpec(
            name=NAME + "_slurm",
            test_config=[{"x": [1, 2]}],
            command=[sys.executable, "-c", LONG, "{x}"],
            objective=Objective("y"),
            resources=TrialResources(gpus=0, cpus=1, partition="batch"),
        ),
        backend="slurm",
        poll_interval=1,
    )

with DAG("t_queue_batched", schedule=None, start_date=START) as batched:
    # one runner task, 2 leases at a time, each running its trials one after another
    sweep_task_group(
        SweepSpec(
            name=NAME + "_batched",
            test_config=[{"x": [1, 2, 3, 4, 5, 6]}],
            command=[sys.executable, "-c", LONG, "{x}"],
            objective=Objective("y"),
            resources=TrialResources(gpu_memory="4GiB"),
        ),
        backend="local",
        batching="batched",
        chunk_size=6,
        parallel=2,
        trials_per_process=1,
    )
