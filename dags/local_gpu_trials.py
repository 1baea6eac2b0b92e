"""A few training trials spread over this host's GPUs (drop-in example).

Each trial reserves 6 GiB on a shared GPU (memory-aware packing: several trials share a GPU when
they fit); one large trial takes two whole GPUs. The trial that asks for more memory than its
reservation hits a (toy) CUDA out-of-memory error and is retried with 1.5x the reservation.

On a machine without NVIDIA GPUs set ``[gpusched] simulate_gpus = 4x24GiB`` (the demo does): the
GPUs are then simulated and every log line and result says so.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

TOY_TRAIN = """
import os, sys, time
lr, need_gib = float(sys.argv[1]), float(sys.argv[2])
have = float(os.environ.get("GPUSCHED_GPU_MEMORY_BYTES", "inf")) / 2**30
print(f"lr={lr} on CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']} with {have:.1f} GiB reserved")
if need_gib > have:
    sys.exit(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {need_gib - have:.2f} GiB")
time.sleep(1)
print(f"final loss {abs(lr - 0.01) * 10:.4f}")
"""


@dag(
    dag_id="gpusched_local_gpu_trials",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["gpusched", "local-gpu", "example"],
    doc_md=__doc__,
)
def local_gpu_trials():
    @task.local_gpu(gpu_memory="6GiB", poll_interval=1)
    def trial(lr: float) -> dict:
        import os
        import time

        time.sleep(1)  # stands in for training
        return {"lr": lr, "loss": round(abs(lr - 0.01) * 10, 4), "gpus": os.environ["CUDA_VISIBLE_DEVICES"]}

    results = trial.expand(lr=[0.001, 0.003, 0.01, 0.03])

    big = LocalGPUOperator(
        task_id="two_gpu_trial", gpus=2, poll_interval=1, command=["python3", "-c", TOY_TRAIN, "0.02", "0"]
    )
    oom = LocalGPUOperator(
        task_id="oom_then_retry",
        gpu_memory="4GiB",
        oom_retries=2,
        poll_interval=1,
        command=["python3", "-c", TOY_TRAIN, "0.005", "5"],
    )

    @task
    def best(trials: list[dict]) -> dict:
        top = min(trials, key=lambda t: t["loss"])
        print(f"best lr {top['lr']} (loss {top['loss']}) on GPU {top['gpus']}")
        return top

    best(results) >> [big, oom]


local_gpu_trials_dag = local_gpu_trials()
