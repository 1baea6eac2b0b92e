"""The tracking engine (core/tracking/sync.py) and the ``tracking`` setting, with a recording callback: what a sweep
folder records becomes each callback's events once, in order, resumed where a failure stopped it; docs/development.md's
worked callback runs as written."""

import json
import os
import re
import time
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
from airflow_provider_gpusched.core.tracking import TrackingCallback, TrackingSync, parse_tracking
from airflow_provider_gpusched.core.tracking.config import merge_default
from tests.tracking_helpers import FakeSweep

DOC = Path(__file__).resolve().parents[2] / "docs" / "development.md"


class Recorder(TrackingCallback):
    name = "recorder"

    def __init__(self, fail_on=None):
        self.events, self.fail_on = [], fail_on

    def _event(self, *event):
        if self.fail_on is not None and self.fail_on(event):
            raise ConnectionError(f"tracker down at {event[0]}")
        self.events.append(event)

    def on_trial_start(self, trial):
        trial.memo.setdefault("starts", 0)
        trial.memo["starts"] += 1
        self._event("start", trial.label, dict(trial.params), trial.sweep.run)

    def on_trial_report(self, trial, report):
        self._event("report", trial.label, report.step, dict(report.metrics))

    def on_trial_end(self, trial, end):
        self._event(
            "end", trial.label, end.state, end.score, dict(end.metrics), [os.path.basename(f) for f in end.files]
        )

    def on_sweep_end(self, sweep, summary):
        self._event("sweep_end", sweep.run, summary["counts"]["succeeded"])


def sync(sweep, callback, **kwargs):
    kwargs.setdefault("score", sweep.spec.objective.score)
    options = {k: kwargs.pop(k) for k in ("score", "retry_after", "budget", "log") if k in kwargs}
    return TrackingSync(sweep.sweep_run(), [callback], **options).sync(**kwargs)


def test_every_attempt_is_told_start_reports_end_once_then_the_sweep_end(tmp_path):
    sweep = FakeSweep(tmp_path)
    sweep.run_all(steps=2)
    rec = Recorder()
    outcome = sync(sweep, rec, final=True, summary=sweep.summary())
    labels = [t.label for t in sweep.trials]
    assert [e[0] for e in rec.events] == ["start", "report", "report", "end"] * 3 + ["sweep_end"]
    for i, label in enumerate(labels):
        start, r0, r1, end = [e for e in rec.events if e[1] == label]  # in order, a trial at a time
        assert rec.events.index(end) - rec.events.index(start) == 3
        assert start[1] == label and start[2] == {"lr": sweep.trials[i].params["lr"], "opt": "sgd"}
        assert (r0[2], r1[2]) == (0, 1) and r1[3] == {"loss": pytest.approx(1 / (2 + i)), "acc": 0.6}
        assert end[2:4] == ("succeeded", pytest.approx(0.7 + 0.05 * i))
        assert end[4] == {"acc": pytest.approx(0.7 + 0.05 * i), "extra.flops": 10.0 * (i + 1)}
        assert end[5] == ["output.log", "result.json"]
    assert rec.events[-1] == ("sweep_end", "run-1", 3)
    assert outcome.callbacks["recorder"].told == 13
    again = Recorder()
    assert sync(sweep, again, final=True, summary=sweep.summary()).callbacks["recorder"].told == 0
    assert again.events == []


def test_a_running_trial_is_told_as_it_goes_and_its_memo_is_kept(tmp_path):
    sweep = FakeSweep(tmp_path, lrs=(0.1,))
    sweep.start(0)
    sweep.report(0, 0, loss=1.0)
    rec = Recorder()
    sync(sweep, rec)
    assert [e[0] for e in rec.events] == ["start", "report"]
    sweep.report(0, 1, loss=0.5)
    sweep.finish(0, result={"acc": 0.9})
    rec2 = Recorder()
    sync(sweep, rec2)
    assert [e[:3] for e in rec2.events] == [
        ("report", sweep.trials[0].label, 1),
        ("end", sweep.trials[0].label, "succeeded"),
    ]
    cursor = json.loads(next((Path(sweep.store.dir) / "tracking" / "recorder" / "trials").iterdir()).read_text())
    (attempt,) = cursor["attempts"].values()
    assert attempt["memo"] == {"starts": 1} and attempt["reports"] == 2 and attempt["ended"]


def test_a_failing_tracker_resumes_where_it_stopped_and_says_so_once(tmp_path):
    sweep = FakeSweep(tmp_path)
    sweep.run_all(steps=1)
    said = []
    down = Recorder(fail_on=lambda e: e[0] == "end" and e[1] == sweep.trials[1].label)
    out = sync(sweep, down, final=True, summary=sweep.summary(), log=said.append)
    assert out.callbacks["recorder"].error.startswith(f"the end of trial {sweep.trials[1].label}: ConnectionError")
    assert [e[0] for e in down.events] == ["start", "report", "end", "start", "report"]
    assert len(said) == 1 and "Nothing is lost" in said[0] and "gpusched sweep track trk" in said[0]
    # a trial task's sync while it is down: skipped without trying (retry_after), said nowhere
    assert "failing since" in sync(sweep, down, log=said.append).callbacks["recorder"].skipped and len(said) == 1
    up = Recorder()
    out = sync(sweep, up, final=True, summary=sweep.summary(), log=said.append)
    told_before = {e[1] for e in down.events if e[0] == "end"}
    assert up.events[0][:2] == ("end", sweep.trials[1].label) and up.events[-1][0] == "sweep_end"
    assert sorted(e[1] for e in up.events if e[0] == "end") == sorted(
        t.label for t in sweep.trials if t.label not in told_before
    )
    assert out.callbacks["recorder"].error is None
    assert len(said) == 2 and "works again" in said[1]
    assert not (Path(sweep.store.dir) / "tracking" / "recorder" / "health.json").exists()


def test_a_slow_tracker_gets_at_most_its_budget_in_a_trial_tasks_sync(tmp_path):
    sweep = FakeSweep(tmp_path)
    sweep.run_all(steps=0)

    class Slow(Recorder):
        def on_trial_start(self, trial):
            time.sleep(0.3)
            super().on_trial_start(trial)

    slow = Slow()
    t0 = time.monotonic()
    out = sync(sweep, slow, budget=0.2)
    assert time.monotonic() - t0 < 1.5
    # the first trial told whole, then the budget was spent: the others wait for the next sync
    assert out.callbacks["recorder"].pending and [e[0] for e in slow.events] == ["start", "end"]
    rest = Recorder()
    sync(sweep, rest, final=True)
    assert [e[0] for e in rest.events] == ["start", "end", "start", "end"]
    assert {e[1] for e in rest.events + slow.events} == {t.label for t in sweep.trials}


def test_a_run_never_tells_another_runs_attempts_and_a_rerun_is_a_new_attempt(tmp_path):
    first = FakeSweep(tmp_path, lrs=(0.1,))
    first.run_all(steps=1)
    rec = Recorder()
    sync(first, rec, final=True)
    second = FakeSweep(tmp_path, lrs=(0.1,), run="run-2")
    other = Recorder()
    sync(second, other, final=True)
    assert other.events == []  # the trial's record is run-1's
    second.run_all(steps=1)
    sync(second, other, final=True)
    assert [(e[0], e[-1] if e[0] == "start" else None) for e in other.events][0] == ("start", "run-2")
    assert [e[0] for e in other.events] == ["start", "report", "end"]


def test_a_broken_cursor_is_named_not_silently_resent(tmp_path):
    sweep = FakeSweep(tmp_path, lrs=(0.1,))
    sweep.run_all(steps=1)
    sync(sweep, Recorder(), final=True)
    cursor = next((Path(sweep.store.dir) / "tracking" / "recorder" / "trials").iterdir())
    cursor.write_text("[1, 2")
    with pytest.raises(GpuschedError, match=rf"tracking record {re.escape(str(cursor))}: not valid JSON"):
        sync(sweep, Recorder(), final=True)


def test_tracking_settings_are_checked_naming_the_key(tmp_path):
    assert [c.to_dict() for c in parse_tracking(["mlflow", {"kind": "tensorboard"}])] == [
        {"kind": "mlflow"},
        {"kind": "tensorboard"},
    ]
    bad = [
        ({"kind": "mlflw"}, r"tracking\[0\].kind: expected one of mlflow, tensorboard, wandb, got 'mlflw'"),
        ({"kind": "mlflow", "experment": "x"}, r"tracking\[0\].experment: expected one of the mlflow settings"),
        ({"kind": "mlflow", "timeout": 0}, r"tracking\[0\].timeout: expected seconds from 0 to 120"),
        ({"kind": "wandb", "mode": "cloud"}, r"tracking\[0\].mode: expected 'offline'"),
        ({"callback": "nocolon"}, r"tracking\[0\].callback: expected 'package.module:Class'"),
        ({"kind": "mlflow", "callback": "a:b"}, r"tracking\[0\]: expected exactly one of kind"),
        (3, r"tracking\[0\]: expected a tracker's name"),
    ]
    for entry, message in bad:
        with pytest.raises(InvalidArgumentError, match=message):
            parse_tracking([entry])
    with pytest.raises(InvalidArgumentError, match=r"each tracker once \(mlflow is listed 2 times\)"):
        parse_tracking(["mlflow", {"kind": "mlflow", "experiment": "e"}])
    spec_file = tmp_path / "hpo.yaml"
    spec_file.write_text("name: hpo\ncommand: [true]\ntracking: [{kind: tensorboard, log_dir: 7}]\n")
    with pytest.raises(InvalidArgumentError, match=r"hpo.yaml: tracking\[0\].log_dir: expected a directory"):
        SweepSpec.from_yaml(str(spec_file))
    assert [c.kind for c in merge_default(parse_tracking(["mlflow"]), "mlflow, tensorboard")] == [
        "mlflow",
        "tensorboard",
    ]


def test_a_callback_target_that_is_not_a_tracking_callback_is_refused(tmp_path):
    (config,) = parse_tracking([{"callback": "os.path:join"}])
    with pytest.raises(InvalidArgumentError, match=r"tracking\[0\]: expected a TrackingCallback subclass"):
        config.build(str(tmp_path))
    (config,) = parse_tracking([{"callback": "no_such_module_x:Cb"}])
    with pytest.raises(InvalidArgumentError, match=r"an importable TrackingCallback"):
        config.build(str(tmp_path))


def test_mlflow_without_a_server_says_where_to_set_one(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (config,) = parse_tracking(["mlflow"])
    with pytest.raises(
        GpuschedError, match="no server: set tracking_uri in the spec, the Airflow connection mlflow_default"
    ):
        config.build(str(tmp_path))
    with pytest.raises(InvalidArgumentError, match=r"tracking\[0\].tracking_uri: expected an MLflow tracking server"):
        parse_tracking([{"kind": "mlflow", "tracking_uri": "file:///tmp/mlruns"}])  # refused when the spec loads
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "file:///tmp/mlruns")  # the environment's: when the sync starts
    with pytest.raises(GpuschedError, match=r"\(\$MLFLOW_TRACKING_URI\) 'file:///tmp/mlruns': expected an MLflow"):
        config.build(str(tmp_path))


def _doc_callback():
    text = DOC.read_text()
    section = text[text.index("## Adding a tracking callback") :]
    section = section[: section.index("\n## ", 3)]
    code, spec_yaml = (
        re.findall(r"```python\n(.*?)```", section, re.S)[0],
        re.findall(r"```yaml\n(.*?)```", section, re.S)[0],
    )
    return code, spec_yaml


def test_the_development_guides_callback_runs_as_written(tmp_path, monkeypatch):
    """docs/development.md "Adding a tracking callback": its module, as a file of a package on the path, named by the
    page's spec, writes one CSV row per trial end."""
    code, spec_yaml = _doc_callback()
    package = tmp_path / "pkgs" / "my_lab"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tracking.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    import yaml

    entries = yaml.safe_load(spec_yaml)["tracking"]
    sweep = FakeSweep(tmp_path / "sweeps", tracking=entries)
    sweep.run_all(steps=1)
    callbacks = [c.build(sweep.store.dir) for c in sweep.spec.tracking]
    TrackingSync(sweep.sweep_run(), callbacks, score=sweep.spec.objective.score).sync(final=True)
    import csv

    with open(Path(sweep.store.dir) / "trials.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["trial", "label", "state", "score", "seconds"]
    assert sorted(r[1] for r in rows[1:]) == sorted(t.label for t in sweep.trials)
    assert [r[2] for r in rows[1:]] == ["succeeded"] * 3
    assert sorted(float(r[3]) for r in rows[1:]) == pytest.approx([0.7, 0.75, 0.8])


def test_a_tracker_failing_at_its_setup_or_the_sweeps_end_is_told_it_again_next_time(tmp_path):
    sweep = FakeSweep(tmp_path, lrs=(0.1,))
    sweep.run_all(steps=1)

    class SetupFails(Recorder):
        def setup(self, sweep_run):
            raise OSError("no disk")

    said = []
    out = sync(sweep, SetupFails(), final=True, summary=sweep.summary(), log=said.append)
    assert out.callbacks["recorder"].error == "the setup: OSError: no disk" and len(said) == 1
    end_fails = Recorder(fail_on=lambda e: e[0] == "sweep_end")
    out = sync(sweep, end_fails, final=True, summary=sweep.summary(), log=said.append)
    assert out.callbacks["recorder"].error.startswith("the sweep's end: ConnectionError")
    assert [e[0] for e in end_fails.events] == ["start", "report", "end"]
    up = Recorder()
    sync(sweep, up, final=True, summary=sweep.summary(), log=said.append)
    assert [e[0] for e in up.events] == ["sweep_end"] and "works again" in said[-1]
