"""The Airflow side of each backend (core/backends.py holds the backends themselves, without Airflow).

An :class:`AirflowBackend` says what a sweep stage becomes in a DAG on its backend (the operator of one trial,
the tasks of a batched stage) and how many GPUs each job class's Airflow pool gets. A stage hands it a
:class:`~airflow_provider_gpusched.task_groups.stage_view.StageView`, what it may read of the stage, never the
stage itself. The core backend names its Airflow side by ``module:Class`` (``Backend.airflow``);
:func:`airflow_backend` imports it on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_provider_gpusched.core.backends import get_backend, within_max_workers
from airflow_provider_gpusched.core.errors import GpuschedError

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.command_handle import CommandHandle
    from airflow_provider_gpusched.core.job_classes import JobClass
    from airflow_provider_gpusched.core.sweep.running.trial_run import Manifest
    from airflow_provider_gpusched.task_groups.stage_view import StageView


class AirflowBackend:
    """What a backend is under Airflow. A backend that runs batched stages (``batching="batched"``, or ``"auto"``
    above ``max_mapped_trials``) sets ``batches`` and overrides :meth:`plan_chunks` (and :meth:`run_chunks`, where
    its chunks are not tasks of its trial operator)."""

    #: whether it runs a stage's trials in chunks (runner tasks, job arrays)
    batches: bool = False
    #: whether it runs an asynchronous search's worker tasks (:meth:`run_chunks` given one number per worker)
    runs_workers: bool = False

    def trial_operator(self, view: StageView, arguments: dict[str, Any]) -> Any:
        """The operator's ``partial`` that runs one trial (``arguments``: task id, sweep name, poll interval,
        the execution's ``trial_kwargs``...: ``view.trial_task``; each mapped task gets ``command`` and
        ``trials``), with the trial's resources (``view.resources``) added."""
        raise NotImplementedError(f"{type(self).__name__}.trial_operator")

    def plan_chunks(self, manifest: Manifest, python: str, max_parallel: int | None) -> list[Any]:
        """What the plan task returns for a batched stage: one item per chunk, each mapped onto the chunk task."""
        raise NotImplementedError(f"{type(self).__name__}.plan_chunks")

    def chunk_parallel(self, options: Any, max_workers: int | None) -> int | None:
        """At most how many of a chunk's trials run at once (:meth:`plan_chunks`' ``max_parallel``), from the
        backend's sweep ``options`` (``SweepExecution.options``) and the spec's ``max_workers``: by default the
        latter."""
        return within_max_workers(None, max_workers)

    def plan_workers(self, manifest: Manifest, python: str, workers: int) -> list[Any]:
        """What the plan task of an asynchronous search returns (``runs_workers``): mapped onto :meth:`run_chunks`,
        ``workers`` slots that each ask for trials as they free."""
        raise NotImplementedError(f"{type(self).__name__}.plan_workers")

    def run_chunks(self, view: StageView, round_no: int | None, planned: Any) -> Any:
        """The mapped task that runs a batched stage's chunks: by default the trial operator mapped over the
        chunks (each item of :meth:`plan_chunks` its ``command`` and ``trials``), as the backend's ``chunk_task``."""
        label = "workers" if view.asynchronous else "chunk {{ task.command[-1] }}"
        arguments = view.trial_task(get_backend(view.backend).chunk_task, label, chunk=True)
        return self.trial_operator(view, arguments).expand_kwargs(planned)

    def pool_gpus(self, conn_id: str | None, simulate: str | None) -> Callable[[JobClass], int]:
        """GPUs a job class's pool stands for (``gpusched pools sync``: a slot per GPU)."""
        raise NotImplementedError(f"{type(self).__name__}.pool_gpus")

    def connect(self, conn_id: str) -> CommandHandle:
        """Its handle through the Airflow connection ``conn_id``, named on a ``gpusched queue`` command line (the
        core backend's ``command_handle`` asks for it)."""
        raise GpuschedError(f"{type(self).__name__}: this backend is reached through no Airflow connection")


def airflow_backend(name: str) -> AirflowBackend:
    """The Airflow side of the backend called ``name``, imported on first use (the sweep task groups load it
    through :func:`~airflow_provider_gpusched.task_groups.sweep.stage_adapter`, the one loader)."""
    from airflow_provider_gpusched.task_groups.sweep import stage_adapter

    adapter: AirflowBackend = stage_adapter(name)
    return adapter
