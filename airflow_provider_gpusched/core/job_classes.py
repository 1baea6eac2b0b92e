"""Job classes: ``normal`` work and ``idle`` fill-in work (seed pavi's ``normal=False``).

A DAG author writes ``job_class="idle"``; this module says what that means for Slurm: the preemptible
partition with requeue, so the job runs on idle GPUs and yields them to normal work. Explicit operator
arguments win over the class, and the class wins over connection defaults.
"""

from __future__ import annotations

from typing import Any, Mapping

from airflow_provider_gpusched.core.errors import InvalidArgumentError

JOB_CLASSES = ("normal", "idle")

#: What each class means on Slurm unless configured otherwise.
DEFAULT_SLURM_CLASS_SETTINGS: dict[str, dict[str, Any]] = {
    "normal": {},
    "idle": {"partition": "idle", "requeue": True},
}


def check_job_class(job_class: str, *, argument: str = "job_class") -> str:
    if job_class not in JOB_CLASSES:
        raise InvalidArgumentError(argument, job_class, f"one of {', '.join(JOB_CLASSES)}")
    return job_class


def slurm_class_settings(job_class: str, overrides: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The sbatch settings (partition, qos, nice, requeue) that ``job_class`` implies."""
    check_job_class(job_class)
    settings = dict(DEFAULT_SLURM_CLASS_SETTINGS[job_class])
    settings.update({k: v for k, v in (overrides or {}).get(job_class, {}).items() if v not in (None, "")})
    unknown = set(settings) - {"partition", "qos", "nice", "requeue", "account"}
    if unknown:
        raise InvalidArgumentError(f"job class {job_class!r} settings", sorted(unknown),
                                   "only partition, qos, nice, requeue, account")
    return settings
