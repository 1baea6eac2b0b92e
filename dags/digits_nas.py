"""Neural architecture search by evolution over a real CNN, within a FLOPs and parameter budget (drop-in example).

A candidate is a 3-block CNN for handwritten digits: each block chooses its channels (8, 16, 32 or 48) and its
kernel (1, 3 or 5). Each round trains ``candidate_pool_size`` candidates for 5 epochs on local GPUs
(``airflow_provider_gpusched.examples.digits.train_digits``); the top ``candidate_top_k`` of all rounds breed the
next pool by mutation and crossover (seed 000's ``EvolutionModelSearcher``).

The budget is pavi's ``constraints=dict(flops=...)`` with its built-in evaluator: ``ModelCost`` builds each
candidate's model with the same ``build_model`` the trial trains, and counts its parameters and the FLOPs of one
forward pass on one 8x8 image with PyTorch's own FLOP counter. Only candidates within 300 KFLOPs and 15 K
parameters are ever proposed (about half of the space). Each trial reports the FLOPs and parameters of the
model it really trained. After 3 rounds the best architecture is published: XCom, ``best.json`` in the results
folder, and the Asset ``file://<results root>/digits_nas/best.json``.

Needs ``pip install 'airflow-provider-gpusched[examples]'``. docs/examples.md has the figures.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag

from airflow_provider_gpusched.core.sweep import EvolutionSettings, ModelCost, Objective, SweepSpec, TrialResources
from airflow_provider_gpusched.examples.digits import INPUT_SHAPE, build_model, train_digits
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

BLOCKS = 3
SPACE = {f"block{i}": {"channels": [8, 16, 32, 48], "kernel": [1, 3, 5]} for i in range(BLOCKS)}
BUDGET = {"flops": 300, "params": 15}  # in thousands (units="K"): FLOPs of one image, parameters

DIGITS_NAS = SweepSpec(
    name="digits_nas",
    search="evolution",
    space=SPACE,
    global_config={"model": "cnn", "epochs": 5},
    python_callable=train_digits,
    objective=Objective("accuracy", "maximize"),
    evolution=EvolutionSettings(
        candidate_pool_size=4,
        candidate_top_k=2,
        num_mutation=2,
        num_crossover=2,
        mutate_prob=0.3,
        max_epoch=3,
        constraints=BUDGET,
        evaluator=ModelCost(build_model, INPUT_SHAPE, units="K"),
    ),
    seed=3,
    resources=TrialResources(gpus=1, gpu_memory="1GiB"),
)


@dag(
    dag_id="gpusched_digits_nas",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["gpusched", "nas", "evolution", "example"],
    doc_md=__doc__,
)
def digits_nas():
    sweep_task_group(DIGITS_NAS, backend="local", poll_interval=0.5)


digits_nas_dag = digits_nas()
