"""A Python function as a Slurm job, with per-call resources (seed pavi's function-level scheduling).

``evaluate`` runs inside a Slurm job on a GPU; its return value comes back as the task's XCom and
an exception in the job would fail the task with the remote traceback in the log.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task


def score(subnet: list[int]) -> float:
    """A toy objective standing in for a real evaluation (module-level helpers travel with the task)."""
    return round(sum(w * (i + 1) for i, w in enumerate(subnet)) / len(subnet), 4)


@dag(
    dag_id="gpusched_slurm_python",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["gpusched", "slurm", "example"],
    doc_md=__doc__,
)
def slurm_python():
    @task.slurm(gpus=1, cpus=1, time_limit=10, poll_interval=1)
    def evaluate(subnet: list[int]) -> dict:
        import os
        import socket

        return {
            "subnet": subnet,
            "score": score(subnet),
            "host": socket.gethostname(),
            "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }

    @task
    def best(results: list[dict]) -> dict:
        top = max(results, key=lambda r: r["score"])
        print(f"best subnet {top['subnet']} scores {top['score']}")
        return top

    best(evaluate.expand(subnet=[[1, 2, 3], [3, 2, 1], [2, 2, 2]]))


slurm_python_dag = slurm_python()
