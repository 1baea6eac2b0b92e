"""The end of a terminal run (core/sweep/running/terminal.py's RUN_END hooks): the spec's trackers are sent the run's trials
and summary by core/tracking's hook, which the sweep names by ``module:Class`` and never imports; the spec's
``tracking`` list is parsed by the sweep itself (core/sweep/definition/tracking_settings.py), core/tracking re-exporting it."""

from __future__ import annotations

import sys

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.sweep.running.terminal import RUN_END, RunEndHook
from airflow_provider_gpusched.core.tracking import TrackingCallback

WRITE = (
    "import json, os, sys; json.dump({'y': float(sys.argv[2])}, open(os.path.join(sys.argv[1], 'result.json'), 'w'))"
)
TOLD: list[tuple[str, object]] = []


class Recorder(TrackingCallback):
    """A tracker of the spec's (``callback: tests.core.test_sweep_run_end:Recorder``): what it is told, in TOLD."""

    name = "recorder"

    def on_trial_end(self, trial, end):
        TOLD.append(("trial_end", (trial.label, end.state, end.score)))

    def on_sweep_end(self, sweep, summary):
        TOLD.append(("sweep_end", (sweep.sweep, sweep.run, dict(summary))))


class Listener(RunEndHook):
    """A run-end hook a program registers: told every run."""

    name = "listener"
    calls: list[tuple[object, ...]] = []

    def __call__(self, spec, session, run, summary, say):
        say(f"listener: {spec.name} {run}")
        self.calls.append((spec.name, session.store.dir, run, summary["counts"]["succeeded"]))


def _spec(tracking=None):
    from airflow_provider_gpusched import SweepSpec

    return SweepSpec(
        name="run_end",
        test_config=[{"x": [1, 2]}],
        command=[sys.executable, "-c", WRITE, "{trial_dir}", "{x}"],
        objective={"metric": "y", "mode": "maximize"},
        resources={"gpu_memory": "1GiB"},
        tracking=tracking,
    )


@pytest.fixture
def manager(tmp_path):
    state = tmp_path / "leases"
    state.mkdir(mode=0o700)
    return LeaseManager(SimulatedInventory("1x24GiB"), str(state))


def test_run_sweep_sends_the_specs_trackers_its_trials_and_summary_once_the_run_ended(tmp_path, manager):
    from airflow_provider_gpusched import run_sweep

    TOLD.clear()
    said: list[str] = []
    spec = _spec([{"callback": "tests.core.test_sweep_run_end:Recorder"}])
    summary = run_sweep(
        spec, results_root=str(tmp_path), manager=manager, progress=False, on_event=said.append, run="r1"
    )
    ends = sorted(v for k, v in TOLD if k == "trial_end")
    assert ends == [("x=1", "succeeded", 1.0), ("x=2", "succeeded", 2.0)]
    ((name, run, told),) = [v for k, v in TOLD if k == "sweep_end"]
    assert (name, run) == ("run_end", "r1") and told["counts"] == summary["counts"] and "text" not in told
    assert told["best"]["score"] == 2.0
    assert any(line.startswith("tracking:") for line in said), said  # the send's one line, through on_event


def test_a_spec_without_trackers_sends_nothing_and_a_registered_hook_is_told_every_run(tmp_path, manager):
    from airflow_provider_gpusched import run_sweep

    TOLD.clear()
    Listener.calls.clear()
    said: list[str] = []
    RUN_END.register(Listener)
    try:
        run_sweep(_spec(), results_root=str(tmp_path), manager=manager, progress=False, on_event=said.append, run="r2")
    finally:
        RUN_END.unregister("listener")
    assert TOLD == [] and not any(line.startswith("tracking:") for line in said)
    assert Listener.calls == [("run_end", str(tmp_path / "run_end"), "r2", 2)]
    assert "listener: run_end r2" in said
    assert "listener" not in RUN_END.names()


def test_the_tracking_hook_is_core_trackings_and_the_tracking_names_are_the_sweeps_re_exported():
    from airflow_provider_gpusched.core.sweep import tracking_callback, tracking_settings
    from airflow_provider_gpusched.core.tracking import callback, config
    from airflow_provider_gpusched.core.tracking.run_end import SendToTrackers

    assert RUN_END.names()[0] == "tracking" and RUN_END.get("tracking", "run-end hook") is SendToTrackers
    names = ("TRACKERS", "TrackerConfig", "parse_tracking", "register_tracker", "unregister_tracker")
    for name in (*names, "tracking_uri_problem", "SETTINGS", "SERVER_URL", "ENTRY_POINT_GROUP"):
        assert getattr(config, name) is getattr(tracking_settings, name), name
    for name in ("TrackingCallback", "SweepRun", "TrialRun", "TrialReport", "TrialEnd"):
        assert getattr(callback, name) is getattr(tracking_callback, name), name
    with pytest.raises(InvalidArgumentError, match=r"tracking\[0\]\.kind: expected one of mlflow, tensorboard, wandb"):
        config.parse_tracking(["mlfow"])


class Broken(RunEndHook):
    """A run-end hook of another package that fails."""

    name = "broken"

    def __call__(self, spec, session, run, summary, say):
        raise RuntimeError("its server is down")


def test_a_failing_hook_is_said_and_fails_no_run_and_the_hooks_after_it_still_run(tmp_path, manager):
    """The run's trials have ended: a hook that raises is named in a line, the summary is returned and every other
    hook is told (the review of issue 78: one raised at the end of every terminal run)."""
    from airflow_provider_gpusched import run_sweep

    Listener.calls.clear()
    said: list[str] = []
    RUN_END.register(Broken)
    RUN_END.register(Listener)
    try:
        summary = run_sweep(
            _spec(), results_root=str(tmp_path), manager=manager, progress=False, on_event=said.append, run="r3"
        )
    finally:
        RUN_END.unregister("broken")
        RUN_END.unregister("listener")
    assert summary["counts"]["succeeded"] == 2
    assert "sweep run_end: run-end hook 'broken' failed: its server is down" in said
    assert Listener.calls == [("run_end", str(tmp_path / "run_end"), "r3", 2)]


def test_a_moved_name_whose_new_home_cannot_be_imported_raises_import_error():
    """core/deprecation.moved_names answers an old name with an ImportError when its target fails to import, as
    ``from old import name`` and ``hasattr`` expect."""
    import warnings

    from airflow_provider_gpusched.core.deprecation import moved_names

    getter = moved_names("old.module", {"Gone": "no_such_package_here.mod:Gone"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ImportError, match=r"old\.module\.Gone: "):
            getter("Gone")
    with pytest.raises(AttributeError, match="has no attribute 'Other'"):
        getter("Other")
