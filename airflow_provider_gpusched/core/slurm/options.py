"""The Slurm backend's parts of the shared records: the ``slurm`` section of a job class (core/job_classes.py parses
it through ``SlurmBackend.job_class_settings``) and a sweep task group's Slurm options (``SweepExecution``'s
``options``, through ``SlurmBackend.sweep_options``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_gpusched.core.backends import within_max_workers
from airflow_provider_gpusched.core.checks import is_int
from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.job_classes import JobClassMapping

#: the Airflow connection a Slurm sweep uses when it names none (SlurmHook.default_conn_name)
DEFAULT_CONN_ID = "slurm_default"


@dataclass(frozen=True)
class SlurmClassSettings:
    """What a job class means on Slurm: sbatch's partition, qos, nice, requeue and account."""

    partition: str | None = None
    qos: str | None = None
    nice: int = 0
    requeue: bool | None = None
    account: str | None = None

    @classmethod
    def for_class(cls, job_class: str) -> SlurmClassSettings:
        """The built-in settings of ``job_class``: idle work goes to the preemptible ``idle`` partition."""
        return cls(partition="idle", requeue=True, nice=100) if job_class == "idle" else cls()

    def sbatch_settings(self, priority: int = 0) -> dict[str, Any]:
        """The sbatch settings (partition, qos, nice, requeue, account) these imply; unset ones left out. The nice
        value is the class's minus the priority, never below 0 (only administrators may set negative values)."""
        out: dict[str, Any] = {
            k: v
            for k, v in (
                ("partition", self.partition),
                ("qos", self.qos),
                ("account", self.account),
                ("requeue", self.requeue),
            )
            if v not in (None, "")
        }
        nice = max(0, self.nice - priority)
        if nice:
            out["nice"] = nice
        return out


def slurm_class_settings(
    job_class: str,
    mapping: JobClassMapping | None = None,
    priority: int = 0,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The sbatch settings ``job_class`` implies under ``mapping``, with non-empty ``overrides`` on top
    (a Slurm connection's ``idle_partition``/``idle_qos``)."""
    section: SlurmClassSettings = (mapping or JobClassMapping())[job_class].section("slurm")
    settings = section.sbatch_settings(priority)
    settings.update({k: v for k, v in (overrides or {}).items() if v not in (None, "")})
    return settings


@dataclass(frozen=True)
class SlurmSweepOptions:
    """How a sweep task group runs on Slurm (``SweepExecution(backend="slurm", options=...)``, or its keywords
    ``slurm_conn_id`` and ``max_array_parallel``).

    :param conn_id: the Airflow connection of the Slurm cluster.
    :param max_array_parallel: batched mode: at most this many array tasks of a chunk at once (sbatch's ``%N``).
    """

    conn_id: str = DEFAULT_CONN_ID
    max_array_parallel: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.conn_id, str) or not self.conn_id:
            raise InvalidArgumentError("conn_id", self.conn_id, "an Airflow connection id")
        if self.max_array_parallel is not None and (not is_int(self.max_array_parallel) or self.max_array_parallel < 1):
            raise InvalidArgumentError("max_array_parallel", self.max_array_parallel, "a whole number >= 1")

    def array_parallel(self, max_workers: int | None) -> int | None:
        """``%N`` on each job array: :attr:`max_array_parallel`, at most the spec's ``max_workers``."""
        return within_max_workers(self.max_array_parallel, max_workers)
