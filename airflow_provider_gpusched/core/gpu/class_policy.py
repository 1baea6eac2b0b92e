"""The local backend's part of a job class: the ``local`` section of the job-class mapping (core/job_classes.py
parses it through ``LocalBackend.job_class_settings``), how a class behaves on this host's GPUs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from airflow_provider_gpusched.core.checks import is_int
from airflow_provider_gpusched.core.units import parse_bytes


def _whole_at_least_zero(value: Any) -> int:
    if not is_int(value):
        raise ValueError("a whole number")
    if value < 0:
        raise ValueError("a whole number >= 0")
    return value


@dataclass(frozen=True)
class LocalClassPolicy:
    """How a class behaves on local GPUs. ``fill_in``: the class only fills idle GPUs (never starts while
    normal work waits, only on GPUs quiet for ``idle_for``); ``preemptible``: its leases give their GPUs back
    to normal work (the timing fields). A fill-in class that is not preemptible is a polite filler: it waits
    its turn but, once started, finishes."""

    preemptible: bool = False
    grace_period: float = 30.0  # seconds between SIGTERM (checkpoint now) and SIGKILL
    min_runtime: float = 60.0  # an idle task runs at least this long before a normal task may preempt it
    max_preemptions: int = 5  # after this many, the task's next lease is not preemptible (it finishes)
    backoff: float = 30.0  # seconds before relaunching after a preemption (doubles each time, capped)
    max_backoff: float = 600.0
    idle_for: float = 60.0  # a GPU must have been free of foreign work this long before idle work starts
    max_utilization: int = 10  # percent: above this (with no lease of ours on it) a GPU counts as busy
    max_foreign_memory: int = 512 * 1024**2  # bytes used by processes we do not know: above it, busy
    fill_in: bool = False  # only on idle GPUs, never ahead of waiting normal work

    #: the keys a mapping file writes otherwise than their type says (core/job_classes.py checks the rest)
    checks: ClassVar[Mapping[str, Callable[[Any], Any]]] = {
        "max_foreign_memory": lambda value: parse_bytes(value, argument="max_foreign_memory"),
        "max_preemptions": _whole_at_least_zero,
    }

    @classmethod
    def for_class(cls, job_class: str) -> LocalClassPolicy:
        """The built-in policy of ``job_class``: idle work fills idle GPUs and gives them back."""
        return cls(fill_in=True, preemptible=True) if job_class == "idle" else cls(preemptible=False)

    def backoff_for(self, preemptions: int) -> float:
        """Seconds to wait before relaunching after the ``preemptions``-th preemption."""
        return float(min(self.max_backoff, self.backoff * 2 ** max(0, preemptions - 1)))
