"""A sweep that is run, re-run with force_rerun and stopped, then run again (tests/airflow/test_rerun_stop.py,
issue 52): five trials of a callable that reports a curve; Optuna's threshold pruner prunes the two whose loss
stays above 2 (whatever order dag.test runs them in). With
GPUSCHED_TEST_SLOW set, each trial waits a minute before its first report (so the re-run can be stopped)."""

import os

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

NAME = os.environ.get("GPUSCHED_TEST_SWEEP", "rerun_stop")


def learn(params):
    import os
    import time

    from airflow_provider_gpusched.trial import report

    with open(os.path.join(os.environ["GPUSCHED_TEST_LOG_DIR"], "executions.log"), "a") as log:
        log.write(os.path.basename(os.environ["GPUSCHED_TRIAL_DIR"]) + "\n")  # the trial's folder
    if os.environ.get("GPUSCHED_TEST_SLOW"):
        time.sleep(60)
    for step in range(6):
        report(step=step, loss=params["quality"] + 1.0 / (step + 1))
    return {"loss": params["quality"]}


with DAG("t_rerun_stop", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    sweep_task_group(
        SweepSpec(
            name=NAME,
            test_config=[{"quality": [0.1, 0.2, 3.0, 5.0, 0.15]}],
            python_callable=learn,
            objective=Objective("loss", "minimize"),
            pruning={"rule": "optuna", "pruner": "threshold", "options": {"upper": 2.0, "n_warmup_steps": 1}},
            resources=TrialResources(gpu_memory="2GiB"),
        ),
        backend="local",
        trial_kwargs={"grace_period": 2},
    )
