"""What a backend's Airflow side is given of a sweep stage: :class:`StageView`, a narrow record the task group's
stage (task_groups/sweep.py ``SweepStage``) builds, instead of the stage itself."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_gpusched.core.deprecation import GpuschedDeprecationWarning

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
    from airflow_provider_gpusched.core.sweep.parts.resources import TrialResources
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession
    from airflow_provider_gpusched.task_groups.execution import SweepExecution


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
    #: the stage's whole ``SweepExecution``, only for :attr:`execution` (an adapter written for the stage)
    _execution: SweepExecution | None = field(default=None, repr=False)

    @property
    def spec(self) -> SweepSpec:
        """The sweep's spec, for an adapter written when it was handed the stage (which had it); it warns."""
        _warn("spec", "the view's resources, sweep and max_workers, or session.spec")
        return self.session.spec

    @property
    def execution(self) -> SweepExecution:
        """The stage's ``SweepExecution``, for an adapter written when it was handed the stage; it warns."""
        _warn("execution", "the view's options, parallel, trials_per_process, poll_interval and trial_kwargs")
        if self._execution is None:
            raise AttributeError(f"this view of sweep {self.sweep!r} was made without its execution")
        return self._execution

    def class_kwargs(self, **kwargs: Any) -> dict[str, Any]:
        """:meth:`runner_task` under the stage's old name; it warns."""
        _warn("class_kwargs(...)", "runner_task(...)")
        return self.runner_task(**kwargs)

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


def _warn(old: str, new: str) -> None:
    """An adapter reads what the stage had and the view keeps only for a release."""
    warnings.warn(
        f"an AirflowBackend is handed a StageView, not the sweep stage: read {new} instead of .{old}; the old name "
        f"still answers but will go in a later release",
        GpuschedDeprecationWarning,
        stacklevel=3,
    )
