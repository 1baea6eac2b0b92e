"""Training as a Python function, on a local GPU and as a Slurm job, returning the trained model's metrics
(drop-in example: ``@task.local_gpu`` and ``@task.slurm``).

Both tasks call ``airflow_provider_gpusched.examples.digits.train_digits`` inside the work they launch: a child
process that holds a GPU lease (``CUDA_VISIBLE_DEVICES`` set to it), and a Slurm job on a GPU of the cluster.
Each returns the metrics (accuracy, loss, the learning curve, the device, the parameter count) as its XCom;
``compare`` prints them side by side. An exception in the training fails the task with the remote traceback.

* ``gpusched_digits_local_task``: the MLP and the CNN as two mapped ``@task.local_gpu`` tasks;
* ``gpusched_digits_slurm_task``: the same on Slurm (``[gpusched] slurm_output_dir`` must be visible from the
  compute nodes, and their Python must have the examples extra: by default the job runs this interpreter).

Needs ``pip install 'airflow-provider-gpusched[examples]'``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

MODELS = [
    {"model": "mlp", "width": 64, "epochs": 10, "lr": 0.01},
    {
        "model": "cnn",
        "block0": {"channels": 16, "kernel": 3},
        "block1": {"channels": 32, "kernel": 3},
        "epochs": 6,
        "lr": 0.01,
    },
]


@task
def compare(results: list[dict]) -> dict:
    """Print each model's end point and return the best."""
    for r in results:
        print(
            f"{r['model']:<4} accuracy {r['accuracy']:.3f} after {r['epochs']} epochs, {r['params']:,} parameters, "
            f"on {r['device']}"
        )
    best = max(results, key=lambda r: r["accuracy"])
    print(f"best: {best['model']} with accuracy {best['accuracy']:.3f}")
    return best


def _summary(config: dict, result: dict) -> dict:
    return {
        "model": config["model"],
        **{
            k: result[k]
            for k in (
                "accuracy",
                "best_accuracy",
                "val_loss",
                "epochs",
                "params",
                "flops",
                "device",
                "seconds",
                "curve",
            )
        },
    }


@dag(
    dag_id="gpusched_digits_local_task",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["gpusched", "local-gpu", "example"],
    doc_md=__doc__,
)
def digits_local_task():
    @task.local_gpu(gpus=1, gpu_memory="1GiB")
    def train(config: dict) -> dict:
        from airflow_provider_gpusched.examples.digits import train_digits

        return _summary(config, train_digits(config))

    compare(train.expand(config=MODELS))


@dag(
    dag_id="gpusched_digits_slurm_task",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["gpusched", "slurm", "example"],
    doc_md=__doc__,
)
def digits_slurm_task():
    @task.slurm(gpus=1, cpus=1, time_limit=10, poll_interval=1)
    def train(config: dict) -> dict:
        from airflow_provider_gpusched.examples.digits import train_digits

        return _summary(config, train_digits(config))

    compare(train.expand(config=MODELS))


digits_local_task_dag = digits_local_task()
digits_slurm_task_dag = digits_slurm_task()
