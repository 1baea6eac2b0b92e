"""DAGs for bench/peer_ray_tune.py: N one-second Python trials (Ray Tune's release-test workload: sleep one second,
report a score) on 16 SIMULATED GPUs, one trial per GPU. N comes from the stack's environment
(GPUSCHED_BENCH_TRIALS)."""

from __future__ import annotations

import os
import time

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources, uniform
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

START = pendulum.datetime(2026, 1, 1, tz="UTC")
TRIALS = int(os.environ.get("GPUSCHED_BENCH_TRIALS", "1000"))
SLOTS = 16


def one_second(params: dict) -> dict:
    """Ray Tune's function trainable of its release test, as a gpusched trial: one second, one score."""
    time.sleep(1.0)
    return {"score": params["score"]}


def spec(name: str) -> SweepSpec:
    return SweepSpec(
        name=name,
        search="random",
        space={"score": uniform(0.0, 1.0)},
        count=TRIALS,
        seed=1,
        python_callable=one_second,
        objective=Objective("score", "maximize"),
    )


with DAG("peer_batched", schedule=None, start_date=START, catchup=False):
    # 2 runner tasks, each keeping 8 leases busy: the 16 GPUs
    sweep_task_group(
        spec("peer_batched"),
        backend="local",
        batching="batched",
        chunk_size=max(1, TRIALS // 2),
        parallel=SLOTS // 2,
        publish_asset=False,
    )

with DAG("peer_mapped", schedule=None, start_date=START, catchup=False, max_active_tasks=64):
    # one task per trial, in a pool with one slot per GPU (a task starts when a GPU is free)
    sweep_task_group(
        spec("peer_mapped"),
        backend="local",
        batching="mapped",
        max_mapped_trials=1024,
        poll_interval=0.5,
        trial_kwargs={"pool": "peer_gpus"},
        publish_asset=False,
    )


def slurm_spec(name: str) -> SweepSpec:
    """The same trials on the Slurm test cluster: one CPU each, no GPU (2 nodes x 8 CPUs = the 16 slots)."""
    return SweepSpec(
        name=name,
        search="random",
        space={"score": uniform(0.0, 1.0)},
        count=TRIALS,
        seed=1,
        python_callable=one_second,
        objective=Objective("score", "maximize"),
        resources=TrialResources(gpus=0, cpus=1, mem="200M"),
    )


with DAG("peer_slurm", schedule=None, start_date=START, catchup=False):
    # job arrays of up to 1,000 trials (Slurm's default MaxArraySize is 1,001), every chunk submitted at once
    sweep_task_group(
        slurm_spec("peer_slurm"),
        backend="slurm",
        batching="batched",
        chunk_size=min(1000, max(1, TRIALS // 2)),
        publish_asset=False,
    )

with DAG("peer_canary", schedule=None, start_date=START, catchup=False):
    # a one-task DAG the benchmark triggers every few seconds during the Slurm sweep: how long the scheduler
    # takes to start an unrelated task while the sweep's arrays are tracked
    from airflow.sdk import task

    @task
    def canary() -> None:
        return None

    canary()
