"""The tracking interface: what a sweep tells an experiment tracker, and when. The sweep defines it (its spec's
``tracking`` list names classes of it, tracking_settings.py); core/tracking implements it (the sync engine and the
built-in trackers) and re-exports it from ``core/tracking/callback.py``, where trackers import it from.

A :class:`TrackingCallback` is told, for each trial attempt of a sweep's DAG run, that it started, each report it
made (its step and metrics), and how it ended; then that the sweep run ended. Each call happens once per attempt
and callback: the sync engine (sync.py) keeps what each callback has been told, and a call that raises is made
again at the next sync (so a tracker that is down gets the events later, in order). Callbacks run on the Airflow
side (the trial's task, the batch runner, the sweep's ``collect``), never inside the trial: a trial on a Slurm node
that cannot reach the tracker is tracked all the same, from the results folder it shares with Airflow.

``memo`` is the callback's own small record of an attempt (``TrialRun.memo``) or of the sweep run
(``SweepRun.memo``), kept for it between syncs and processes: the place for a tracker's run id. Plain JSON values
only.

A callback of your own (docs/development.md "Adding a tracking callback")::

    class PrintCallback(TrackingCallback):
        name = "print"

        def on_trial_end(self, trial, end):
            print(trial.label, end.state, end.metrics)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SweepRun:
    """One DAG run of a sweep (or one ``gpusched sweep run``)."""

    sweep: str
    #: the DAG run id (None: a sweep run without Airflow)
    run: str | None
    #: the sweep's results folder
    folder: str
    search: str
    #: the objective as the spec gives it (``{"metrics": [...], "modes": [...]}``), or None
    objective: Mapping[str, Any] | None
    dag_id: str | None = None
    memo: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class TrialReport:
    """One intermediate report of a trial (core/sweep/records/reports.py): its step, metrics and time (epoch seconds)."""

    step: int
    metrics: Mapping[str, float | None]
    time: float | None = None


@dataclass(frozen=True)
class TrialRun:
    """One attempt of one trial (a trial run again, by a later DAG run or a retry, is another attempt)."""

    sweep: SweepRun
    trial_id: str
    label: str
    #: the parameters, flattened (``optimizer.lr``)
    params: Mapping[str, Any]
    #: when the attempt started (epoch seconds), None when it never started (it failed before)
    started: float | None
    #: the trial's folder (params.json, status.json, result.json, output.log, reports.jsonl)
    folder: str
    host: str | None = None
    gpus: str | None = None
    slurm_job: str | None = None
    #: the Airflow task instance that ran it, where known: dag_id, run_id, task_id, map_index, try_number
    task: Mapping[str, Any] | None = None
    memo: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class TrialEnd:
    """How an attempt ended."""

    #: succeeded, pruned, failed, invalid, timeout or stopped
    state: str
    #: the numbers of its result (flattened), what a tracker can chart
    metrics: Mapping[str, float]
    #: its result as the trial gave it (JSON), or None
    result: Any
    #: the objective's score, when it has one
    score: float | None
    ended: float | None
    seconds: float | None
    error: str | None
    #: the files worth keeping, where they exist: output.log and result.json
    files: Sequence[str] = ()
    #: True for an attempt whose end comes from a later attempt of the trial: it was preempted, reclaimed or its
    #: runner killed before it recorded an outcome (``stopped``, its ``error`` says so), or its outcome was kept
    #: aside when the trial started again. The trial folder's reports and files are then the later attempt's.
    superseded: bool = False


class TrackingCallback:
    """Told about a sweep's trials as they start, report and end. Override what you need; every method may raise
    (the sync tells the same event again later). ``name`` keys what the sync remembers for the callback: give each
    kind of callback its own."""

    name: str = "callback"

    def setup(self, sweep: SweepRun) -> None:
        """Before the first event of a sync (once per sync, not once per sweep run)."""

    def on_trial_start(self, trial: TrialRun) -> None:
        """The attempt started (or, seen after it ended, is about to be told whole)."""

    def on_trial_reports(self, trial: TrialRun, reports: Sequence[TrialReport]) -> None:
        """Reports not told yet, in the order written. The default tells them one at a time."""
        for report in reports:
            self.on_trial_report(trial, report)

    def on_trial_report(self, trial: TrialRun, report: TrialReport) -> None:
        """One intermediate report."""

    def on_trial_end(self, trial: TrialRun, end: TrialEnd) -> None:
        """The attempt ended (after its last report)."""

    def on_sweep_end(self, sweep: SweepRun, summary: Mapping[str, Any]) -> None:
        """The sweep run ended: ``summary`` has its counts, and its best trial where it has an objective."""

    def close(self) -> None:
        """After the sync, whether it delivered everything or not."""
