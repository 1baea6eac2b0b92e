"""Idle-time training that normal work preempts, and that finishes from its checkpoint (drop-in example).

* ``gpusched_digits_idle_training`` trains a CNN on handwritten digits for 30 epochs as *idle-class* work
  (``job_class="idle"``): it starts only on a GPU nobody else is using, and gives it back the moment normal
  work needs it. ``train_digits`` checkpoints after every epoch into ``$GPUSCHED_CHECKPOINT_DIR``; on SIGTERM it
  saves between two batches and exits. gpusched relaunches it when the GPU is free again (after a backoff, no
  Airflow retry used) and it resumes from that epoch and batch, not from epoch 0.
* ``gpusched_digits_urgent`` is normal work on the same GPU (device 0): trigger it while the idle training runs
  and watch the idle task's log: "preempted ... relaunching", then "resuming from epoch N". Its XCom
  ``return_value`` has ``resumed_from``, ``stops`` and the learning curve; ``gpu_time`` the GPU-seconds used and
  lost to the preemption.

Setup: ``gpusched pools sync`` once (the ``gpusched_idle`` pool). Timings (grace period, backoff, how long a GPU
must be idle first) come from ``[gpusched] job_classes`` (docs/idle-filling.md). Needs
``pip install 'airflow-provider-gpusched[examples]'``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_gpusched.examples.digits import train_digits
from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
CNN = {
    "model": "cnn",
    "block0": {"channels": 16, "kernel": 3},
    "block1": {"channels": 32, "kernel": 3},
    "block2": {"channels": 32, "kernel": 3},
}

with DAG(
    dag_id="gpusched_digits_idle_training",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["gpusched", "idle-fill", "preemption", "example"],
    doc_md=__doc__,
    render_template_as_native_obj=True,
    params={
        "epochs": Param(30, type="integer", minimum=1, description="epochs to train"),
        "lr": Param(0.003, type="number", exclusiveMinimum=0, description="Adam's learning rate"),
    },
) as idle_training_dag:
    LocalGPUOperator(
        task_id="train",
        job_class="idle",
        gpus=1,
        devices=[0],
        python_callable=train_digits,
        op_kwargs={"params": {**CNN, "epochs": "{{ params.epochs }}", "lr": "{{ params.lr }}"}},
        grace_period=30,
    )

with DAG(
    dag_id="gpusched_digits_urgent",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["gpusched", "idle-fill", "preemption", "example"],
    doc_md=__doc__,
) as urgent_dag:
    LocalGPUOperator(
        task_id="urgent", gpus=1, devices=[0], python_callable=train_digits, op_kwargs={"params": {"epochs": 3}}
    )
