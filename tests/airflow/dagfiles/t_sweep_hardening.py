"""Sweeps that go wrong: two DAG runs of one sweep at once, trials whose results are unusable, trials whose
task fails before they start. Local backend on SIMULATED GPUs."""

import sys

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

START = pendulum.datetime(2026, 1, 1, tz="UTC")

# every execution leaves a line in <sweep>/executions.log, then the trial works for 8 s
SLOW = (
    "import json, os, sys, time; d = sys.argv[2]; "
    "fd = os.open(os.path.join(d, '..', '..', 'executions.log'), os.O_WRONLY | os.O_APPEND | os.O_CREAT);"
    "os.write(fd, (sys.argv[1] + ' ' + str(os.getpid()) + chr(10)).encode()); os.close(fd); time.sleep(8);"
    "json.dump({'y': float(sys.argv[1]) * 2}, open(os.path.join(d, 'result.json'), 'w'))"
)

with DAG("t_sweep_twice", schedule=None, start_date=START, max_active_runs=2) as twice:
    sweep_task_group(
        SweepSpec(
            name="twice",
            test_config=[{"x": [1, 2, 3, 4]}],
            command=[sys.executable, "-c", SLOW, "{x}", "{trial_dir}"],
            objective=Objective("y"),
            resources=TrialResources(gpu_memory="4GiB"),
        ),
        backend="local",
        poll_interval=0.5,
    )

# x=1: a good result; x=2: result.json that is not JSON; x=3: NaN; x=4: no objective key
RESULTS = (
    "import json, os, sys; x = int(sys.argv[1]); p = os.path.join(sys.argv[2], 'result.json');"
    "text = {1: '{\"y\": 1.5}', 2: '{\"y\": 1.5', 3: '{\"y\": NaN}', 4: '{\"loss\": 0.1}'}[x];"
    "open(p, 'w').write(text)"
)


def invalid_spec(name, **extra):
    return SweepSpec(
        name=name,
        test_config=[{"x": [1, 2, 3, 4]}],
        command=[sys.executable, "-c", RESULTS, "{x}", "{trial_dir}"],
        objective=Objective("y"),
        resources=TrialResources(gpu_memory="2GiB"),
        **extra,
    )


with DAG("t_sweep_invalid", schedule=None, start_date=START) as invalid:
    sweep_task_group(invalid_spec("invalid"), backend="local", poll_interval=0.5)

with DAG("t_sweep_invalid_recorded", schedule=None, start_date=START) as invalid_recorded:
    sweep_task_group(
        invalid_spec("invalid_recorded", on_invalid_result="record", max_failed_trials=None),
        backend="local",
        poll_interval=0.5,
    )

with DAG("t_sweep_never_started", schedule=None, start_date=START) as never_started:
    # valid syntax, but more than any (SIMULATED 24 GiB) GPU has: the task fails before the trial starts
    sweep_task_group(
        SweepSpec(
            name="never_started",
            test_config=[{"x": [1, 2]}],
            command=[sys.executable, "-c", "print(1)", "{x}"],
            objective=Objective("y"),
            resources=TrialResources(gpu_memory="100GiB"),
        ),
        backend="local",
        poll_interval=0.5,
        trial_kwargs={"retries": 0},
    )
