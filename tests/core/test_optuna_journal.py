"""A search in rounds (``search: optuna``) whose journal was moved aside: the study is rebuilt from the trial records,
so the re-run replays its rounds without running a finished trial again, and the sampler goes on from every trial."""

import io
import json
import os

import pytest

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, uniform
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
from airflow_provider_gpusched.core.sweep.running.trial_run import run_trial

optuna = pytest.importorskip("optuna")


def spec(root, rounds=3):
    return SweepSpec(
        name="opt",
        search="optuna",
        space={"x": uniform(-4, 4)},
        rounds=rounds,
        per_round=3,
        seed=3,
        python_callable=lambda p: {"y": -((p["x"] - 1) ** 2)},
        objective=Objective("y"),
        results_root=str(root),
    )


def study(root):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    journal = JournalFileBackend(str(root / "opt" / "search" / "optuna.journal"))
    return optuna.load_study(study_name="opt", storage=JournalStorage(journal))


def attempts(root):
    out = {}
    for folder in os.listdir(root / "opt" / "trials"):
        status = json.loads((root / "opt" / "trials" / folder / "status.json").read_text())
        out[status["trial_id"]] = status.get("attempts", 1)
    return out


def test_rounds_rerun_after_the_journal_is_moved_aside_run_no_finished_trial_again(tmp_path, caplog):
    """Rounds 0 and 1 ran; round 2 was asked and one of its trials ran when the run died; then the journal was moved
    aside. The re-run rebuilds the study from the 7 finished trials, replays the rounds (nothing finished runs again),
    runs round 2's other two and tells the study them too (their proposals carry the old study's numbers), and a
    further round proposes points none of the nine."""
    first = SweepSession(spec(tmp_path))
    for r in range(2):
        manifest = first.prepare(round_no=r)
        for t in manifest.pending:
            run_trial(manifest, t, out=io.StringIO())
        first.finish_round(r)
    manifest = first.prepare(round_no=2)
    run_trial(manifest, manifest.pending[0], out=io.StringIO())  # (the run dies here)
    journal = tmp_path / "opt" / "search" / "optuna.journal"
    journal.rename(f"{journal}.bad")

    again = SweepSession(spec(tmp_path, rounds=4))
    with caplog.at_level("WARNING", logger="airflow_provider_gpusched.core.sweep.searches.optuna"):
        plans = [again.prepare(round_no=0)]
    assert "rebuilt 7 trial(s) from their records" in caplog.text
    again.finish_round(0)
    plans.append(again.prepare(round_no=1))
    again.finish_round(1)
    plans.append(again.prepare(round_no=2))
    assert [len(p.pending) for p in plans] == [0, 0, 2]  # only the two round 2 never ran
    for t in plans[2].pending:
        run_trial(plans[2], t, out=io.StringIO())
    again.finish_round(2)
    trials = study(tmp_path).trials
    assert len(trials) == 9 and all(t.state.name == "COMPLETE" for t in trials)
    assert sum(1 for t in trials if t.user_attrs.get("rebuilt_from_records")) == 9  # 7 rebuilt, 2 added as told
    assert set(attempts(tmp_path).values()) == {1}  # no trial ran twice
    last = again.prepare(round_no=3)
    assert len(last.pending) == 3 and not {t.trial_id for t in last.trials} & set(attempts(tmp_path))
    assert len(again.collect()["leaderboard"]) == 9  # every finished trial is ranked (round 3 has not run)
