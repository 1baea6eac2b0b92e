"""Sweeps of each kind on (simulated) local GPUs, for the GPU board's totals against the host's ledger
(tests/airflow/test_board_ledger.py): an asynchronous search's workers, a batched stage's runners, mapped trials; and
an asynchronous sweep whose trial holds its worker's lease until the test lets it go."""

import os
import time

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources, uniform
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def learn(params):
    from airflow_provider_gpusched.trial import report

    for step in range(3):
        report(step=step, y=params["x"] * (step + 1))
    return {"y": round(1 - (params["x"] - 0.3) ** 2, 6)}


def learn_until_released(params):
    """Reports two steps, then waits for the test's release file (BOARD_RELEASE; at most 200 s)."""
    from airflow_provider_gpusched.trial import report

    report(step=0, y=0.1)
    report(step=1, y=0.2)
    deadline = time.monotonic() + 200
    while not os.path.exists(os.environ["BOARD_RELEASE"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return {"y": params["x"]}


def spec(name, **kw):
    return SweepSpec(
        name=name,
        space={"x": uniform(0, 1)},
        seed=3,
        objective=Objective("y"),
        resources=TrialResources(gpu_memory="6GiB"),
        **{"python_callable": learn, **kw},
    )


with DAG("board_async", schedule=None, start_date=START) as asynchronous:
    sweep_task_group(spec("board_async", search="optuna", asynchronous=True, count=4, max_workers=2), backend="local")

with DAG("board_batched", schedule=None, start_date=START) as batched:
    sweep_task_group(spec("board_batched", search="random", count=6), backend="local", batching="batched", chunk_size=3)

with DAG("board_mapped", schedule=None, start_date=START) as mapped:
    sweep_task_group(spec("board_mapped", search="random", count=3), backend="local", batching="mapped")

with DAG("board_hold", schedule=None, start_date=START) as hold:
    sweep_task_group(
        spec(
            "board_hold",
            search="optuna",
            asynchronous=True,
            count=1,
            max_workers=1,
            python_callable=learn_until_released,
        ),
        backend="local",
    )
