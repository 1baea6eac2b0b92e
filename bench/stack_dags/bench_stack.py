"""DAGs for bench/stack_makespan.py: the same N one-GPU trials of S seconds as one mapped task per trial, and as
a batched sweep (runner tasks that keep up to 4 leases in flight). N and S come from the environment of the
stack the benchmark starts (GPUSCHED_BENCH_TRIALS, GPUSCHED_BENCH_SECONDS)."""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec
from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

START = pendulum.datetime(2026, 1, 1, tz="UTC")
TRIALS = int(os.environ.get("GPUSCHED_BENCH_TRIALS", "256"))
SECONDS = os.environ.get("GPUSCHED_BENCH_SECONDS", "1")
# a trial: sleep, then report a metric (the sweep's result contract; the mapped DAG ignores it)
TRIAL = [
    "python3",
    "-c",
    "import sys, time, json; time.sleep(float(sys.argv[1])); "
    "open('result.json', 'w').write(json.dumps({'score': 1.0}))",
    SECONDS,
]

with DAG("bench_mapped", schedule=None, start_date=START, catchup=False, max_active_tasks=64):
    # the recommended layout: a pool with one slot per GPU, so a task starts when a GPU is free (no defer cycle)
    LocalGPUOperator.partial(task_id="trial", gpus=1, poll_interval=0.5, pool="bench_gpus").expand(
        command=[TRIAL] * TRIALS
    )

with DAG("bench_batched", schedule=None, start_date=START, catchup=False):
    sweep_task_group(
        SweepSpec(
            name="bench_batched",
            test_config=[{"seed": list(range(TRIALS))}],
            command=TRIAL,
            objective=Objective("score", "maximize"),
        ),
        backend="local",
        batching="batched",
        chunk_size=max(1, TRIALS // 2),
        parallel=2,
        trials_per_process=1,
        publish_asset=False,
    )

# idle filling: 4 checkpointing fillers (one GPU each, FILL_SECONDS of work in 0.5 s steps), then a normal run
# that wants all 4 GPUs and records when its GPU work starts
FILL_SECONDS = os.environ.get("GPUSCHED_BENCH_FILL_SECONDS", "60")
FILLER = [
    "python3",
    "-c",
    """
import os, signal, sys, time
ck = os.path.join(os.environ["GPUSCHED_CHECKPOINT_DIR"], "step")
step = int(open(ck).read()) if os.path.exists(ck) else 0
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
while step < int(float(sys.argv[1]) * 2) and not stop:
    time.sleep(0.5)
    step += 1
    open(ck, "w").write(str(step))
sys.exit(143 if stop else 0)
""",
    FILL_SECONDS,
]
NORMAL = [
    "python3",
    "-c",
    "import sys, time; open(sys.argv[1], 'w').write(repr(time.time())); time.sleep(5)",
    "{{ params.out }}/{{ run_id }}.start",
]

with DAG("bench_fillers", schedule=None, start_date=START, catchup=False):
    LocalGPUOperator.partial(task_id="filler", job_class="idle", gpus=1, poll_interval=1, retries=0).expand(
        command=[FILLER] * 4
    )

with DAG("bench_normal", schedule=None, start_date=START, catchup=False, params={"out": ""}):
    LocalGPUOperator(task_id="train", gpus=4, poll_interval=1, command=NORMAL)
