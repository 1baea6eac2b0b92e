"""Notifiers in DAGs: a sweep that reports when it ends (e-mail and a Slack-style webhook), and a local GPU
task that alerts with its output when it fails. The servers' addresses come from the test's environment."""

import os
import sys

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources
from airflow_provider_gpusched.notifications import EmailNotifier, WebhookNotifier
from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

START = pendulum.datetime(2026, 1, 1, tz="UTC")
HOOK = os.environ.get("GPUSCHED_TEST_WEBHOOK", "http://127.0.0.1:9/none")


def train(params):
    if params["lr"] == 0.3:
        print("epoch 1: loss nan")
        raise FloatingPointError("diverged at lr=0.3")
    return {"acc": round(1 - params["lr"], 3)}


with DAG("t_notify_sweep", schedule=None, start_date=START) as sweep_dag:
    sweep_task_group(
        SweepSpec(
            name="notified",
            test_config=[{"lr": [0.01, 0.1, 0.3]}],
            python_callable=train,
            objective=Objective("acc"),
            resources=TrialResources(gpu_memory="2GiB"),
            max_failed_trials=1,
        ),
        backend="local",
        notify=[
            EmailNotifier(to=["lab@example.org"], smtp_conn_id="gpusched_test_smtp", from_email="gpusched@example.org"),
            WebhookNotifier(url=f"{HOOK}/slack", style="slack"),
        ],
    )

with DAG("t_notify_failure", schedule=None, start_date=START) as failure_dag:
    LocalGPUOperator(
        task_id="train",
        gpus=1,
        retries=0,
        command=[
            sys.executable,
            "-c",
            "import sys; print('step 1 ok'); print('CUDA error: an illegal memory access'); sys.exit(2)",
        ],
        on_failure_callback=WebhookNotifier(webhook_conn_id="gpusched_test_hook", style="generic"),
    )

with DAG("t_notify_slurm_failure", schedule=None, start_date=START) as slurm_failure_dag:
    from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

    SlurmJobOperator(
        task_id="job",
        partition="batch",
        poll_interval=1,
        retries=0,
        command=["bash", "-c", "echo 'loading data'; echo 'RuntimeError: CUDA out of memory' >&2; exit 4"],
        on_failure_callback=WebhookNotifier(url=f"{HOOK}/slurm", style="generic"),
    )


def score(subnet):
    return {"acc": round(sum(b["kernel"] * b["expand"] for b in subnet.values()) / 100, 4)}


with DAG("t_notify_rounds", schedule=None, start_date=START) as rounds_dag:
    from airflow_provider_gpusched.core.sweep import EvolutionSettings

    sweep_task_group(
        SweepSpec(
            name="notified_rounds",
            search="evolution",
            seed=1,
            python_callable=score,
            space={f"b{i}": {"kernel": [3, 5], "expand": [3, 6]} for i in range(2)},
            objective=Objective("acc"),
            resources=TrialResources(gpu_memory="2GiB"),
            evolution=EvolutionSettings(
                candidate_pool_size=3, candidate_top_k=2, num_mutation=2, num_crossover=1, max_epoch=2
            ),
        ),
        backend="local",
        notify=[WebhookNotifier(url=f"{HOOK}/rounds", style="generic")],
        notify_rounds=True,
    )
