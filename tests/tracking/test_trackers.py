"""TensorBoard and W&B callbacks read back with those tools' own readers, and optuna-dashboard serving a sweep's
Optuna journal over HTTP (the real package, a real process)."""

import glob
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.tracking import TrackingSync
from tests.conftest import free_port
from tests.tracking_helpers import FakeSweep, read_wandb_run

pytestmark = pytest.mark.heavy  # TensorBoard, W&B (its service process) and optuna-dashboard: seconds of CPU each

REPO = Path(__file__).resolve().parents[2]


def tracked(tmp_path, kind, **settings):
    sweep = FakeSweep(tmp_path, name=f"trk_{kind}", tracking=[{"kind": kind, **settings}])
    sweep.run_all(steps=3)
    sweep.finish(2, state="pruned", result={"acc": 0.55})  # the last trial: pruned
    callbacks = [c.build(sweep.store.dir) for c in sweep.spec.tracking]
    outcome = TrackingSync(sweep.sweep_run(), callbacks, score=sweep.spec.objective.score).sync(
        final=True, summary=sweep.summary()
    )
    assert outcome.callbacks[kind].error is None, outcome.describe()
    return sweep


def test_tensorboard_scalars_and_one_hparams_table(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    sweep = tracked(tmp_path, "tensorboard")
    root = Path(sweep.store.dir) / "tensorboard" / "run-1"
    experiment = EventAccumulator(str(root))
    experiment.Reload()
    (content,) = experiment.PluginTagToContent("hparams").values()
    data = plugin_data_pb2.HParamsPluginData.FromString(content)
    assert sorted(h.name for h in data.experiment.hparam_infos) == ["lr", "opt"]
    assert {m.name.tag for m in data.experiment.metric_infos} >= {"loss", "acc", "result/acc", "result/score"}
    rows = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        acc = EventAccumulator(str(folder))
        acc.Reload()
        (content,) = acc.PluginTagToContent("hparams").values()
        start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
        lr = start.hparams["lr"].number_value
        rows[lr] = {
            "opt": start.hparams["opt"].string_value,
            "loss": [(e.step, round(e.value, 6)) for e in acc.Scalars("loss")],
            "result": [e.value for e in acc.Scalars("result/acc")],
            "score": [e.value for e in acc.Scalars("result/score")] if "result/score" in acc.Tags()["scalars"] else [],
        }
    assert sorted(rows) == pytest.approx(sorted(t.params["lr"] for t in sweep.trials))
    for i, trial in enumerate(sweep.trials):
        row = rows[trial.params["lr"]]
        assert row["opt"] == "sgd"
        assert row["loss"] == [(s, round(1.0 / (s + 1 + i), 6)) for s in range(3)]
    pruned = rows[sweep.trials[2].params["lr"]]
    assert pruned["result"] == pytest.approx([0.55]) and pruned["score"] == []  # a pruned trial has no score
    assert rows[sweep.trials[0].params["lr"]]["score"] == pytest.approx([0.7])


def test_wandb_offline_runs_carry_config_history_and_summary(tmp_path):
    sweep = tracked(tmp_path, "wandb")
    files = glob.glob(os.path.join(sweep.store.dir, "wandb", "wandb", "offline-run-*", "run-*.wandb"))
    runs = {}
    for path in files:
        run = read_wandb_run(path)
        runs[run["run"].display_name] = run
    assert sorted(runs) == sorted(t.label for t in sweep.trials)
    for i, trial in enumerate(sweep.trials):
        run = runs[trial.label]
        assert run["run"].run_group == "trk_wandb/run-1" and run["run"].job_type == "trial"
        assert run["config"]["lr"] == trial.params["lr"] and run["config"]["opt"] == "sgd"
        assert [(step, round(items["loss"], 6)) for step, items in run["history"]] == [
            (s, round(1.0 / (s + 1 + i), 6)) for s in range(3)
        ]
        assert run["summary"]["trial_id"] == trial.trial_id and run["summary"]["airflow/dag_id"] == "dag-1"
    assert runs[sweep.trials[0].label]["summary"]["state"] == "succeeded"
    assert runs[sweep.trials[0].label]["summary"]["score"] == pytest.approx(0.7)
    assert runs[sweep.trials[0].label]["exit"] == 0
    assert runs[sweep.trials[2].label]["summary"]["state"] == "pruned"


def test_gpusched_sweep_dashboard_serves_the_sweeps_optuna_journal(tmp_path):
    from airflow_provider_gpusched.core.sweep import loguniform
    from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession

    spec = SweepSpec(
        name="dash",
        search="optuna",
        rounds=2,
        per_round=3,
        space={"lr": loguniform(1e-4, 1e-1), "opt": ["sgd", "adam"]},
        command=["true"],
        objective={"metric": "acc", "mode": "maximize"},
    )
    session = SweepSession(spec, str(tmp_path))
    manifest = session.prepare(0, None, run="r1")  # the real search asks its study for round 0
    for i, trial in enumerate(manifest.trials):
        session.store.mark_running(trial, run="r1")
        session.store.mark_finished(trial, ok=True, result={"acc": 0.5 + 0.1 * i})
    session.finish_round(0, "r1")
    journal = Path(session.store.dir) / "search" / "optuna.journal"
    before = journal.read_bytes()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "airflow_provider_gpusched.cli", "sweep", "dashboard", "dash"]
        + ["--results-root", str(tmp_path), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    try:
        deadline, studies = time.monotonic() + 60, None
        while studies is None:
            assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
            assert time.monotonic() < deadline, "optuna-dashboard did not answer in 60 s"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=2) as r:
                    studies = json.load(r)["study_summaries"]
            except OSError:
                time.sleep(0.3)
        (study,) = studies
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies/{study['study_id']}", timeout=10) as r:
            detail = json.load(r)
        assert study["study_name"] == "dash" and study["directions"] == ["maximize"]
        values = sorted(t["values"][0] for t in detail["trials"] if t["state"] == "Complete")
        assert values == pytest.approx([0.5, 0.6, 0.7])
        assert {p["name"] for t in detail["trials"] for p in t["params"]} == {"lr", "opt"}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/dashboard", timeout=10) as r:
            assert r.status == 200 and b"<html" in r.read(2000).lower()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert journal.read_bytes() == before  # served as it is: nothing written to it


def test_the_dashboard_says_what_is_missing(tmp_path):
    from tests.cli import gpusched

    sweep = FakeSweep(tmp_path, name="grid_only")
    sweep.run_all(steps=0)
    out = gpusched("sweep", "dashboard", "grid_only", "--results-root", str(tmp_path))
    assert (
        out.returncode == 2 and "optuna.journal: no Optuna journal; only search: optuna sweeps keep one" in out.stderr
    )
    assert sweep.store.dir in out.stderr
