"""Local-GPU test DAGs (simulated GPUs)."""

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")

with DAG(dag_id="t_local_whole_host", schedule=None, start_date=START) as whole_host:
    # waits (deferred) while the test holds every GPU, then runs on all four
    LocalGPUOperator(
        task_id="all_gpus",
        gpus=4,
        poll_interval=0.5,
        command=["python3", "-c", "import os; print('CVD', os.environ['CUDA_VISIBLE_DEVICES'])"],
    )

with DAG(dag_id="t_local_looks_again_here", schedule=None, start_date=START) as looks_again_here:
    # finds a GPU busy, looks again in its worker (defer_after) and takes it when it frees: no deferral
    LocalGPUOperator(task_id="all_gpus", gpus=4, poll_interval=0.5, defer_after=60, command=["true"])

with DAG(dag_id="t_local_kill", schedule=None, start_date=START) as kill:
    LocalGPUOperator(
        task_id="spawner",
        gpus=1,
        grace_period=1,
        execution_timeout=timedelta(seconds=4),
        bash_command=f"sleep 300 & echo $! > {os.environ.get('GPUSCHED_TEST_PIDFILE', '/dev/null')}; wait",
    )

with DAG(dag_id="t_local_errors", schedule=None, start_date=START) as errors:
    LocalGPUOperator(task_id="too_many", gpus=5, command=["true"])

    @task.local_gpu(gpu_memory="1GiB")
    def raises():
        def deep():
            raise KeyError("missing-column")

        deep()

    raises()

from airflow_provider_gpusched.sensors.local_gpu import GPUAvailableSensor

with DAG(dag_id="t_local_sensor", schedule=None, start_date=START) as sensor:
    GPUAvailableSensor(task_id="deferred", gpus=2, poke_interval=0.5)
    GPUAvailableSensor(task_id="poking", gpu_memory="20GiB", deferrable=False, poke_interval=0.5)

with DAG(dag_id="t_local_two_stage", schedule=None, start_date=START) as two_stage:
    # fedflow's load and train stages in one function: no GPU while loading, then the one it is given
    @task.local_gpu(gpu_memory="3GiB", mem="1GiB", load_stage=True, poll_interval=0.5)
    def load_then_train() -> dict:
        from airflow_provider_gpusched import wait_for_gpus

        data = list(range(1000))  # the load stage
        before = os.environ["CUDA_VISIBLE_DEVICES"]
        gpus = wait_for_gpus()
        return {"before": before, "gpus": gpus, "cvd": os.environ["CUDA_VISIBLE_DEVICES"], "n": len(data)}

    load_then_train()
