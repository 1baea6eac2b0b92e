"""One sweep name in two DAGs (the second is refused), and a sweep re-run with {"force_rerun": true} in its conf."""

import os

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

START = pendulum.datetime(2026, 1, 1, tz="UTC")
NAME = os.environ.get("GPUSCHED_TEST_SWEEP", "owned")


def score(params):
    return {"y": params["x"]}


def owned_sweep():
    return sweep_task_group(
        SweepSpec(
            name=NAME,
            test_config=[{"x": [1, 2]}],
            python_callable=score,
            objective=Objective("y"),
            resources=TrialResources(gpu_memory="2GiB"),
        ),
        backend="local",
    )


with DAG("t_sweep_owner_private", schedule=None, start_date=START) as private:
    owned_sweep()

with DAG("t_sweep_owner_public", schedule=None, start_date=START) as public:
    owned_sweep()
