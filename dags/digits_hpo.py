"""Real training, searched with Optuna's TPE and pruned by the median rule (drop-in example).

Each trial trains a small MLP on handwritten digits (scikit-learn's bundled ``digits``: no download) for up to
10 epochs with ``airflow_provider_gpusched.examples.digits.train_digits``; each epoch's ``loss``, ``val_loss``
and ``accuracy`` go through ``trial.report``. The search (3 rounds of 3 trials: the first drawn at random, then
TPE's) tunes the learning rate, the hidden width and the dropout. The median rule (Optuna's ``MedianPruner``) stops a trial whose accuracy after
its second epoch is below the median of the other trials at the same epoch (once three have got there): it ends ``pruned`` and its GPU goes
to the next trial. Each trial checkpoints after every epoch; a trial that is preempted or relaunched resumes
from its last epoch.

Needs ``pip install 'airflow-provider-gpusched[examples,optuna]'``. On two CPU cores it takes under a minute; on the
leased GPU, each trial runs there. Look at the sweep in the UI (Sweeps page: the learning curves, which trials
were pruned) or with ``gpusched sweep results <results root>/digits_hpo``. docs/examples.md has the figures.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources, choice, loguniform, uniform
from airflow_provider_gpusched.examples.digits import train_digits
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

DIGITS_HPO = SweepSpec(
    name="digits_hpo",
    search="optuna",  # TPE (sampler="tpe", the default)
    rounds=3,
    per_round=3,
    seed=7,
    global_config={"model": "mlp", "epochs": 10, "batch_size": 64},
    space={"lr": loguniform(1e-4, 1e-1), "width": choice([16, 32, 64, 128]), "dropout": uniform(0.0, 0.5)},
    python_callable=train_digits,
    objective=Objective("accuracy", "maximize"),
    pruning={"rule": "median", "warmup_steps": 2, "min_trials": 3},
    resources=TrialResources(gpus=1, gpu_memory="1GiB"),
)


@dag(
    dag_id="gpusched_digits_hpo",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["gpusched", "sweep", "hpo", "optuna", "pruning", "example"],
    doc_md=__doc__,
)
def digits_hpo():
    sweep_task_group(DIGITS_HPO, backend="local", poll_interval=0.5)


digits_hpo_dag = digits_hpo()
