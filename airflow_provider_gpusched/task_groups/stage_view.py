"""What a backend's Airflow side is given of a sweep stage: :class:`StageView`, a narrow record the task group's
stage (task_groups/sweep.py ``SweepStage``) builds, instead of the stage itself."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.parts.resources import TrialResources
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession


@dataclass(frozen=True, eq=False)
class StageView:
    """One sweep stage as its backend's Airflow side sees it: the trials' resources, the backend's own options,
    and the arguments of the tasks it adds (:meth:`trial_task`, :meth:`runner_task`)."""

    #: the backend's registered name
    backend: str
    #: the sweep's name
    sweep: str
    #: what each trial asks for (the spec's ``TrialResources``)
    resources: TrialResources
    #: the backend's own sweep options (``SweepExecution.options``)
    options: Any
    #: the sweep's session (its spec, results folder and manifests), for a task that runs trials itself
    session: SweepSession
    #: an asynchronous search: its chunks are workers, each asking for trials as its slot frees
    asynchronous: bool
    #: the spec's ``max_workers``: trials of a DAG run at once (None: no bound)
    max_workers: int | None
    #: ``SweepExecution.parallel``: trials of a runner task at once (None: what fits)
    parallel: int | None
    #: ``SweepExecution.trials_per_process``
    trials_per_process: int
    #: ``SweepExecution.poll_interval``
    poll_interval: float | None
    #: ``SweepExecution.trial_kwargs``: extra arguments of every task that runs trials
    trial_kwargs: Mapping[str, Any]

    def trial_task(self, task_id: str, label_template: str, *, chunk: bool = False) -> dict[str, Any]:
        """The arguments of the trial operator's task (besides the backend's own): ``chunk`` when each mapped
        task runs a whole chunk (a job array holds up to ``max_workers`` itself: then one chunk at a time)."""
        arguments = dict(
            task_id=task_id,
            map_index_template=label_template,
            sweep_name=self.sweep,
            poll_interval=self.poll_interval,
            **self.trial_kwargs,
        )
        if self.max_workers is not None:  # DI-toolkit's max_workers: trials of a DAG run at once
            arguments.setdefault("max_active_tis_per_dagrun", 1 if chunk else self.max_workers)
        return arguments

    def runner_task(self, **kwargs: Any) -> dict[str, Any]:
        """``kwargs`` with the job class's pool and weight, for a task that runs trials itself (the operators'
        ``partial`` applies them to mapped trials by itself)."""
        from airflow_provider_gpusched.operators.job_class import apply_job_class

        r = self.resources
        apply_job_class(kwargs, r.job_class, r.priority, r.gpus)
        if self.max_workers is not None and not self.asynchronous:
            # one chunk at a time, each with at most max_workers trials at once (an asynchronous search's worker
            # tasks are one slot each: max_workers of them)
            kwargs.setdefault("max_active_tis_per_dagrun", 1)
        return kwargs
