"""Fuzzing operator arguments as a DAG author might mistype them: the operator is built, or DAG parsing fails
with an AirflowException naming the task and the argument — never another exception."""

import re

import pytest
from hypothesis import strategies as st

from tests.core.test_fuzz_inputs import scalars
from tests.fuzzing import assert_both_outcomes, fuzz

pytestmark = pytest.mark.airflow

anything = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.text(max_size=4), scalars, max_size=2))

SLURM_ARGS = [
    "command",
    "script",
    "job_name",
    "partition",
    "qos",
    "account",
    "gpus",
    "gres",
    "cpus_per_task",
    "mem",
    "time_limit",
    "array",
    "nice",
    "requeue",
    "open_mode",
    "output_path",
    "error_path",
    "working_dir",
    "environment",
    "setup",
    "sbatch_args",
    "deferrable",
    "poll_interval",
    "job_class",
    "priority",
    "cpus",
    "env",
]  # (cpus_per_task and environment: the old names of cpus and env)
LOCAL_ARGS = [
    "command",
    "bash_command",
    "gpus",
    "gpu_memory",
    "devices",
    "memory_margin",
    "max_foreign_processes",
    "min_free_ram",
    "max_cpu_percent",
    "host_memory",
    "oom_retries",
    "oom_factor",
    "env",
    "cwd",
    "grace_period",
    "wait_mode",
    "poll_interval",
    "job_class",
    "priority",
    "mem",
    "setup",
]  # (host_memory: mem's old name)


def _build(cls, kwargs):
    from airflow.sdk import DAG

    with DAG("fuzz_ops", schedule=None):
        cls(task_id="t", **kwargs)


#: old argument names, and the names errors (and the deprecation warning) give them now
RENAMED = {"environment": "env", "cpus_per_task": "cpus", "host_memory": "mem"}


def _names_task_and_argument(exc, kwargs) -> bool:
    """``t: <argument>...``: the task, then one of the arguments given (as written, or, for an old name, as it is
    called now)."""
    message = str(exc)
    names = {*kwargs, *(RENAMED[k] for k in kwargs if k in RENAMED)}
    return message.startswith("t: ") and any(re.search(rf"\b{re.escape(name)}\b", message) for name in names)


def _fuzz_operator(cls, names, default_command):
    from airflow.sdk.exceptions import AirflowException

    def build(kwargs):
        if not any(k in kwargs for k in default_command):
            kwargs = {**kwargs, "command": ["python", "train.py"]}
        _build(cls, kwargs)

    counts = fuzz(
        st.dictionaries(st.sampled_from(names), anything, max_size=4),
        build,
        error=AirflowException,
        names=_names_task_and_argument,
        what="task and argument",
    )
    assert_both_outcomes(counts)


@pytest.mark.heavy  # 0.7 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_fuzz_slurm_operator_arguments():
    from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

    _fuzz_operator(SlurmJobOperator, SLURM_ARGS, ("command", "script"))


def test_fuzz_local_gpu_operator_arguments():
    from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

    _fuzz_operator(LocalGPUOperator, LOCAL_ARGS, ("command", "bash_command"))


@pytest.mark.parametrize(
    ("chain", "expected"),
    [
        ({"max_requeue": 2}, "time_limit_chain.max_requeue"),
        ({"signal": "KILL"}, "time_limit_chain.signal: expected 'USR1' or 'USR2'"),
        ({"signal_delay": 90}, "time_limit_chain.signal_delay: expected fewer seconds than the job's time limit"),
    ],
)
def test_a_bad_time_limit_chain_is_refused_when_the_dag_is_parsed_naming_the_task_and_key(chain, expected):
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

    with pytest.raises(AirflowException, match="^train: " + re.escape(expected)):
        SlurmJobOperator(task_id="train", command=["python", "train.py"], time_limit=1, time_limit_chain=chain)
