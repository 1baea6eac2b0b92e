"""Slurm through its command-line tools: job specs, the client, the state model and shared polling."""

from airflow_provider_gpusched.core.slurm.client import SlurmClient, SubmittedJob
from airflow_provider_gpusched.core.slurm.connect import client_for, client_from_description, transport_from_description
from airflow_provider_gpusched.core.slurm.job import SlurmJobSpec, job_comment, parse_array_indices, task_key
from airflow_provider_gpusched.core.slurm.poller import PollProblem, SharedJobPoller
from airflow_provider_gpusched.core.slurm.states import JobPhase, JobStatus, JobTracker, classify_state
from airflow_provider_gpusched.core.slurm.transport import (
    SlurmCommandError,
    SlurmTransport,
    SlurmUnavailableError,
    SSHTransport,
)

__all__ = [
    "SlurmTransport",
    "JobPhase",
    "JobStatus",
    "JobTracker",
    "PollProblem",
    "SSHTransport",
    "SharedJobPoller",
    "SlurmClient",
    "SlurmCommandError",
    "SlurmJobSpec",
    "SlurmUnavailableError",
    "SubmittedJob",
    "classify_state",
    "client_for",
    "client_from_description",
    "job_comment",
    "parse_array_indices",
    "transport_from_description",
    "task_key",
]

#: the names these had before they said what they are (issue 55); still importable, with a warning
_RENAMED = {
    "CommandRunner": "SlurmTransport",
    "SSHCommandRunner": "SSHTransport",
    "runner_from_description": "transport_from_description",
}


def __getattr__(name: str) -> object:
    if name in _RENAMED:
        import warnings

        warnings.warn(f"{name} is now called {_RENAMED[name]}", DeprecationWarning, stacklevel=2)
        return globals()[_RENAMED[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
