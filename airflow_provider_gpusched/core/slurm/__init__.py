"""Slurm through its command-line tools: job specs, the client, the state model and shared polling."""

from airflow_provider_gpusched.core.slurm.client import SlurmClient, SubmittedJob
from airflow_provider_gpusched.core.slurm.job import SlurmJobSpec, job_comment, parse_array_indices, task_key
from airflow_provider_gpusched.core.slurm.runner import (
    CommandRunner,
    SlurmCommandError,
    SlurmUnavailableError,
    SSHCommandRunner,
    runner_from_description,
)
from airflow_provider_gpusched.core.slurm.states import JobPhase, JobStatus, JobTracker, classify_state
from airflow_provider_gpusched.core.slurm.tracking import PollProblem, SharedJobPoller

__all__ = [
    "CommandRunner",
    "JobPhase",
    "JobStatus",
    "JobTracker",
    "PollProblem",
    "SSHCommandRunner",
    "SharedJobPoller",
    "SlurmClient",
    "SlurmCommandError",
    "SlurmJobSpec",
    "SlurmUnavailableError",
    "SubmittedJob",
    "classify_state",
    "job_comment",
    "parse_array_indices",
    "runner_from_description",
    "task_key",
]
