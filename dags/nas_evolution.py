"""Neural architecture search by evolution (seed 000's EvolutionModelSearcher) as Airflow rounds (drop-in example).

A subnet is one choice per position — kernel size and expand ratio for each of 6 blocks. Each round is a
task group that evaluates ``candidate_pool_size`` candidates in parallel on local GPUs; then the top
``candidate_top_k`` over all rounds breed the next pool by mutation (each position re-drawn with
``mutate_prob``) and crossover, and only candidates within the FLOPs budget (a user function) are ever
proposed. After ``max_epoch`` rounds the best subnet is published: XCom, ``best.json`` in the results
folder, and the Airflow Asset ``file://<results root>/nas_evolution/best.json``.

The evaluation is a toy "accuracy" that finishes instantly; replace ``evaluate_subnet`` with yours (for
example loading the supernet checkpoint and evaluating the subnet on a validation set).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag

from airflow_provider_gpusched.core.sweep import EvolutionSettings, Objective, SweepSpec, TrialResources
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

BLOCKS = 6
SPACE = {f"block{i}": {"kernel": [3, 5, 7], "expand": [3, 4, 6]} for i in range(BLOCKS)}


def flops(subnet: dict) -> dict:
    """MFLOPs of a subnet (toy cost model): bigger kernels and expand ratios cost more."""
    total = sum(10 * b["kernel"] ** 2 * b["expand"] / 9 for b in subnet.values())
    return {"flops": round(total, 1)}


def evaluate_subnet(subnet: dict) -> dict:
    """Toy accuracy: grows with capacity, with diminishing returns, and prefers 5x5 kernels early on."""
    acc = 0.60
    for i, b in enumerate(subnet.values()):
        acc += 0.012 * b["expand"] ** 0.5 + (0.01 if (b["kernel"] == 5) == (i < 3) else 0)
    return {"accuracy_top-1": round(acc, 5), **flops(subnet)}


NAS = SweepSpec(
    name="nas_evolution",
    search="evolution",
    space=SPACE,
    python_callable=evaluate_subnet,
    objective=Objective("accuracy_top-1", "maximize"),
    evolution=EvolutionSettings(
        candidate_pool_size=8,
        candidate_top_k=3,
        num_mutation=4,
        num_crossover=4,
        mutate_prob=0.2,
        max_epoch=4,
        constraints={"flops": 600},
        measure=flops,
    ),
    seed=0,
    resources=TrialResources(gpus=1, gpu_memory="2GiB", job_class="idle"),
)


@dag(
    dag_id="gpusched_nas_evolution",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["gpusched", "nas", "example"],
    doc_md=__doc__,
)
def nas_evolution():
    sweep_task_group(NAS, backend="local", poll_interval=1)


nas_evolution_dag = nas_evolution()
