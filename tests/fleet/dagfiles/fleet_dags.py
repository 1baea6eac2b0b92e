"""DAGs of the fleet tier (tests/fleet): local GPU tasks that name no queue and no host. Each GPU child appends
a record (host, GPUs, start, end) to the file the run's conf names, so the test sees where and when work ran."""

from __future__ import annotations

import datetime

from airflow.sdk import DAG

from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

RECORD = r"""
import json, os, socket, sys, time
out, tag, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
start = time.time()
def write(event):
    with open(out, "a") as fh:
        fh.write(json.dumps({"tag": tag, "event": event, "host": socket.gethostname(), "pid": os.getpid(),
                             "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"), "start": start, "time": time.time()}) + "\n")
write("start")
time.sleep(seconds)
write("done")
"""

ARGS = dict(
    start_date=datetime.datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    is_paused_upon_creation=False,
    default_args={"retries": 2, "retry_delay": datetime.timedelta(seconds=1)},
)


def _record(tag: str, seconds: str = "{{ dag_run.conf.get('seconds', 2) }}") -> list[str]:
    return ["python", "-c", RECORD, "{{ dag_run.conf['out'] }}", tag, seconds]


with DAG("fleet_spread", **ARGS):
    LocalGPUOperator.partial(task_id="trial", gpus=1, poll_interval=1).expand(
        command=[_record(f"trial-{i}") for i in range(24)]
    )

with DAG("fleet_memory", **ARGS):
    for i in range(3):
        LocalGPUOperator(task_id=f"big_{i}", gpu_memory="60GiB", poll_interval=1, command=_record(f"big-{i}"))
    LocalGPUOperator(task_id="mid", gpu_memory="40GiB", poll_interval=1, command=_record("mid"))
    LocalGPUOperator(task_id="four", gpus=4, poll_interval=1, command=_record("four"))
    for i in range(4):  # packing: 10 GiB each, two fit on one 24 GiB GPU
        LocalGPUOperator(task_id=f"small_{i}", gpu_memory="10GiB", poll_interval=1, command=_record(f"small-{i}"))

with DAG("fleet_hold", **ARGS):  # long trials to look at and stop from the head node
    LocalGPUOperator.partial(task_id="hold", gpus=1, poll_interval=1).expand(
        command=[_record(f"hold-{i}", "{{ dag_run.conf.get('seconds', 120) }}") for i in range(3)]
    )

with DAG("fleet_idle", **ARGS):  # idle-class fillers: one per GPU of the fleet (7)
    LocalGPUOperator.partial(task_id="filler", gpus=1, job_class="idle", poll_interval=1).expand(
        command=[_record(f"filler-{i}", "{{ dag_run.conf.get('seconds', 40) }}") for i in range(7)]
    )

with DAG("fleet_normal", **ARGS):  # normal work that needs a GPU the fillers hold
    LocalGPUOperator(task_id="urgent", gpus=1, poll_interval=1, command=_record("urgent"))

with DAG("fleet_priority", **ARGS):  # priority weights across hosts: blockers first, then high, then low
    for name, weight, count, seconds in (("blocker", 1000, 7, "12"), ("high", 100, 7, "10"), ("low", 1, 7, "2")):
        LocalGPUOperator.partial(
            task_id=name, gpus=1, poll_interval=1, priority_weight=weight, weight_rule="absolute"
        ).expand(command=[_record(f"{name}-{i}", seconds) for i in range(count)])
