"""Two objectives at once: accuracy up, latency down — the Pareto front of a model-size search (drop-in example).

A researcher rarely wants only the most accurate model: a bigger one is also slower to serve. This sweep
gives Optuna both metrics (``Objective(["val_accuracy", "latency_ms"], ["maximize", "minimize"])``), so the
study is multi-objective (TPE with constant liar, rounds of 6 trials on local GPUs). The leaderboard ranks
trials by Pareto front — front 1 holds the trials no other trial beats on both — and then by accuracy;
``pareto.json`` in the results folder lists the whole front, and the Sweeps tab plots latency against
accuracy with the front in orange.

Where the trade-off is known, give ``weights`` instead (``weights=[1, 0.002]``: one point of accuracy is
worth 500 ms): the study then optimises that weighted sum and the best trial is the one with the highest.
Needs ``pip install 'airflow-provider-gpusched[optuna]'``.

The toy ``train`` finishes at once; replace it with yours (it returns both metrics in its dict).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources, choice, loguniform, randint
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group


def train(params: dict) -> dict:
    """Toy model: accuracy grows with width and depth (with diminishing returns) and peaks at lr=1e-3;
    latency grows with both. It reports its validation accuracy after each of 10 epochs (the Sweeps tab
    draws these curves; a pruning rule would judge them)."""
    import math

    from airflow_provider_gpusched.trial import report

    capacity = math.log2(params["width"]) * params["depth"]
    lr_term = (math.log10(params["lr"]) + 3) ** 2
    accuracy = 0.97 - 0.6 / (1 + 0.08 * capacity) - 0.05 * lr_term
    for epoch in range(1, 11):
        report(step=epoch, val_accuracy=round(accuracy * (1 - 0.6**epoch), 5))
        print(f"epoch {epoch}: val_accuracy {accuracy * (1 - 0.6**epoch):.4f}")  # the Sweeps tab shows the tail
    latency = 0.4 + params["depth"] * params["width"] / 256 * (1.5 if params["activation"] == "gelu" else 1.0)
    return {"val_accuracy": round(accuracy, 5), "latency_ms": round(latency, 3)}


PARETO = SweepSpec(
    name="pareto_size",
    search="optuna",
    space={
        "width": choice([64, 128, 256, 512, 1024]),
        "depth": randint(2, 12),
        "lr": loguniform(1e-4, 1e-2),
        "activation": choice(["relu", "gelu"]),
    },
    rounds=3,
    per_round=6,
    seed=1,
    python_callable=train,
    objective=Objective(["val_accuracy", "latency_ms"], ["maximize", "minimize"]),
    resources=TrialResources(gpus=1, gpu_memory="2GiB"),
)


@dag(
    dag_id="gpusched_sweep_pareto",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["gpusched", "sweep", "multi-objective", "example"],
    doc_md=__doc__,
)
def sweep_pareto():
    sweep_task_group(PARETO, backend="local", poll_interval=1)


sweep_pareto_dag = sweep_pareto()
