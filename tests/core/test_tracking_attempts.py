"""The tracking engine (core/tracking/sync.py) over attempts that end badly and syncs that come late (issue 76): an
attempt its trial started again (preempted, reclaimed, its runner killed) is ended for every tracker, never left
open; the Airflow task of an attempt reaches the trackers when the attempt is sent after an outage or by another
task; an outage is said once per task log, then at a growing gap, and once when it ends; a tracker's settings are
refused when the spec is loaded, naming the key."""

import os
import re
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
from airflow_provider_gpusched.core.tracking import TrackingCallback, TrackingSync, parse_tracking
from airflow_provider_gpusched.core.tracking.sync import send_to
from tests.tracking_helpers import FakeSweep


class Recorder(TrackingCallback):
    """Each event with what a tracker sees of it: the attempt's start time, task, and how it ended."""

    name = "recorder"

    def __init__(self, down=False):
        self.events, self.down = [], down

    def _event(self, event):
        if self.down:
            raise ConnectionError("tracker down")
        self.events.append(event)

    def on_trial_start(self, trial):
        self._event({"what": "start", "label": trial.label, "started": trial.started, "task": trial.task})

    def on_trial_report(self, trial, report):
        self._event({"what": "report", "label": trial.label, "step": report.step, "started": trial.started})

    def on_trial_end(self, trial, end):
        self._event(
            {
                "what": "end",
                "label": trial.label,
                "started": trial.started,
                "task": trial.task,
                "state": end.state,
                "error": end.error,
                "metrics": dict(end.metrics),
                "superseded": getattr(end, "superseded", None),  # (a field new in issue 76)
            }
        )


def sync(sweep, callback, **kwargs):
    options = {k: kwargs.pop(k) for k in ("retry_after", "budget", "log", "clock") if k in kwargs}
    return TrackingSync(sweep.sweep_run(), [callback], score=sweep.spec.objective.score, **options).sync(**kwargs)


def started(sweep, i):
    return sweep.store.status(sweep.trials[i])["started"]


def start_again(sweep, i):
    """The trial's next attempt, as its runner starts it after a preemption (a start time of its own)."""
    before = started(sweep, i)
    while True:
        sweep.start(i)
        if started(sweep, i) != before:
            return


def task(n):
    return {"dag_id": "dag-1", "run_id": "run-1", "task_id": "trk.trial", "map_index": n, "try_number": 1}


def test_an_attempt_its_trial_started_again_is_ended_for_the_tracker_not_left_open(tmp_path):
    """A reclaimed attempt: told started and one report live, then the trial ran again and succeeded. The
    first attempt is ended (stopped, saying why, at the second's start) before the second is told."""
    sweep = FakeSweep(tmp_path, lrs=(0.1,))
    sweep.start(0)
    sweep.report(0, 0, loss=1.0)
    rec = Recorder()
    sync(sweep, rec)
    first = started(sweep, 0)
    start_again(sweep, 0)
    second = started(sweep, 0)
    sweep.report(0, 0, loss=0.9)
    sweep.finish(0, result={"acc": 0.8})
    later = Recorder()
    out = sync(sweep, later, final=True)
    assert [(e["what"], e["started"]) for e in later.events] == [
        ("end", first),
        ("start", second),
        ("report", second),
        ("end", second),
    ]
    old, new = later.events[0], later.events[-1]
    assert old["state"] == "stopped" and old["superseded"] and old["metrics"] == {}
    assert re.search(r"ended without an outcome: the trial started again at .*preempted, reclaimed", old["error"])
    assert new["state"] == "succeeded" and not new["superseded"]
    assert out.callbacks["recorder"].told == 4
    again = Recorder()
    assert sync(sweep, again, final=True).callbacks["recorder"].told == 0 and again.events == []


def test_an_attempt_whose_outcome_was_kept_aside_is_ended_with_it(tmp_path):
    """The first attempt failed, but the trial started again (a task retry) before its end was told: the store
    kept that outcome aside, and the tracker gets it, not a made-up one."""
    sweep = FakeSweep(tmp_path, lrs=(0.1,))
    sweep.start(0)
    rec = Recorder()
    sync(sweep, rec)
    sweep.finish(0, state="failed")
    start_again(sweep, 0)
    later = Recorder()
    sync(sweep, later)
    assert [e["what"] for e in later.events] == ["end", "start"]
    assert (later.events[0]["state"], later.events[0]["error"], later.events[0]["superseded"]) == ("failed", "x", True)


def test_a_reruns_attempt_that_a_stop_replaced_with_the_earlier_outcome_is_ended_as_stopped(tmp_path):
    """A forced re-run (run-2) of a trial run-1 finished, stopped midway: the store puts run-1's outcome back,
    and run-2's attempt, told started, is ended with the stop's reason (its record is run-1's again)."""
    first = FakeSweep(tmp_path, lrs=(0.1,))
    first.run_all(steps=1)
    sync(first, Recorder(), final=True)
    rerun = FakeSweep(tmp_path, lrs=(0.1,), run="run-2")
    rerun.start(0)
    rec = Recorder()
    sync(rerun, rec)
    assert [e["what"] for e in rec.events] == ["start"]
    assert rerun.store.end_unfinished(rerun.trials[0], run="run-2", state="stopped", reason="stopped: by ann") == (
        "succeeded"
    )
    later = Recorder()
    sync(rerun, later, final=True)
    assert [(e["what"], e["state"], e["error"]) for e in later.events] == [("end", "stopped", "stopped: by ann")]


def test_the_task_of_an_attempt_sent_after_an_outage_or_by_another_task_is_told(tmp_path):
    """Trial 0's task synced while the tracker was down; trial 1's task a moment later, skipped (the tracker is
    tried once a minute); trial 2's was never synced with a tracker (its setup failed) but kept its task. The
    sweep's collect, which knows no task, sends each with the task that ran it."""
    sweep = FakeSweep(tmp_path)
    sweep.run_all(steps=1)
    folders = [t.folder for t in sweep.trials]
    out = sync(sweep, Recorder(down=True), folders=[folders[0]], tasks={folders[0]: task(0)})
    assert out.callbacks["recorder"].error
    out = sync(sweep, Recorder(down=True), folders=[folders[1]], tasks={folders[1]: task(1)})
    assert "failing since" in out.callbacks["recorder"].skipped
    said = []
    assert send_to([], sweep.sweep_run(), said.append, folders=[folders[2]], tasks={folders[2]: task(2)}) is None
    collect = Recorder()
    sync(sweep, collect, final=True)
    starts = {e["label"]: e["task"] for e in collect.events if e["what"] == "start"}
    assert starts == {t.label: task(n) for n, t in enumerate(sweep.trials)}
    ends = {e["label"]: e["task"] for e in collect.events if e["what"] == "end"}
    assert ends == starts


def test_a_remembered_task_that_is_not_one_is_not_told(tmp_path):
    """The tasks kept under tracking/_tasks/ (private, both folders) are read back checked: a record someone spoiled
    names no task (a tag of the wrong type sent to MLflow on every sync looked like an endless outage)."""
    from airflow_provider_gpusched.core.tracking.sync import _task_record

    sweep = FakeSweep(tmp_path)
    sweep.run_all(steps=1)
    folders = [t.folder for t in sweep.trials]
    sync(sweep, Recorder(down=True), folders=folders, tasks={f: task(n) for n, f in enumerate(folders)})
    kept = Path(sweep.store.dir) / "tracking" / "_tasks"
    assert (kept.stat().st_mode & 0o077) == 0 and (kept.parent.stat().st_mode & 0o077) == 0
    assert _task_record(task(3)) == task(3)
    for spoiled in (
        {**task(0), "task_id": {"not": "a name"}},
        {**task(0), "map_index": "0"},
        {**task(0), "try_number": True},
        {**task(0), "dag_id": "x" * 1000},
        {"dag_id": "dag-1"},  # (no task)
        ["trk.trial"],
    ):
        assert _task_record(spoiled) is None, spoiled
    assert _task_record({**task(0), "extra": object()}) == task(0)  # only the fields a tag is made of


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now


def test_an_outage_is_said_once_then_at_a_growing_gap_and_once_when_it_ends(tmp_path):
    """A worker's sender syncs every 30 s for 20 minutes while the tracker is down: its log says the outage when
    it starts, then after 1, 2, 4 and 8 minutes (not 40 times), and that it works again once."""
    sweep = FakeSweep(tmp_path, lrs=(0.1,))
    sweep.run_all(steps=1)
    clock, said = Clock(), []
    down = Recorder(down=True)
    start = clock.now
    when = []
    for _ in range(41):
        before = len(said)
        send_to([down], sweep.sweep_run(), said.append, clock=clock)
        if len(said) > before:
            when.append(clock.now - start)
        clock.now += 30
    assert when == [0, 60, 180, 420, 900], said
    outage = [s for s in said if "recorder" in s and ("fail" in s or "waits" in s)]
    assert "Nothing is lost" in outage[0] and "gpusched sweep track trk" in outage[0]
    reminders = [s for s in outage if "still failing since" in s]
    assert len(reminders) == 4 and all("(the start of trial" in s for s in reminders)
    up = Recorder()
    count = len(said)
    clock.now += 60  # (a minute after the last try: this sync tries it)
    send_to([up], sweep.sweep_run(), said.append, clock=clock)
    assert [e["what"] for e in up.events] == ["start", "report", "end"]
    assert [s for s in said[count:] if "works again" in s]
    count = len(said)
    send_to([up], sweep.sweep_run(), said.append, clock=clock)
    assert not any("works again" in s or "fail" in s for s in said[count:])


def test_a_task_that_said_an_outage_says_its_end_when_another_task_saw_it_first(tmp_path):
    """The outage is said by this task's log; another worker's sync found the tracker working again (and removed
    the health record): this task's next sync says it works again, once."""
    sweep = FakeSweep(tmp_path, lrs=(0.1,))
    sweep.run_all(steps=1)
    said = []
    send_to([Recorder(down=True)], sweep.sweep_run(), said.append)
    assert "Nothing is lost" in said[0]
    count = len(said)
    os.remove(Path(sweep.store.dir) / "tracking" / "recorder" / "health.json")  # what the other worker did
    send_to([Recorder()], sweep.sweep_run(), said.append)
    send_to([Recorder()], sweep.sweep_run(), said.append)
    again = [s for s in said[count:] if "works again" in s]
    assert len(again) == 1 and "it failed since" in again[0]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"kind": "mlflow", "tracking_uri": "htp://mlflow:5000"},
            r"tracking\[0\].tracking_uri: expected an MLflow tracking server's URL, .*did you mean "
            r"http://mlflow:5000\?, got 'htp://mlflow:5000'",
        ),
        ({"kind": "mlflow", "tracking_uri": "mlflow:5000"}, r"did you mean http://mlflow:5000\?"),
        ({"kind": "mlflow", "tracking_uri": "http://:5000"}, r"tracking_uri: .*\(it names no host\)"),
        ({"kind": "mlflow", "tracking_uri": "http://mlflow:99999"}, r"its port is not a number from 1 to 65535"),
        ({"kind": "mlflow", "tracking_uri": "http://mlflow lab"}, r"tracking_uri: expected an MLflow tracking"),
        ({"kind": "mlflow", "tracking_uri": "databricks"}, r"not to a databricks store; serve it with `mlflow server"),
        ({"kind": "mlflow", "tracking_uri": "sqlite:///mlflow.db"}, r"not to a sqlite store"),
        ({"kind": "mlflow", "tracking_uri": "/srv/mlruns"}, r"not to a local folder"),
        ({"kind": "mlflow", "tracking_uri": "ftp://mlflow"}, r"tracking_uri: expected an MLflow tracking server's URL"),
        ({"kind": "tensorboard", "log_dir": "runs/tb"}, r"log_dir: expected an absolute directory .*relative to each"),
        (
            {"kind": "tensorboard", "log_dir": "s3://bucket/tb"},
            r"log_dir: .*written with the file system, not to a URL",
        ),
        ({"kind": "wandb", "dir": "wandb"}, r"tracking\[0\].dir: expected an absolute directory \(default <sweep"),
    ],
)
def test_a_trackers_settings_are_refused_when_the_spec_is_loaded(entry, message):
    with pytest.raises(InvalidArgumentError, match=message):
        parse_tracking([entry])


def test_good_tracker_settings_pass_and_a_spec_file_names_its_bad_one(tmp_path):
    for entry in (
        {"kind": "mlflow", "tracking_uri": "http://mlflow:5000"},
        {"kind": "mlflow", "tracking_uri": "https://mlflow.lab/prefix/"},
        {"kind": "mlflow", "tracking_uri": "http://127.0.0.1:5000"},
        {"kind": "tensorboard", "log_dir": str(tmp_path / "tb")},
        {"kind": "tensorboard", "log_dir": "~/tb"},
    ):
        parse_tracking([entry])
    (tmp_path / "afile").write_text("")
    with pytest.raises(InvalidArgumentError, match=r"log_dir: expected an absolute directory .*afile is a file"):
        parse_tracking([{"kind": "tensorboard", "log_dir": str(tmp_path / "afile")}])
    spec_file = tmp_path / "hpo.yaml"
    spec_file.write_text(
        "name: hpo\ncommand: [true]\ntracking: [tensorboard, {kind: mlflow, tracking_uri: 'htp://mlflow.lab:5000'}]\n"
    )
    with pytest.raises(
        InvalidArgumentError, match=r"hpo.yaml: tracking\[1\].tracking_uri: .*did you mean http://mlflow.lab:5000\?"
    ):
        SweepSpec.from_yaml(str(spec_file))
