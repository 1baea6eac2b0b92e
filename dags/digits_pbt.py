"""Population-based training on real training (drop-in example).

A population of 4 members trains the digits CNN of ``airflow_provider_gpusched.examples.digits.train_digits`` (two
blocks of 16 and 32 3x3 channels) on handwritten digits (scikit-learn's bundled ``digits``: no download) for 6
epochs, in generations of 3 (each a round of the sweep: a mapped task per member). After each generation the member with the lowest held-out accuracy copies the
checkpoint of the best one (its weights and optimizer state, through the examples' checkpoint module) and explores:
its learning rate and dropout are multiplied by 1.2 or 0.8 (or, with probability 0.25, drawn again from the space).
The others go on from their own checkpoints. Ray Tune's ``PopulationBasedTraining`` with ``perturbation_interval=3``,
``quantile_fraction=0.25``, in synchronous generations.

The lineage (who copied whom at which epoch, with which new values, every member's score per generation) is
``<results root>/digits_pbt/search/pbt.json``. Needs ``pip install 'airflow-provider-gpusched[examples]'``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources, loguniform, uniform
from airflow_provider_gpusched.examples.digits import train_digits
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

DIGITS_PBT = SweepSpec(
    name="digits_pbt",
    search="pbt",
    seed=7,
    global_config={
        "model": "cnn",
        "block0": {"channels": 16, "kernel": 3},
        "block1": {"channels": 32, "kernel": 3},
        "batch_size": 64,
    },
    space={"lr": loguniform(1e-4, 1e-1), "dropout": uniform(0.0, 0.5)},  # explored between generations
    pbt={
        "population": 4,
        "perturbation_interval": 3,  # epochs per generation
        "steps": 6,  # epochs in all
        "step_param": "epochs",  # train_digits trains up to this epoch, resuming from its checkpoint
        "quantile_fraction": 0.25,
        "resample_probability": 0.25,
        "perturbation_factors": [1.2, 0.8],
    },
    python_callable=train_digits,
    objective=Objective("accuracy", "maximize"),
    resources=TrialResources(gpus=1, gpu_memory="1GiB"),
)


@dag(
    dag_id="gpusched_digits_pbt",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["gpusched", "sweep", "hpo", "pbt", "example"],
    doc_md=__doc__,
)
def digits_pbt():
    sweep_task_group(DIGITS_PBT, backend="local", poll_interval=0.5)


digits_pbt_dag = digits_pbt()
