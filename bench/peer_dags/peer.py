"""DAGs for bench/peer_ray_tune.py: N one-second Python trials (Ray Tune's release-test workload: sleep one second,
report a score) on 16 SIMULATED GPUs, one trial per GPU. N comes from the stack's environment
(GPUSCHED_BENCH_TRIALS)."""

from __future__ import annotations

import os
import time

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, uniform
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

START = pendulum.datetime(2026, 1, 1, tz="UTC")
TRIALS = int(os.environ.get("GPUSCHED_BENCH_TRIALS", "1000"))
SLOTS = 16


def one_second(params: dict) -> dict:
    """Ray Tune's function trainable of its release test, as a gpusched trial: one second, one score."""
    time.sleep(1.0)
    return {"score": params["score"]}


def spec(name: str) -> SweepSpec:
    return SweepSpec(name=name, search="random", space={"score": uniform(0.0, 1.0)}, count=TRIALS, seed=1,
                     python_callable=one_second, objective=Objective("score", "maximize"))


with DAG("peer_batched", schedule=None, start_date=START, catchup=False):
    # 2 runner tasks, each keeping 8 leases busy: the 16 GPUs
    sweep_task_group(spec("peer_batched"), backend="local", batching="batched", chunk_size=max(1, TRIALS // 2),
                     parallel=SLOTS // 2, publish_asset=False)

with DAG("peer_mapped", schedule=None, start_date=START, catchup=False, max_active_tasks=64):
    # one task per trial, in a pool with one slot per GPU (a task starts when a GPU is free)
    sweep_task_group(spec("peer_mapped"), backend="local", batching="mapped", max_mapped_trials=1024,
                     poll_interval=0.5, trial_kwargs={"pool": "peer_gpus"}, publish_asset=False)
