"""How a sweep's trials run: the execution options of :func:`~airflow_provider_gpusched.task_groups.sweep.sweep_task_group`.

What to run is the :class:`~airflow_provider_gpusched.core.sweep.spec.SweepSpec`; *how* is one
:class:`SweepExecution` (the way astronomer-cosmos keeps its render and execution configs apart)::

    sweep_task_group(spec, execution=SweepExecution(backend="slurm", batching="batched", max_array_parallel=8))
    sweep_task_group(spec, backend="slurm", batching="batched")   # the same, as keyword shortcuts
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from airflow.sdk.exceptions import AirflowException

from airflow_provider_gpusched.core.backends import DEFAULT_BACKEND, backend_names
from airflow_provider_gpusched.core.checks import is_int, is_number

BATCHING = ("auto", "mapped", "batched")
DEFAULT_MAX_CHUNK = 500


@dataclass(frozen=True)
class SweepExecution:
    """:param backend: a backend's name (core/backends.py): ``"local"`` (this host's GPUs) or ``"slurm"``.
    :param batching: ``"mapped"`` (a task per trial), ``"batched"`` (runner tasks or job arrays over chunks)
        or ``"auto"``: batched when a stage has more than ``max_mapped_trials`` trials.
    :param chunk_size: trials per runner task / job array (default: 500, or fewer so there are >= 2 chunks).
    :param parallel: local batched mode: leases in flight per runner (default: what fits on the GPUs).
    :param trials_per_process: local batched mode: trials run one after another in one process under one
        lease (saves a Python start per trial for short trials); an asynchronous search's slot runs its trials in
        worker processes of this many trials each (1: a process per trial, with OOM escalation per trial).
    :param python: interpreter that runs the trial runner (default: this one; on Slurm nodes it must have
        this package installed and see the results folder).
    :param slurm_conn_id: the Slurm connection (Slurm backend).
    :param max_array_parallel: Slurm batched mode: at most this many array tasks of a chunk at once.
    :param poll_interval: seconds between looks while trials wait for GPUs or Slurm jobs (default: the
        ``[gpusched]`` settings).
    :param trial_kwargs: extra arguments for the trial operator (``LocalGPUOperator``/``SlurmJobOperator``),
        e.g. ``retries`` or ``execution_timeout``.
    """

    backend: str = DEFAULT_BACKEND
    batching: str = "auto"
    max_mapped_trials: int = 256
    chunk_size: int | None = None
    parallel: int | None = None
    trials_per_process: int = 8
    python: str | None = None
    slurm_conn_id: str = "slurm_default"
    max_array_parallel: int | None = None
    poll_interval: float | None = None
    trial_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.backend not in backend_names():
            raise AirflowException(f"backend must be one of {tuple(sorted(backend_names()))}, got {self.backend!r}")
        if self.batching not in BATCHING:
            raise AirflowException(f"batching must be one of {BATCHING}, got {self.batching!r}")
        for name in ("max_mapped_trials", "chunk_size", "parallel", "trials_per_process", "max_array_parallel"):
            value = getattr(self, name)
            if value is not None and (not is_int(value) or value < 1):
                raise AirflowException(f"{name} must be a whole number >= 1, got {value!r}")
        if self.poll_interval is not None and (not is_number(self.poll_interval) or self.poll_interval <= 0):
            raise AirflowException(f"poll_interval must be seconds (a number > 0), got {self.poll_interval!r}")
        if not isinstance(self.trial_kwargs, Mapping):
            raise AirflowException(f"trial_kwargs must be a mapping of operator arguments, got {self.trial_kwargs!r}")
        object.__setattr__(self, "trial_kwargs", dict(self.trial_kwargs))

    @classmethod
    def from_options(cls, execution: SweepExecution | None, options: Mapping[str, Any]) -> SweepExecution:
        """``execution``, or one built from keyword shortcuts (not both); unknown names are refused by name."""
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise AirflowException(
                f"sweep_task_group: unknown option(s) {', '.join(unknown)}; expected one of {', '.join(known)}"
            )
        if execution is not None and options:
            raise AirflowException(
                f"sweep_task_group: give execution=SweepExecution(...) or the options "
                f"{', '.join(sorted(options))}, not both"
            )
        if execution is not None and not isinstance(execution, SweepExecution):
            raise AirflowException(f"execution must be a SweepExecution, got {type(execution).__name__}")
        return execution or cls(**options)

    @property
    def interpreter(self) -> str:
        return self.python or sys.executable

    def batched(self, stage_size: int) -> bool:
        """Whether a stage of ``stage_size`` trials runs in chunks."""
        return self.batching == "batched" or (self.batching == "auto" and stage_size > self.max_mapped_trials)

    def chunk_size_for(self, stage_size: int) -> int:
        return self.chunk_size or max(1, min(DEFAULT_MAX_CHUNK, -(-stage_size // 2)))
