"""Pipeline-parallel deployment (drop-in example): partition ViT-Base across heterogeneous hosts with the
optimal bottleneck, then launch one task per pipeline stage, each told its host and layer range.

The inputs are sched-pipeline's three files (dags/partition/): models (layers, memory, activations),
device types (per-layer times, memory, bandwidth) and devices (hosts of each type). Two DAGs:
``gpusched_pipeline_partition`` runs each stage on local GPUs (simulated where none exist): on one host, all on
this machine as a stand-in; in a fleet (``[gpusched] fleet_dir``, docs/fleet.md), each stage on the fleet host
that stands for the host the partitioner chose (the ``fleet_hosts`` param maps devices.yml hosts to fleet hosts;
unmapped ones take a host of the same name, else the fleet's hosts in turn), through that host's own queue
``gpu-on-<host>``. ``gpusched_pipeline_partition_slurm`` runs the whole pipeline as one Slurm job, so that
all stages start together, each stage a job step on its host (``pin_hosts``: ``--nodelist HOST``, for clusters
whose node names are the hosts in devices.yml; without it every stage runs on the job's one node).

Every stage is told its layers and its neighbours' addresses (``GPUSCHED_STAGE_PREV_ADDR`` /
``GPUSCHED_STAGE_NEXT_ADDR``, ``host:port``, ports from ``base_port``): with ``runtime_model`` set (a built-in
model such as ``tiny-vit``, or ``module:callable``, profiled into ``inputs`` by ``gpusched profile``), the stages
run the example pipeline runtime (airflow_provider_gpusched/examples/pipeline_stage.py): the model's layers
split as partitioned, activations streamed from stage to stage over TCP. Otherwise each stage only says where
it runs. docs/partition.md walks through profile, partition, run.
"""

from __future__ import annotations

import os
import sys

import pendulum
from airflow.sdk import Param, dag, task

from airflow_provider_gpusched.core.fleet import host_queue, map_hosts
from airflow_provider_gpusched.core.partition.stages import launch_command, stage_plan
from airflow_provider_gpusched.fleet import read_this_fleet
from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator
from airflow_provider_gpusched.operators.partition import PipelinePartitionOperator
from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

INPUTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "partition")

STAGE = """
import os
import socket
print(f"stage {os.environ['GPUSCHED_STAGE']} of {os.environ['GPUSCHED_STAGES']} for host "
      f"{os.environ['GPUSCHED_STAGE_HOST']}: layers {os.environ['GPUSCHED_STAGE_FIRST']}..{os.environ['GPUSCHED_STAGE_LAST']}"
      f" on {os.environ.get('SLURMD_NODENAME') or socket.gethostname()}"
      f" (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '-')}),"
      f" previous {os.environ['GPUSCHED_STAGE_PREV_ADDR'] or '-'}, next {os.environ['GPUSCHED_STAGE_NEXT_ADDR'] or '-'}")
"""


def stage_command(params: dict) -> list[str]:
    """The pipeline runtime on ``runtime_model``'s layers, or the stand-in that says where it runs."""
    if not params.get("runtime_model"):
        return [sys.executable, "-c", STAGE]
    return [
        sys.executable,
        "-m",
        "airflow_provider_gpusched.examples.pipeline_stage",
        "--model",
        params["runtime_model"],
        "--microbatches",
        str(params.get("microbatches", 16)),
    ]


def fleet_hosts() -> list[str]:
    """The GPU hosts of the fleet when the DAG file is parsed ([] on one host): one stage task per host. In a
    fleet where no host has published a record yet the file does not load (an import error that says so) rather
    than load without a stage task for the hosts to come; the DAG processor parses it again."""
    view = read_this_fleet()
    if view is None:
        return []
    if not view.hosts:
        raise RuntimeError(
            "gpusched_pipeline_partition: [gpusched] fleet_dir is set but no GPU host has published "
            "a record yet; the DAG loads once one has (docs/fleet.md)"
        )
    return sorted(h.host for h in view.hosts)


def stage_label(field: str) -> str:
    """The mapped stage task's label in the UI: "stage 3 on rcc-1: layers 13-19"."""
    env = f"task.{field}"
    return (
        f"stage {{{{ {env}['GPUSCHED_STAGE'] }}}} on {{{{ {env}['GPUSCHED_STAGE_HOST'] }}}}: "
        f"layers {{{{ {env}['GPUSCHED_STAGE_FIRST'] }}}}-{{{{ {env}['GPUSCHED_STAGE_LAST'] }}}}"
    )


def pipeline_partition(backend: str):
    @dag(
        dag_id="gpusched_pipeline_partition" + ("" if backend == "local" else "_slurm"),
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        tags=["gpusched", "pipeline", "example", backend],
        doc_md=__doc__,
        params={
            "model": Param(
                "google/vit-base-patch16-224",
                type="string",
                description="the model's name in models.yml (the seed's: google/vit-base-patch16-224, "
                "google/vit-large-patch16-224)",
            ),
            "inputs": Param(
                INPUTS, type="string", description="the folder with models.yml, device_types.yml and devices.yml"
            ),
            "runtime_model": Param(
                "",
                type="string",
                description="run the example pipeline runtime on this model's layers "
                "(tiny-vit, mlp, convnet or module:callable); empty: stand-in "
                "stages that only say where they run",
            ),
            "microbatches": Param(16, type="integer", minimum=1),
            "base_port": Param(
                29700, type="integer", minimum=1024, maximum=65000, description="stage N listens on base_port + N - 1"
            ),
            "pin_hosts": Param(
                False,
                type="boolean",
                description="Slurm: run each stage on its host (--nodelist); the hosts in "
                "devices.yml must then be Slurm nodes",
            ),
            "fleet_hosts": Param(
                {},
                type="object",
                description='In a fleet: devices.yml host -> fleet host (e.g. {"rcc-1": '
                '"gpu-b"}); unmapped hosts take the fleet\'s hosts in turn',
            ),
        },
    )
    def pipeline():
        schedule = PipelinePartitionOperator(
            task_id="partition",
            model="{{ params.model }}",
            models_file="{{ params.inputs }}/models.yml",
            device_types_file="{{ params.inputs }}/device_types.yml",
            devices_file="{{ params.inputs }}/devices.yml",
        )

        hosts = fleet_hosts() if backend == "local" else []

        @task
        def stage_arguments(result: dict, params=None) -> list[dict]:
            params = params or {}
            if backend == "local":  # one task per stage: on its fleet host, else all on this machine
                placed = (
                    map_hosts([s["host"] for s in result["stages"]], hosts, params.get("fleet_hosts"))
                    if hosts
                    else {s["host"]: "127.0.0.1" for s in result["stages"]}
                )
                plan = stage_plan(result["stages"], base_port=params.get("base_port", 29700), address_of=placed)
                return [
                    {
                        "env": {
                            **env,
                            "GPUSCHED_STAGE_FLEET_HOST": placed[env["GPUSCHED_STAGE_HOST"]] if hosts else "",
                        },
                        "command": stage_command(params),
                    }
                    for env in plan
                ]
            # Slurm: the whole pipeline as one job, each stage a step on its host
            plan = stage_plan(result["stages"], base_port=params.get("base_port", 29700))
            pinned = bool(params.get("pin_hosts"))
            on = [s["host"] for s in result["stages"]]
            return [
                {
                    "command": launch_command(plan, stage_command(params), pinned=pinned),
                    "nodes": len(on) if pinned else 1,
                    "nodelist": on if pinned else None,
                    "env": {
                        "GPUSCHED_PIPELINE": f"{len(on)} stages"
                        + (f" on {', '.join(on)}" if pinned else " on one node")
                    },
                }
            ]

        stages = stage_arguments(schedule.output)
        if backend == "local" and hosts:  # a fleet: each host's stages go to its own queue

            @task
            def stages_on(stages: list[dict], host: str) -> list[dict]:
                return [s for s in stages if s["env"]["GPUSCHED_STAGE_FLEET_HOST"] == host]

            @task(trigger_rule="none_failed")
            def check_stages(stages: list[dict], dag_run=None, ti=None) -> dict:
                """Every stage ran on its host. The stage tasks are those of the hosts known when the DAG file was
                parsed; a host that published its first record since has no task yet, and its stages would be
                lost without a word: fail instead, naming it."""
                want: dict[str, int] = {}
                for s in stages:
                    want[s["env"]["GPUSCHED_STAGE_FLEET_HOST"]] = want.get(s["env"]["GPUSCHED_STAGE_FLEET_HOST"], 0) + 1
                ran = {
                    host: ti.get_ti_count(
                        dag_id=dag_run.dag_id,
                        run_ids=[dag_run.run_id],
                        task_ids=[f"stage_on_{host}"],
                        states=["success"],
                    )
                    for host in want
                }
                missing = {host: n - ran[host] for host, n in want.items() if ran[host] < n}
                if missing:
                    raise RuntimeError(
                        f"stages did not run on {missing} (host: stages): the DAG was parsed before "
                        f"those hosts published their records; trigger it again once it shows a "
                        f"stage_on_<host> task for each"
                    )
                return ran

            done = []
            for host in hosts:
                done.append(
                    LocalGPUOperator.partial(
                        task_id=f"stage_on_{host}",
                        queue=host_queue(host),
                        gpu_memory="2GiB",
                        map_index_template=stage_label("env"),
                    ).expand_kwargs(stages_on.override(task_id=f"stages_for_{host}")(stages, host))
                )
            done >> check_stages(stages)
        elif backend == "local":
            LocalGPUOperator.partial(
                task_id="stage", gpu_memory="2GiB", map_index_template=stage_label("env")
            ).expand_kwargs(stages)
        else:
            SlurmJobOperator.partial(
                task_id="pipeline",
                job_name="pipeline",
                map_index_template="{{ task.environment['GPUSCHED_PIPELINE'] }}",
            ).expand_kwargs(stages)

    return pipeline()


pipeline_partition_dag = pipeline_partition("local")
pipeline_partition_slurm_dag = pipeline_partition("slurm")
