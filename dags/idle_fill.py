"""Idle-time filling (drop-in example): keep the GPUs busy with preemptible search work, and give them
back the moment normal work needs them (pavi's ``normal=False`` / "闲时任务占卡", done properly).

* ``gpusched_idle_fill`` runs continuously (one run after another). Each run launches ``fillers`` idle-class
  tasks; each evaluates random architectures of a toy NAS space one by one, checkpointing after every
  evaluation into ``$GPUSCHED_CHECKPOINT_DIR``. Idle work only starts on GPUs that nobody else (no lease,
  no foreign process) has used for ``idle_for`` seconds, and never while normal work is waiting.
* ``gpusched_train_main`` is normal work that takes all the GPUs when triggered: the fillers holding them
  get SIGTERM, a grace period to checkpoint, then SIGKILL; they relaunch after a backoff and resume from
  their checkpoint, without using an Airflow retry. Each filler's XCom ``gpu_time`` says how many
  GPU-seconds it used and lost, and when it was preempted.

Setup: ``gpusched pools sync`` once (creates the ``gpusched_idle`` pool, one slot per GPU). Timings come from
``[gpusched] job_classes`` (docs/idle-filling.md). On Slurm, the same idea is ``SlurmJobOperator(...,
job_class="idle")``: the preemptible partition with requeue.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag, task

from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def search_architectures(seed: int, evaluations: int, seconds_each: float) -> dict:
    """Random search over a toy NAS space, resumable: state lives in $GPUSCHED_CHECKPOINT_DIR."""
    import json
    import os
    import random
    import time

    state_file = os.path.join(os.environ["GPUSCHED_CHECKPOINT_DIR"], "search.json")
    evaluations, seconds_each = int(evaluations), float(seconds_each)  # rendered from templates
    state = {"done": 0, "best": None}
    if os.path.exists(state_file):
        with open(state_file) as fh:
            state = json.load(fh)
        print(f"resuming after {state['done']} evaluations (preemptions so far: {os.environ['GPUSCHED_PREEMPTIONS']})")
    rng = random.Random(seed * 1000 + state["done"])
    while state["done"] < evaluations:
        arch = {
            "depth": rng.choice([8, 12, 16, 24]),
            "width": rng.choice([256, 384, 512]),
            "kernel": rng.choice([3, 5, 7]),
        }
        time.sleep(seconds_each)  # the GPU work
        score = round(1 - abs(arch["depth"] - 16) / 40 - abs(arch["width"] - 384) / 2000 - arch["kernel"] / 100, 4)
        if state["best"] is None or score > state["best"]["score"]:
            state["best"] = {"score": score, **arch}
        state["done"] += 1
        tmp = state_file + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(state, fh)
        os.replace(tmp, state_file)  # the checkpoint: at most one evaluation is lost to a preemption
    print(f"best of {evaluations}: {state['best']} on CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}")
    return state["best"]


@dag(
    dag_id="gpusched_idle_fill",
    schedule="@continuous",
    max_active_runs=1,
    start_date=START,
    catchup=False,
    tags=["gpusched", "idle-fill", "example"],
    doc_md=__doc__,
    params={
        "fillers": Param(4, type="integer", minimum=1, description="idle tasks per run (one GPU each)"),
        "evaluations": Param(20, type="integer", minimum=1, description="architectures each filler evaluates"),
        "seconds_each": Param(3.0, type="number", minimum=0, description="GPU time per evaluation"),
    },
)
def idle_fill():
    @task
    def seeds(params=None) -> list[int]:
        return list(range(int(params["fillers"])))

    fill = LocalGPUOperator.partial(
        task_id="search",
        job_class="idle",
        gpus=1,
        python_callable=search_architectures,
        map_index_template="seed {{ task.op_kwargs['seed'] }}",
    ).expand(
        op_kwargs=seeds().map(
            lambda s: {
                "seed": s,
                "evaluations": "{{ params.evaluations }}",
                "seconds_each": "{{ params.seconds_each }}",
            }
        )
    )

    @task(trigger_rule="all_done")
    def report(results: list, **context) -> dict:
        ti = context["ti"]
        times = [t for t in ti.xcom_pull(task_ids="search", key="gpu_time") or [] if t]
        used = sum(t["gpu_seconds"] for t in times)
        lost = sum(t["lost_gpu_seconds"] for t in times)
        preemptions = sum(t["preemptions"] for t in times)
        best = max((r for r in results if r), key=lambda r: r["score"], default=None)
        print(
            f"idle fill: {len(times)} fillers, {used:.1f} GPU-s used, {lost:.1f} GPU-s lost to "
            f"{preemptions} preemption(s); best architecture {best}"
        )
        return {"gpu_seconds": used, "lost_gpu_seconds": lost, "preemptions": preemptions, "best": best}

    report(fill.output)


@dag(
    dag_id="gpusched_train_main",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["gpusched", "idle-fill", "example"],
    doc_md="Normal work: takes all the GPUs, preempting idle fillers (see gpusched_idle_fill).",
    params={"seconds": Param(10, type="integer", minimum=0)},
)
def train_main():
    LocalGPUOperator(
        task_id="train",
        gpus=4,
        poll_interval=1,
        bash_command='echo "training on $CUDA_VISIBLE_DEVICES"; sleep {{ params.seconds }}; echo done',
    )


idle_fill_dag = idle_fill()
train_main_dag = train_main()
