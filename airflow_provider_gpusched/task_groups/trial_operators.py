"""The operators a sweep's mapped trials run as: the local-GPU and Slurm operators, plus two duties — when the
task fails before its trial could record an outcome (no GPU fits, sbatch refused the job, the job died before
the trial runner started), the trial is marked ``failed`` with that reason instead of staying ``waiting``; and
when the task ends, its trials' outcomes are published (XCom ``gpusched_trial_outcomes``) for the UI's sweep
view, which may run where the results folder is not visible."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from airflow_provider_gpusched import lineage, metrics, tracking
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.slurm.job import work_key
from airflow_provider_gpusched.core.slurm.states import JobPhase
from airflow_provider_gpusched.core.sweep.store import FINAL_STATES
from airflow_provider_gpusched.core.sweep.trial_run import TrialSet, mark_unfinished
from airflow_provider_gpusched.core.sweep.view import OUTCOMES_XCOM, outcome_records
from airflow_provider_gpusched.core.work_tag import MAX_FIELD, WorkTag
from airflow_provider_gpusched.links import SweepLeaderboardLink
from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator, WorkTimedOut
from airflow_provider_gpusched.operators.queue_stops import WorkStopped
from airflow_provider_gpusched.operators.slurm import SlurmJobFailed, SlurmJobOperator

if TYPE_CHECKING:
    from airflow.sdk.types import Logger


def _ended_as(exc: Exception) -> str:
    """The state a trial whose task raised ``exc`` ends in: ``stopped`` when ``gpusched queue stop`` stopped it,
    ``timeout`` when it was stopped at its time limit (locally, or by Slurm's --time), else ``failed``."""
    if isinstance(exc, WorkStopped):
        return "stopped"
    if isinstance(exc, WorkTimedOut):
        return "timeout"
    if isinstance(exc, SlurmJobFailed) and exc.status.get("phase") == JobPhase.TIMEOUT.value:
        return "timeout"
    return "failed"


class _RecordsTrialFailures:
    """``trials``: the record of the trials this task runs (core/sweep/trial_run.py's TrialSet, as the sweep's
    plan task made it); their manifest is read once per task instance (:meth:`trial_set`)."""

    trials: Any

    if TYPE_CHECKING:  # the operator's logger: this is a mix-in of LocalGPUOperator and SlurmJobOperator

        @property
        def log(self) -> Logger: ...

    def trial_set(self) -> tuple[Any, list[Any]] | None:
        """This task's manifest and trials, or None for a task given none (or whose manifest is gone)."""
        if not hasattr(self, "_trial_set"):
            try:
                self._trial_set = TrialSet.from_record(self.trials).read() if self.trials is not None else None
            except GpuschedError as exc:
                self.log.warning("The trials of this task cannot be read: %s", exc)
                self._trial_set = None
        return self._trial_set

    def _recording(self, method, context, *args) -> Any:
        try:
            value = method(context, *args)
        except Exception as exc:  # TaskDeferred is a BaseException: deferring passes through
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            found = self.trial_set()
            if found is not None:
                state = _ended_as(exc)
                why = (
                    f"the trial's task was stopped: {first}"
                    if state == "stopped"
                    else f"the trial's task failed: {first}"
                )
                for line in mark_unfinished(*found, why, state=state):
                    self.log.warning("%s", line)
            self._publish_outcomes(context)
            raise
        self._publish_outcomes(context)
        return value

    def _publish_outcomes(self, context) -> None:
        try:
            found = self.trial_set()
            if found is not None:
                manifest, trials = found
                records = outcome_records(
                    manifest.store,
                    trials,
                    manifest.record.run,
                    manifest.record.planned_at,
                    described=manifest.record.shared_study,  # an asynchronous search's trials are in no plan
                )
                context["ti"].xcom_push(key=OUTCOMES_XCOM, value=records)
                for record in records:  # metric gpusched.sweep_trials.<sweep>.<state> (docs/metrics.md)
                    if record["state"] in FINAL_STATES:
                        metrics.trial_finished(str(getattr(self, "sweep_name", "") or "sweep"), record["state"])
        except Exception as exc:  # noqa: BLE001 - the trial's outcome is on disk either way
            self.log.warning("Could not publish the trial outcomes for the UI: %s", exc)
        found = self.trial_set()
        if found is not None:  # to the sweep's experiment trackers (tracking.py; never fails the task)
            manifest, trials = found
            tracking.send_manifest_trials(
                manifest, None if manifest.record.shared_study else trials, context, self.log.info
            )

    def work_tag(self, context) -> WorkTag:
        """The task's tag plus its sweep and its trials' labels (``gpusched queue list --sweep``)."""
        tag = super().work_tag(context)  # type: ignore[misc]
        found = self.trial_set()
        labels = "+".join(t.label or t.trial_id for t in found[1]) if found else ""
        return dataclasses.replace(
            tag, sweep=str(getattr(self, "sweep_name", ""))[:MAX_FIELD], trial=labels[:MAX_FIELD]
        )

    def execute(self, context) -> Any:  # the operator publishes its extra links (these included) itself
        return self._recording(super().execute, context)  # type: ignore[misc]

    def _lineage_trial(self, task_instance) -> dict[str, Any] | None:
        """OpenLineage: the trials this task ran, their hyper-parameters, and the sweep run (lineage.py)."""
        try:
            found = self.trial_set()
            if found is None:
                return None
            return lineage.trial_facet(*found, str(getattr(self, "sweep_name", "")), task_instance)
        except Exception as exc:  # noqa: BLE001 - lineage never fails the task
            self.log.debug("no trial facet: %s", exc)
            return None


class SweepTrialGPUOperator(_RecordsTrialFailures, LocalGPUOperator):
    lineage_job_type = "SWEEP_TRIAL_LOCAL_GPU"
    operator_extra_links = (*LocalGPUOperator.operator_extra_links, SweepLeaderboardLink())

    def __init__(self, *, sweep_name: str = "", trials: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sweep_name = sweep_name  # for the "Sweep leaderboard" link
        self.trials = trials

    def resume(self, context, event: dict[str, Any]) -> Any:
        return self._recording(super().resume, context, event)


class SweepTrialSlurmOperator(_RecordsTrialFailures, SlurmJobOperator):
    lineage_job_type = "SWEEP_TRIAL_SLURM"
    operator_extra_links = (*SlurmJobOperator.operator_extra_links, SweepLeaderboardLink())

    def __init__(self, *, sweep_name: str = "", trials: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sweep_name = sweep_name  # for the "Sweep leaderboard" link
        self.trials = trials

    def execute_complete(self, context, event: dict[str, Any]) -> Any:
        return self._recording(super().execute_complete, context, event)

    def work_key(self, context, spec) -> str:
        """A trial is the same work in every DAG run (each run has its own manifest path in the command):
        the sweep folder, the trials and the resources. A job an earlier, killed run left running is
        re-attached to instead of running the trial a second time."""
        found = self.trial_set()
        if found is None:
            return super().work_key(context, spec)
        manifest, trials = found
        skip = ("--comment=", "--output=", "--error=", "--job-name=")
        return work_key(
            manifest.store.dir,
            # an asynchronous search's workers: their run's (they ask for their trials)
            *(sorted(t.trial_id for t in trials) if not manifest.record.shared_study else [manifest.path]),
            *(a for a in spec.sbatch_argv() if not a.startswith(skip)),
        )
