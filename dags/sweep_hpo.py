"""Hyper-parameter search: random search and Optuna (TPE) in rounds, side by side (drop-in example).

Both search the same space — a log-uniform learning rate, a weight decay, the optimizer, and a momentum
that exists only for SGD (a conditional parameter) — and maximize the validation accuracy the trial
callable returns. The random search draws 12 seeded trials at once; the Optuna search runs 3 rounds of
4 trials, each round asking, evaluating the trials as mapped tasks on local GPUs, and telling the
scores. The Optuna study is kept in a journal file under the sweep's results folder, so re-running the
DAG resumes it. Needs ``pip install 'airflow-provider-gpusched[optuna]'`` for the Optuna half.

The toy objective finishes in well under a second; replace ``train`` with your training function (it
gets the parameters and its trial folder, and returns a dict of metrics).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources, choice, loguniform, uniform, when
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group


def train(params: dict, trial_dir: str) -> dict:
    """Toy stand-in for a training run: accuracy peaks at lr=3e-3, small weight decay, SGD momentum 0.9."""
    import math
    import os

    lr_term = (math.log10(params["lr"]) - math.log10(3e-3)) ** 2
    momentum = params.get("momentum", 0.9 if params["optimizer"] == "adam" else 0.0)
    accuracy = 0.95 - 0.08 * lr_term - 2.0 * params["weight_decay"] - 0.3 * (momentum - 0.9) ** 2
    with open(os.path.join(trial_dir, "metrics.txt"), "w") as fh:
        fh.write(f"accuracy {accuracy:.4f}\n")
    return {"val_accuracy": round(accuracy, 5), "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}


SPACE = {
    "lr": loguniform(1e-5, 1e-1),
    "weight_decay": uniform(0.0, 0.05),
    "optimizer": choice(["sgd", "adam"]),
    "momentum": when({"optimizer": "sgd"}, uniform(0.5, 0.99)),
}
RESOURCES = TrialResources(gpus=1, gpu_memory="4GiB")
OBJECTIVE = Objective("val_accuracy", "maximize")

RANDOM_SEARCH = SweepSpec(
    name="hpo_random",
    search="random",
    space=SPACE,
    count=12,
    seed=1,
    python_callable=train,
    objective=OBJECTIVE,
    resources=RESOURCES,
)
OPTUNA_SEARCH = SweepSpec(
    name="hpo_optuna",
    search="optuna",
    space=SPACE,
    rounds=3,
    per_round=4,
    seed=1,
    python_callable=train,
    objective=OBJECTIVE,
    resources=RESOURCES,
)


@dag(
    dag_id="gpusched_sweep_hpo",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["gpusched", "sweep", "hpo", "example"],
    doc_md=__doc__,
)
def sweep_hpo():
    sweep_task_group(RANDOM_SEARCH, backend="local", poll_interval=1)
    sweep_task_group(OPTUNA_SEARCH, backend="local", poll_interval=1)


sweep_hpo_dag = sweep_hpo()
