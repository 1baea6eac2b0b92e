"""BOHB on real training: TPE proposals within Hyperband's brackets, searched asynchronously (drop-in example).

Each trial trains the small MLP of ``airflow_provider_gpusched.examples.digits.train_digits`` on handwritten digits
(scikit-learn's bundled ``digits``: no download) for up to 9 epochs, reporting each epoch's ``accuracy``. The search
is asynchronous (``asynchronous: true``): 3 worker tasks each ask the shared Optuna study for a trial the moment
their slot frees, with no round waiting for its slowest trial; 12 trials in all. Optuna's ``HyperbandPruner``
(``min_resource`` 1 epoch, ``max_resource`` 9, ``reduction_factor`` 3: Ray Tune's ``HyperBandForBOHB`` with
``max_t=9``) judges every report in the study itself and stops the trials below the cut at each rung of their
bracket; TPE, told of the pruner, proposes from the trials of the same bracket. That pair is BOHB (Falkner et al.,
2018), as Optuna's documentation builds it.

Needs ``pip install 'airflow-provider-gpusched[examples,optuna]'``. On two CPU cores it takes about a minute. The
Sweeps page shows the trials as the workers take them (their curves, which were pruned at which epoch);
``gpusched sweep results <results root>/digits_bohb`` prints the leaderboard.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources, choice, loguniform, uniform
from airflow_provider_gpusched.examples.digits import train_digits
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

EPOCHS = 9

DIGITS_BOHB = SweepSpec(
    name="digits_bohb",
    search="optuna",
    sampler="tpe",
    asynchronous=True,
    count=12,  # trials in all
    per_round=3,  # worker tasks: trials at once (or max_workers)
    seed=7,
    global_config={"model": "mlp", "epochs": EPOCHS, "batch_size": 64},
    space={"lr": loguniform(1e-4, 1e-1), "width": choice([16, 32, 64, 128]), "dropout": uniform(0.0, 0.5)},
    python_callable=train_digits,
    objective=Objective("accuracy", "maximize"),
    pruning={
        "rule": "optuna",
        "pruner": "hyperband",
        "options": {"min_resource": 1, "max_resource": EPOCHS, "reduction_factor": 3},
    },
    resources=TrialResources(gpus=1, gpu_memory="1GiB"),
)


@dag(
    dag_id="gpusched_digits_bohb",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["gpusched", "sweep", "hpo", "optuna", "bohb", "hyperband", "asynchronous", "example"],
    doc_md=__doc__,
)
def digits_bohb():
    sweep_task_group(DIGITS_BOHB, backend="local", poll_interval=0.5)


digits_bohb_dag = digits_bohb()
