"""Pipeline-parallel deployment (drop-in example): partition ViT-Base across heterogeneous hosts with the
optimal bottleneck, then launch one task per pipeline stage, each told its host and layer range.

The inputs are sched-pipeline's three files (dags/partition/): models (layers, memory, activations),
device types (per-layer times, memory, bandwidth) and devices (hosts of each type). Here each stage runs on
this machine's GPUs (simulated where none exist) as a stand-in; on a cluster use ``SlurmJobOperator`` with
``sbatch_args=["--nodelist", host]`` for the same stage list.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import Param, dag, task

from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator
from airflow_provider_gpusched.operators.partition import PipelinePartitionOperator

INPUTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "partition")

STAGE = """
import os
print(f"stage {os.environ['GPUSCHED_STAGE']} of {os.environ['GPUSCHED_STAGES']} on host "
      f"{os.environ['GPUSCHED_STAGE_HOST']}: layers {os.environ['GPUSCHED_STAGE_FIRST']}..{os.environ['GPUSCHED_STAGE_LAST']}"
      f" (CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']})")
"""


@dag(
    dag_id="gpusched_pipeline_partition",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["gpusched", "pipeline", "example"],
    doc_md=__doc__,
    params={"model": Param("google/vit-base-patch16-224", type="string",
                           enum=["google/vit-base-patch16-224", "google/vit-large-patch16-224"])},
)
def pipeline_partition():
    schedule = PipelinePartitionOperator(
        task_id="partition", model="{{ params.model }}",
        models_file=os.path.join(INPUTS, "models.yml"), device_types_file=os.path.join(INPUTS, "device_types.yml"),
        devices_file=os.path.join(INPUTS, "devices.yml"))

    @task
    def stage_envs(result: dict) -> list[dict]:
        n = len(result["stages"])
        return [{"GPUSCHED_STAGE": str(i + 1), "GPUSCHED_STAGES": str(n), "GPUSCHED_STAGE_HOST": s["host"],
                 "GPUSCHED_STAGE_FIRST": str(s["layers"][0]), "GPUSCHED_STAGE_LAST": str(s["layers"][1])}
                for i, s in enumerate(result["stages"])]

    LocalGPUOperator.partial(
        task_id="stage", gpu_memory="2GiB", command=["python3", "-c", STAGE],
        map_index_template="stage {{ task.env['GPUSCHED_STAGE'] }} on {{ task.env['GPUSCHED_STAGE_HOST'] }}: "
                           "layers {{ task.env['GPUSCHED_STAGE_FIRST'] }}-{{ task.env['GPUSCHED_STAGE_LAST'] }}",
    ).expand(env=stage_envs(schedule.output))


pipeline_partition_dag = pipeline_partition()
