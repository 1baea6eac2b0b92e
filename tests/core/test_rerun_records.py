"""A stop never rewrites what an earlier run established (issue 52): run, force_rerun, stop, plain re-run, checked
on every record, the run's counts, the Sweeps view's builder and the leaderboard. No Airflow: the same store
transitions the trial operators call (mark_unfinished on a stop, settle when the stage ends)."""

import io
import json
import os
from pathlib import Path

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec
from airflow_provider_gpusched.core.sweep.results.view import build_sweep_view, outcome_records, plan_record
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
from airflow_provider_gpusched.core.sweep.running.trial_run import mark_unfinished, run_trial
from airflow_provider_gpusched.trial import report

STOP = "stopped by `gpusched queue stop` (GPU 0 is needed)"


def learn(params):
    for step in range(6):
        report(step=step, loss=params["quality"] + 1.0 / (step + 1))
    return {"loss": params["quality"]}


def spec(root):
    return SweepSpec(
        name="rr",
        test_config=[{"quality": [0.1, 0.2, 0.3, 5.0, 0.15]}],
        python_callable=learn,
        objective=Objective("loss", "minimize"),
        results_root=str(root),
        pruning={"rule": "median", "min_trials": 2, "warmup_steps": 1},
    )


def files(session, trial):
    folder = session.store.trial_dir(trial)
    return {
        name: Path(os.path.join(folder, name)).read_bytes()
        for name in sorted(os.listdir(folder))
        if name != "claim.lock"
    }


def ran_then_forced(tmp_path):
    """The sweep run once (r1: 3 succeeded, 2 pruned), then planned again with force_rerun (r2): (session, r2's
    manifest)."""
    session = SweepSession(spec(tmp_path))
    first = session.prepare(run="r1")
    for t in first.pending:
        run_trial(first, t, out=io.StringIO())
    return session, session.prepare(run="r2", force_rerun=True)


def view_of(session, manifest, run):
    plan = plan_record(
        "rr",
        "grid",
        None,
        session.spec.objective,
        "local",
        "rr.trial",
        None,
        manifest.trials,
        manifest.pending,
        session.store,
        [manifest.trial(i) for i in manifest.record.skipped],
        run,
    )
    outcomes = {
        o["trial_id"]: o for o in outcome_records(session.store, manifest.pending, run, manifest.record.planned_at)
    }
    return build_sweep_view([plan], outcomes, {("rr.trial", i): "failed" for i in range(len(manifest.pending))})


def test_run_force_rerun_stop_and_plain_rerun_keep_every_earlier_outcome(tmp_path):
    session = SweepSession(spec(tmp_path))
    first = session.prepare(run="r1")
    for t in first.pending:
        run_trial(first, t, out=io.StringIO())
    summary = session.collect("r1")
    assert summary["counts"]["succeeded"] == 3 and summary["counts"]["pruned"] == 2
    by_q = {t.params["quality"]: t for t in first.trials}
    before = {q: files(session, t) for q, t in by_q.items()}
    best = json.loads(Path(tmp_path / "rr" / "best.json").read_text())
    board = json.loads(Path(tmp_path / "rr" / "leaderboard.json").read_text())
    assert best["score"] == 0.1 and len(board["leaderboard"]) == 3

    # a forced re-run starts two trials (one that had succeeded, one that had been pruned) and is stopped
    second = session.prepare(run="r2", force_rerun=True)
    assert len(second.pending) == 5
    started = [second.trial(by_q[0.2].trial_id), second.trial(by_q[5.0].trial_id)]
    for trial in started:  # what the trial runner does first; the stop then kills it before it records anything
        session.store.mark_running(trial, run="r2", log="output.log")
        with open(os.path.join(session.store.trial_dir(trial), "reports.jsonl"), "a") as fh:
            fh.write('{"step": 0, "loss": 9}\n')
    lines = mark_unfinished(second, second.pending, STOP, state="stopped")
    assert len(lines) == 2 and all("its earlier outcome" in line for line in lines), lines
    assert session.settle(None, "r2") == 0

    # every record is as run 1 left it, but for the note on the two whose re-run was stopped
    for q, trial in by_q.items():
        now = files(session, trial)
        if trial.trial_id not in {t.trial_id for t in started}:
            assert now == before[q], q  # byte for byte: not started in run 2, nothing written
            continue
        status = json.loads(now.pop("status.json"))
        old = json.loads(before[q]["status.json"])
        interrupted = status.pop("interrupted")
        assert status == old, q  # state, outcome, run id, times: run 1's
        assert interrupted["run"] == "r2" and interrupted["state"] == "stopped" and STOP in interrupted["reason"]
        assert now.pop("reports.interrupted.jsonl") == b'{"step": 0, "loss": 9}\n'  # the stopped re-run's curve
        assert {k: v for k, v in now.items()} == {k: v for k, v in before[q].items() if k != "status.json"}
    assert json.loads(Path(tmp_path / "rr" / "best.json").read_text()) == best

    # run 2's counts and view say what run 2 did: two stopped, three not started, no success of its own
    summary2 = session.collect("r2")
    counts = summary2["counts"]
    assert (counts["stopped"], counts["not_started"], counts["succeeded"], counts["pruned"], counts["failed"]) == (
        2,
        3,
        0,
        0,
        0,
    ), counts
    assert counts["skipped"] == 0
    assert json.loads(Path(tmp_path / "rr" / "best.json").read_text()) == best  # the sweep's best and leaderboard stand
    now_board = json.loads(Path(tmp_path / "rr" / "leaderboard.json").read_text())
    noted = [row.pop("interrupted") for row in now_board["leaderboard"]]  # the stopped re-run noted on its trial
    assert [n["run"] if n else None for n in noted] == [None, None, "r2"]  # 0.1, 0.15, then 0.2 (re-run stopped)
    assert all(row.pop("interrupted") is None for row in board["leaderboard"])
    assert now_board == board  # the same rows, scores and ranks
    view = view_of(session, second, "r2")
    assert view["counts"]["stopped"] == 2 and view["counts"]["not_started"] == 3 and view["counts"]["succeeded"] == 0
    assert view["best"] is None and view["leaderboard"] == []  # run 2 established no result
    rows = {r["trial_id"]: r for r in view["problems"]}
    assert rows == {}  # a stop is not a failure: nothing counts against max_failed_trials

    # the next plain run skips every trial that still stands: succeeded and pruned alike, none re-run
    third = session.prepare(run="r3")
    assert third.pending == [] and len(third.record.skipped) == 5
    view3 = view_of(session, third, "r3")
    assert view3["counts"]["skipped"] == 5 and view3["best"]["score"] == 0.1


def test_a_stop_marks_a_started_trial_without_an_earlier_outcome_stopped_and_leaves_the_rest_waiting(tmp_path):
    session = SweepSession(spec(tmp_path))
    manifest = session.prepare(run="r1")
    one, *rest = manifest.pending
    session.store.mark_running(one, run="r1", log="output.log")
    lines = mark_unfinished(manifest, manifest.pending, STOP, state="stopped")
    assert lines == [f"trial {one.index} {one.label} marked stopped: {STOP}"]
    assert session.store.state(one) == "stopped" and all(session.store.status(t) is None for t in rest)
    counts = session.collect("r1")["counts"]
    assert (counts["stopped"], counts["not_started"], counts["failed"]) == (1, 4, 0)
    again = session.prepare(run="r2")  # a stopped trial runs again, like one never started
    assert len(again.pending) == 5


def test_a_trial_running_for_another_run_is_not_ended_by_this_one(tmp_path):
    session = SweepSession(spec(tmp_path))
    a = session.prepare(run="a")
    b = session.prepare(run="b")
    trial = a.pending[0]
    session.store.mark_running(trial, run="a", log="output.log")  # its runner died: run a's to settle
    assert mark_unfinished(b, b.pending[:1], "the trial's task failed: no GPU", state="failed") == []
    assert session.settle(None, "b") == 0 and session.store.state(trial) == "running"
    assert session.settle(None, "a") == 1 and session.store.state(trial) == "failed"


def test_a_re_run_that_fails_on_its_own_replaces_the_earlier_outcome(tmp_path):
    session, second = ran_then_forced(tmp_path)
    trial = second.pending[0]
    session.store.mark_running(trial, run="r2")
    session.store.mark_finished(trial, ok=False, exit_code=1, error="exit code 1")  # the re-run's own outcome
    status = session.store.status(trial)
    assert status["state"] == "failed" and status["run"] == "r2" and "previous" not in status
    assert not os.path.exists(os.path.join(session.store.trial_dir(trial), "result.previous.json"))
    assert session.collect("r2")["counts"]["failed"] == 1


def test_a_forced_re_run_whose_runner_dies_keeps_the_earlier_outcome_through_a_retry_and_the_settle(tmp_path):
    session, second = ran_then_forced(tmp_path)
    trial = second.pending[0]
    before = session.store.status(trial)
    result = session.store.result(trial)
    session.store.mark_running(trial, run="r2")  # try 1: its runner is killed (no outcome, no claim)
    session.store.mark_running(trial, run="r2")  # try 2 (an Airflow retry, or a cleared task): killed as well
    assert session.store.status(trial)["previous"]["state"] == "succeeded"  # still the one kept aside
    assert session.settle(None, "r2") == 1
    status = session.store.status(trial)
    interrupted = status.pop("interrupted")
    assert status == before and session.store.result(trial) == result
    assert interrupted["state"] == "failed" and "runner stopped" in interrupted["reason"]
    counts = session.collect("r2")["counts"]
    assert counts["failed"] == 1 and counts["not_started"] == 4  # run 2's own story: its one re-run died
    assert json.loads(Path(tmp_path / "rr" / "best.json").read_text())["score"] == 0.1


def test_a_forced_re_run_that_times_out_records_its_own_outcome(tmp_path):
    session, second = ran_then_forced(tmp_path)
    trial = second.pending[0]
    session.store.mark_running(trial, run="r2")
    assert mark_unfinished(second, [trial], "reached its time limit", state="timeout") == [
        f"trial {trial.index} {trial.label} marked timeout: reached its time limit"
    ]
    status = session.store.status(trial)
    assert status["state"] == "timeout" and status["run"] == "r2" and "previous" not in status


def test_the_end_report_of_a_stopped_re_run_says_it_was_stopped_and_lists_no_earlier_failure(tmp_path):
    from airflow_provider_gpusched.core.sweep.results.end_report import build_end_report

    session = SweepSession(
        SweepSpec(
            name="rr",
            test_config=[{"quality": [0.1, 0.2, -1.0]}],
            python_callable=learn_or_fail,
            objective=Objective("loss", "minimize"),
            results_root=str(tmp_path),
            max_failed_trials=None,
        )
    )
    first = session.prepare(run="r1")
    for t in first.pending:
        run_trial(first, t, out=io.StringIO())
    session.collect("r1")
    report = build_end_report(session.store.dir, run="r1")
    assert [f["label"] for f in report.failures] == ["quality=-1"] and not report.ok
    second = session.prepare(run="r2", force_rerun=True)
    session.store.mark_running(second.pending[0], run="r2")
    mark_unfinished(second, second.pending, STOP, state="stopped")
    session.collect("r2")
    report = build_end_report(session.store.dir, run="r2")
    assert report.subject == "[gpusched] sweep rr was stopped: 1 stopped, 2 not started"
    assert report.failures == [] and not report.ok  # run 1's failure is run 1's


def learn_or_fail(params):
    if params["quality"] < 0:
        raise ValueError("negative quality")
    return learn(params)


def test_a_trial_another_run_stopped_is_run_here_not_taken_over(tmp_path):
    session = SweepSession(spec(tmp_path))
    a = session.prepare(run="a")
    b = session.prepare(run="b")
    trial = a.pending[0]
    session.store.mark_running(trial, run="a")
    mark_unfinished(a, [trial], STOP, state="stopped")
    assert session.store.state(trial) == "stopped"
    assert run_trial(b, b.trial(trial.trial_id), out=io.StringIO()) == 0  # b runs it: stopped is no outcome
    status = session.store.status(trial)
    assert status["state"] == "succeeded" and status["run"] == "b"
