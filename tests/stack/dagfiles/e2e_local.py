"""End-to-end DAGs on local (simulated) GPUs, triggered by tests/stack through the REST API."""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import pendulum
from airflow.sdk import DAG

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_common import RECORDING_TRIAL

from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
OUT = {"E2E_OUT": "{{ params.out }}"}


def trial(name: str, seconds: str = "{{ params.seconds }}") -> list[str]:
    return ["python3", "-c", RECORDING_TRIAL, name, seconds]


with DAG("e2e_packing", schedule=None, start_date=START, catchup=False, params={"out": "", "seconds": 30}):
    # 16 trials of 6 GiB on 4 x 24 GiB: all of them fit at once, 4 to a GPU
    LocalGPUOperator.partial(task_id="trial", gpu_memory="6GiB", env=OUT, poll_interval=1).expand(
        command=[trial(f"pack{i:02d}") for i in range(16)]
    )

with DAG("e2e_idle_fillers", schedule=None, start_date=START, catchup=False, params={"out": "", "seconds": 20}):
    # 6 preemptible fillers, one whole GPU each, through the idle pool (4 slots: one per GPU)
    LocalGPUOperator.partial(task_id="filler", job_class="idle", gpus=1, env=OUT, poll_interval=1, retries=0).expand(
        command=[trial(f"filler{i}") for i in range(6)]
    )

with DAG("e2e_normal", schedule=None, start_date=START, catchup=False, params={"out": "", "seconds": 4}):
    LocalGPUOperator(task_id="train", gpus=4, env=OUT, poll_interval=1, command=trial("normal"))

with DAG("e2e_priority", schedule=None, start_date=START, catchup=False, params={"out": "", "seconds": 1}):
    # more work than slots (pool e2e_one_slot: 1 slot); priorities 0..50 map to priority_weight 100..150
    for p in (0, 30, 10, 50, 20, 40):
        LocalGPUOperator(
            task_id=f"p{p:02d}",
            gpus=1,
            priority=p,
            pool="e2e_one_slot",
            pool_slots=1,
            env=OUT,
            poll_interval=1,
            command=trial(f"prio{p:02d}"),
        )

with DAG("e2e_worker_kill", schedule=None, start_date=START, catchup=False, params={"out": "", "seconds": 40}):
    LocalGPUOperator(
        task_id="train",
        gpus=1,
        env=OUT,
        poll_interval=1,
        grace_period=3,
        retries=1,
        retry_delay=timedelta(seconds=1),
        command=trial("victim"),
    )

# defers while another process holds the GPUs (the test holds them itself, as another user's job would)
with DAG("e2e_gpu_waiter", schedule=None, start_date=START, catchup=False, params={"out": "", "seconds": 2}):
    LocalGPUOperator(task_id="wait_then_run", gpus=2, env=OUT, poll_interval=1, command=trial("waiter"))

with DAG("e2e_queue_stop", schedule=None, start_date=START, catchup=False, params={"out": "", "seconds": 120}):
    # 8 whole-GPU trials on 4 GPUs: 4 run, 4 wait (deferred) for GPUs; `gpusched queue stop --run` ends them all,
    # and no retry starts them again
    LocalGPUOperator.partial(
        task_id="trial", gpus=1, env=OUT, poll_interval=1, grace_period=3, retries=2, retry_delay=timedelta(seconds=1)
    ).expand(command=[trial(f"stop{i}") for i in range(8)])

# needs 3 GiB, asks for 2: the first attempt fails with a CUDA OOM, the retry reserves 1.5 x as much and succeeds
NEEDS_3GIB = (
    "import os, sys; have = float(os.environ['GPUSCHED_GPU_MEMORY_BYTES']) / 2**30; "
    "print(f'{have:.1f} GiB reserved'); "
    "sys.exit('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB') if have < 3 else None"
)
with DAG("e2e_oom_retry", schedule=None, start_date=START, catchup=False):
    LocalGPUOperator(
        task_id="train", gpu_memory="2GiB", poll_interval=1, retries=0, command=["python3", "-c", NEEDS_3GIB]
    )
