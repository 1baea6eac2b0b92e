"""What every backend's sweep-trial operator adds to its backend's operator (backends/local.py's
SweepTrialGPUOperator, backends/slurm.py's SweepTrialSlurmOperator: each in its backend's wing), two duties — when the
task fails before its trial could record an outcome (no GPU fits, sbatch refused the job, the job died before
the trial runner started), the trial is marked ``failed`` with that reason instead of staying ``waiting``; and
when the task ends, its trials' outcomes are published (XCom ``gpusched_trial_outcomes``) for the UI's sweep
view, which may run where the results folder is not visible."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from airflow_provider_gpusched import lineage, metrics, tracking
from airflow_provider_gpusched.core.deprecation import moved_names
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.sweep.records.store import FINAL_STATES
from airflow_provider_gpusched.core.sweep.results.view import OUTCOMES_XCOM, outcome_records
from airflow_provider_gpusched.core.sweep.running.trial_run import TrialSet, mark_unfinished
from airflow_provider_gpusched.core.work_tag import MAX_FIELD, WorkTag

if TYPE_CHECKING:
    from airflow.sdk.types import Logger


#: the trial-operator classes that live in their backend's wing now, by their old name here
__getattr__ = moved_names(
    __name__,
    {
        "SweepTrialGPUOperator": "airflow_provider_gpusched.backends.local:SweepTrialGPUOperator",
        "SweepTrialSlurmOperator": "airflow_provider_gpusched.backends.slurm:SweepTrialSlurmOperator",
    },
)

#: the states a trial's task can end it in (an exception's ``trial_end`` says which; any other is a failure)
TRIAL_ENDS = ("stopped", "timeout", "failed")


def _ended_as(exc: Exception) -> str:
    """The state a trial whose task raised ``exc`` ends in: what the exception says as its ``trial_end`` (each
    backend's own: ``stopped`` when ``gpusched queue stop`` stopped it, ``timeout`` at its time limit), else
    ``failed``."""
    said = getattr(exc, "trial_end", None)
    return said if said in TRIAL_ENDS else "failed"


class RecordsTrialFailures:
    """``trials``: the record of the trials this task runs (core/sweep/running/trial_run.py's TrialSet, as the sweep's
    plan task made it); their manifest is read once per task instance (:meth:`trial_set`)."""

    trials: Any

    if TYPE_CHECKING:  # the operator's logger: this is a mix-in of each backend's operator

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


_RecordsTrialFailures = RecordsTrialFailures  # its name before the trial operators moved to their wings
