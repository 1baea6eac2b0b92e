"""Fuzzing operator arguments as a DAG author might mistype them: the operator is built, or DAG parsing fails
with an AirflowException naming the task and the argument — never another exception."""

import os
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core.test_fuzz_inputs import scalars

pytestmark = pytest.mark.airflow

COUNTS: Counter = Counter()
FUZZ = settings(max_examples=int(os.environ.get("GPUSCHED_FUZZ_EXAMPLES", "300")), deadline=None,
                suppress_health_check=list(HealthCheck), derandomize=not os.environ.get("GPUSCHED_FUZZ_RANDOM"),
                database=None)
anything = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.text(max_size=4), scalars, max_size=2))

SLURM_ARGS = ["command", "script", "job_name", "partition", "qos", "account", "gpus", "gres", "cpus_per_task", "mem",
              "time_limit", "array", "nice", "requeue", "open_mode", "output_path", "error_path", "working_dir",
              "environment", "setup", "sbatch_args", "deferrable", "poll_interval", "job_class", "priority",
              "cpus", "env"]  # (cpus_per_task and environment: the old names of cpus and env)
LOCAL_ARGS = ["command", "bash_command", "gpus", "gpu_memory", "devices", "memory_margin", "max_foreign_processes",
              "min_free_ram", "max_cpu_percent", "host_memory", "oom_retries", "oom_factor", "env", "cwd", "grace_period",
              "wait_mode", "poll_interval", "job_class", "priority", "mem", "setup"]  # (host_memory: mem's old name)


def _build(cls, kwargs, counter):
    from airflow.sdk import DAG
    from airflow.sdk.exceptions import AirflowException

    with DAG("fuzz_ops", schedule=None):
        try:
            cls(task_id="t", **kwargs)
        except AirflowException as exc:
            message = str(exc)
            assert message.startswith("t: ") or "task_id" in message or "t" in message.split(":")[0], message
            COUNTS[f"{counter}: clear error"] += 1
    COUNTS[f"{counter}: inputs"] += 1


@FUZZ
@given(st.dictionaries(st.sampled_from(SLURM_ARGS), anything, max_size=4))
def test_fuzz_slurm_operator_arguments(kwargs):
    from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

    if "command" not in kwargs and "script" not in kwargs:
        kwargs["command"] = ["python", "train.py"]
    _build(SlurmJobOperator, kwargs, "SlurmJobOperator")


@FUZZ
@given(st.dictionaries(st.sampled_from(LOCAL_ARGS), anything, max_size=4))
def test_fuzz_local_gpu_operator_arguments(kwargs):
    from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

    if "command" not in kwargs and "bash_command" not in kwargs:
        kwargs["command"] = ["python", "train.py"]
    _build(LocalGPUOperator, kwargs, "LocalGPUOperator")


def test_fuzz_operator_counts_are_reported():
    if COUNTS:
        print("\noperator fuzz counts: " + ", ".join(f"{k}={v}" for k, v in sorted(COUNTS.items())))
    for kind in ("SlurmJobOperator", "LocalGPUOperator"):
        inputs, errors = COUNTS[f"{kind}: inputs"], COUNTS[f"{kind}: clear error"]
        assert inputs == 0 or 0 < errors < inputs, COUNTS
