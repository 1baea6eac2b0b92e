"""DAGs of the fleet tier (tests/fleet): local GPU tasks that name no queue and no host. Each GPU child appends
a record (host, GPUs, start, end) to the file the run's conf names, so the test sees where and when work ran. While
the file <out>.hold-<tag's first word> exists a child goes on past its seconds (as the trainers below do): a test holds
work running for as long as it needs it running, whatever the machine's load, without long fixed lengths."""

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
while os.path.exists(out + ".hold-" + tag.split("-")[0]):
    time.sleep(0.2)
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


# team quotas (docs/quotas.md): the owner says the group (alice: vision, bob: nlp, in the quota file the test writes;
# with that file empty, quotas are off and these are plain tasks). A trainer that checkpoints every 0.5 s step and on
# SIGTERM, and resumes from its checkpoint: each start and each end is recorded with the step it began at. While the
# file <out>.hold-<tag's first word> exists it goes on past its steps: a test holds its GPUs for as long as it needs them held, whatever
# the machine's load (a run that ended on its own before the test looked was taken for a missed reclaim).
TRAINER = r"""
import json, os, pathlib, signal, socket, sys, time
out, tag, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
ck = pathlib.Path(os.environ["GPUSCHED_CHECKPOINT_DIR"]) / "step"
step = int(ck.read_text()) if ck.exists() else 0
first, start, stop = step, time.time(), []
def write(event):
    with open(out, "a") as fh:
        fh.write(json.dumps({"tag": tag, "event": event, "host": socket.gethostname(), "pid": os.getpid(),
                             "from_step": first, "step": step, "start": start, "time": time.time(),
                             "preemptions": int(os.environ.get("GPUSCHED_PREEMPTIONS", "0"))}) + "\n")
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
write("start")
hold = out + ".hold-" + tag.split("-")[0]  # (vision's trainers hold with <out>.hold-vision; nlp's never wait on it)
while (step < steps or os.path.exists(hold)) and not stop:
    time.sleep(0.5)
    step += 1
    ck.write_text(str(step))
write("stopped" if stop else "done")
sys.exit(143 if stop else 0)
"""


def _trainer(tag: str, steps: str) -> list[str]:
    return ["python", "-c", TRAINER, "{{ dag_run.conf['out'] }}", tag, steps]


with DAG("fleet_quota_vision", **{**ARGS, "default_args": {**ARGS["default_args"], "owner": "alice"}}):
    LocalGPUOperator.partial(task_id="sweep", gpus=1, poll_interval=1).expand(
        command=[_trainer(f"vision-{i}", "{{ dag_run.conf.get('steps', 80) }}") for i in range(7)]
    )

with DAG("fleet_quota_nlp", **{**ARGS, "default_args": {**ARGS["default_args"], "owner": "bob"}}):
    LocalGPUOperator.partial(task_id="train", gpus=1, poll_interval=1).expand(
        command=[_trainer(f"nlp-{i}", "{{ dag_run.conf.get('steps', 6) }}") for i in range(4)]
    )
