"""The digits example's idle-class training, preempted by normal work on the same (simulated) GPU.

``train_until_preempted`` is the example's ``train_digits`` with one addition for the test: its first start
(``$GPUSCHED_PREEMPTIONS`` is 0) waits after epoch 3 until SIGTERM arrives, so the preemption always comes in
the middle of the training, however fast this machine trains or the normal task's process starts."""

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def train_until_preempted(params: dict) -> dict:
    import os
    import time

    from airflow_provider_gpusched.examples.checkpoints import stop_requested
    from airflow_provider_gpusched.examples.digits import train_digits

    def hold(epoch: int, metrics: dict) -> None:
        if os.environ["GPUSCHED_PREEMPTIONS"] == "0" and epoch == 3:
            print("epoch 3 done: waiting to be preempted", flush=True)
            while not stop_requested():
                time.sleep(0.05)

    return train_digits(params, on_epoch_end=hold)


with DAG(dag_id="t_digits_idle", schedule=None, start_date=START) as idle_training:
    LocalGPUOperator(
        task_id="train",
        job_class="idle",
        gpus=1,
        devices=[0],
        poll_interval=0.3,
        python_callable=train_until_preempted,
        op_kwargs={
            "params": {
                "block0": {"channels": 16, "kernel": 3},
                "block1": {"channels": 32, "kernel": 3},
                "epochs": 8,
                "lr": 0.003,
            }
        },
    )

with DAG(dag_id="t_digits_urgent", schedule=None, start_date=START) as urgent:
    LocalGPUOperator(task_id="urgent", gpus=1, devices=[0], poll_interval=0.3, command=["sleep", "1"])
