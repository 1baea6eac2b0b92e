"""The core of the UI's views, without Airflow: Slurm durations, the Slurm job view and its cached live poll,
output tails bounded to a root, the sweep view from plan/outcome records and task states, running leases in GPU
time."""

from __future__ import annotations

import os
import re

import pytest

from airflow_provider_gpusched.core.board import build_board, read_gpu_time_record, read_lease_record
from airflow_provider_gpusched.core.safe_files import BadRecordError, read_tail
from airflow_provider_gpusched.core.slurm.client import jobcomp_elapsed
from airflow_provider_gpusched.core.slurm.job_view import (
    CachedStatuses,
    job_record,
    job_view,
    read_job_record,
)
from airflow_provider_gpusched.core.slurm.states import JobPhase, JobStatus, aggregate_array, parse_duration
from airflow_provider_gpusched.core.sweep.results.view import build_sweep_view, read_outcome_records, read_plan_record


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0:05", 5.0),
        ("2:03", 123.0),
        ("1:02:03", 3723.0),
        ("1-02:03:04", 93784.0),
        ("2-03", 2 * 86400 + 3 * 3600.0),
        ("7", 7.0),
        ("INVALID", None),
        ("", None),
        ("N/A", None),
        ("1:2:3:4", None),
        ("x-01:00", None),
    ],
)
def test_slurm_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_completion_record_elapsed_and_an_array_takes_its_longest_task():
    assert jobcomp_elapsed({"StartTime": "2026-11-22T22:37:58", "EndTime": "2026-11-22T22:38:00"}) == 2.0
    assert jobcomp_elapsed({"StartTime": "Unknown", "EndTime": "2026-11-22T22:38:00"}) is None
    tasks = {
        f"9_{i}": JobStatus(f"9_{i}", JobPhase.SUCCEEDED, "COMPLETED", exit_code=0, elapsed=float(i), nodes="n1")
        for i in range(3)
    }
    assert aggregate_array("9", tasks, 3).elapsed == 2.0


def test_job_view_from_records_and_live_state():
    submitted = job_record(
        "41", output_path="/o/41.out", runner={"host": "login", "user": "me", "port": 22}, submitted=10.0
    )
    assert submitted["via"] == "me@login:22" and "runner" not in submitted and not submitted["final"]
    view = job_view(read_job_record(submitted, "x"))
    assert view["state"] == "SUBMITTED" and view["tails"] == {} and view["source"] == "recorded at submission"
    live = JobStatus(
        "41", JobPhase.RUNNING, "RUNNING", nodes="n3", partition="gpu", restarts=1, elapsed=65.0, source="squeue"
    )
    view = job_view(submitted, live)
    assert (view["state"], view["nodes"], view["requeues"], view["elapsed"]) == ("RUNNING", "n3", 1, 65.0)
    tasks = {
        f"41_{i}": JobStatus(
            f"41_{i}",
            JobPhase.SUCCEEDED,
            "COMPLETED",
            exit_code=0,
            nodes=f"n{i}",
            partition="gpu",
            array_task_id=str(i),
        )
        for i in (1, 0)
    }
    final = job_record(
        "41",
        output_path="/o/41_%a.out",
        runner={},
        array="0-1",
        status=aggregate_array("41", tasks, 2),
        tail="ok\n",
        tail_path="/o/41_0.out",
    )
    view = job_view(read_job_record(final, "x"), live)  # a final record wins over a stale live state
    assert view["state"] == "COMPLETED" and view["nodes"] == "n0,n1" and view["partition"] == "gpu"
    assert [t["task"] for t in view["tasks"]] == ["0", "1"] and view["tails"] == {"": "ok\n"}


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"job_id": "1; rm"}, "job_id"),
        ({"via": 3}, "via"),
        ({"final": "yes"}, "final"),
        ({"status": {"phase": "?"}}, "status"),
    ],
)
def test_a_bad_job_record_is_refused_naming_the_key(change, key):
    with pytest.raises(BadRecordError, match=f"'{key}'"):
        read_job_record({**job_record("5", output_path="", runner={}), **change}, "XCom of t")


def test_tails_are_read_only_under_the_root(tmp_path):
    root = tmp_path / "out"
    root.mkdir()
    (root / "1.out").write_text("".join(f"line {i}\n" for i in range(100)))
    (tmp_path / "secret").write_text("password\n")
    os.symlink(tmp_path / "secret", root / "link.out")
    assert read_tail(str(root / "1.out"), str(root), 3) == "line 97\nline 98\nline 99"
    assert read_tail(str(tmp_path / "secret"), str(root)) is None
    assert read_tail(str(root / ".." / "secret"), str(root)) is None
    assert read_tail(str(root / "link.out"), str(root)) is None
    assert read_tail(str(root / "missing.out"), str(root)) is None


def test_live_states_come_from_one_cached_poll_per_cluster():
    now = [0.0]
    asked = []

    class Client:
        def statuses(self, ids):
            asked.append(list(ids))
            return {i: JobStatus(i, JobPhase.RUNNING, "RUNNING") for i in ids}

    cache = CachedStatuses(ttl=10, clock=lambda: now[0])
    for _page in range(5):  # five open pages of job 1
        assert cache.get("c", "1", Client).state == "RUNNING"
    now[0] = 1
    cache.get("c", "2", Client)
    assert asked == [["1"], ["1", "2"]]  # job 2's poll refreshed job 1 too
    now[0] = 5
    cache.get("c", "1", Client)
    assert len(asked) == 2
    now[0] = 300  # nobody asked for job 2 since: it is dropped
    cache.get("c", "1", Client)
    assert asked[-1] == ["1"] and cache.polls == 3


def plan(**change):
    record = {
        "sweep": "s",
        "search": "grid",
        "round": None,
        "backend": "local",
        "trial_task": "s.trial",
        "chunk_size": None,
        "run": "r1",
        "objective": {"metric": "acc", "mode": "maximize"},
        "defined": 5,
        "trials": [
            {"index": i, "trial_id": f"t{i}", "label": f"x={i}", "params": {"x": i, "opt": {"lr": i / 10}}}
            for i in range(5)
        ],
        "pending": ["t1", "t2", "t3", "t4"],
        "skipped": [{"trial_id": "t0", "result": {"acc": 0.5}}],
    }
    return read_plan_record({**record, **change}, "plan")


def test_sweep_view_counts_and_ranks_from_outcomes_and_task_states():
    outcomes = {
        o["trial_id"]: o
        for o in read_outcome_records(
            [
                {"trial_id": "t1", "state": "succeeded", "result": {"acc": 0.9}, "seconds": 2.0, "error": None},
                {"trial_id": "t2", "state": "invalid", "result": {"acc": None}, "seconds": 1.0, "error": "acc is None"},
            ],
            "outcomes",
        )
    }
    states = {("s.trial", 1): "success", ("s.trial", 2): "running", ("s.trial", 3): "deferred"}  # t2, t3, t4
    view = build_sweep_view([plan()], outcomes, states)
    c = view["counts"]
    assert (c["defined"], c["succeeded"], c["skipped"], c["invalid"], c["running"], c["waiting"]) == (5, 2, 1, 1, 1, 1)
    assert [(r["trial_id"], r["task_id"], r["map_index"]) for r in view["leaderboard"]] == [
        ("t1", "s.trial", 0),
        ("t0", None, None),
    ]  # the skipped trial ran in an earlier run: no task here
    assert view["best"]["score"] == 0.9 and view["numeric_params"] == ["opt.lr", "x"]
    assert [p["state"] for p in view["problems"]] == ["invalid"]


def test_a_stopped_runs_view_counts_what_never_started_as_not_started():
    """Issue 76: a stopped run's view counted "waiting 20" for the trials that would never start."""
    outcomes = {
        o["trial_id"]: o
        for o in read_outcome_records(
            [{"trial_id": "t1", "state": "stopped", "result": None, "seconds": 2.0, "error": "stopped"}], "outcomes"
        )
    }
    states = {("s.trial", 0): "failed", ("s.trial", 1): None, ("s.trial", 2): "scheduled"}  # t1, t2, t3 (t4: none)
    live = build_sweep_view([plan()], outcomes, states)["counts"]
    assert (live["waiting"], live["not_started"], live["stopped"]) == (3, 0, 1)  # the run goes on: they may start
    ended = build_sweep_view([plan()], outcomes, states, run_ended=True)
    c = ended["counts"]
    assert (c["waiting"], c["not_started"], c["stopped"], c["skipped"]) == (0, 3, 1, 1), c
    grown = plan(defined=8)  # (an asynchronous search's plan: trials whose parameters no worker published)
    assert build_sweep_view([grown], outcomes, states, run_ended=True)["counts"]["not_started"] == 6


def test_a_two_metric_sweep_view_shows_fronts_values_and_the_points_on_the_front():
    objective = {"metric": ["acc", "ms"], "mode": ["maximize", "minimize"]}
    outcomes = {
        o["trial_id"]: o
        for o in read_outcome_records(
            [
                {
                    "trial_id": f"t{i}",
                    "state": "succeeded",
                    "result": {"acc": acc, "ms": ms},
                    "seconds": 1.0,
                    "error": None,
                }
                for i, (acc, ms) in [(1, (0.9, 9)), (2, (0.8, 4)), (3, (0.7, 5)), (4, (0.95, 20))]
            ],
            "outcomes",
        )
    }
    view = build_sweep_view(
        [plan(objective=objective, skipped=[{"trial_id": "t0", "result": {"acc": 0.5}}])], outcomes, {}
    )
    assert view["objective"]["describe"] == "maximize acc, minimize ms" and view["objective"]["several"]
    assert [(r["trial_id"], r["front"], r["values"]) for r in view["leaderboard"]] == [
        ("t4", 1, {"acc": 0.95, "ms": 20.0}),
        ("t1", 1, {"acc": 0.9, "ms": 9.0}),
        ("t2", 1, {"acc": 0.8, "ms": 4.0}),
        ("t3", 2, {"acc": 0.7, "ms": 5.0}),
    ]  # t0's result has no 'ms': not ranked
    assert {p["index"]: p["front"] for p in view["points"]} == {1: True, 2: True, 3: False, 4: True}
    weighted = build_sweep_view([plan(objective={**objective, "weights": [1, 0.01]})], outcomes, {})
    assert weighted["objective"]["score_label"] == "weighted sum (+1*acc -0.01*ms)"
    assert [r["trial_id"] for r in weighted["leaderboard"]] == ["t1", "t2", "t4", "t3"]  # 0.81, 0.76, 0.75, 0.65


def test_the_view_draws_report_curves_running_trials_first_and_lists_their_latest_report(tmp_path):
    from airflow_provider_gpusched.core.sweep.records.reports import read_reports
    from airflow_provider_gpusched.core.sweep.results.view import MAX_CURVE_POINTS, report_paths

    record = plan(folder=str(tmp_path / "s"), curve_metric="loss")
    paths = report_paths([record])
    assert paths["t1"] == str(tmp_path / "s" / "trials" / "x=1.t1" / "reports.jsonl")
    curves = {
        "t1": [{"step": s, "metrics": {"loss": 1 / (s + 1)}} for s in range(500)],
        "t2": [
            {"step": 0, "metrics": {"loss": 2.0}},
            {"step": 1, "metrics": {"loss": None, "acc": 1}},
            {"step": 2, "metrics": {"loss": 1.5}, "checkpoint": "ckpt/2.pt"},
        ],
        "t3": [],
    }
    asked = []

    def read(trial_id):
        asked.append(trial_id)
        return curves.get(trial_id)

    states = {("s.trial", 0): "success", ("s.trial", 1): "running", ("s.trial", 2): "running"}
    outcomes = {"t1": {"trial_id": "t1", "state": "succeeded", "result": {"acc": 0.9}, "seconds": 1, "error": None}}
    view = build_sweep_view([record], outcomes, states, reports=read)
    assert view["curve_metric"] == "loss"
    assert [(c["index"], c["state"]) for c in view["curves"]] == [(2, "running"), (1, "succeeded")]
    assert asked[:2] == ["t2", "t3"]  # running trials are read first
    assert view["curves"][0]["points"] == [[0, 2.0], [2, 1.5]]  # a missing value is no point
    long = view["curves"][1]["points"]
    assert len(long) == MAX_CURVE_POINTS and long[0] == [0, 1.0] and long[-1] == [499, 1 / 500]
    assert view["latest_reports"] == [
        {
            "index": 2,
            "label": "x=2",
            "step": 2,
            "metrics": {"loss": 1.5},
            "checkpoint": "ckpt/2.pt",
            "task_id": "s.trial",
            "map_index": 1,
        }
    ]
    # without a reader (or an old plan without a folder) there are no curves
    assert build_sweep_view([plan()], outcomes, states)["curves"] == []
    # the reader refuses a path outside the root, and a symbolic link inside it
    (tmp_path / "s" / "trials" / "x=1.t1").mkdir(parents=True)
    (tmp_path / "secret").write_text('{"step": 0, "loss": 1}\n')
    (tmp_path / "s" / "trials" / "x=1.t1" / "reports.jsonl").symlink_to(tmp_path / "secret")
    assert read_reports(paths["t1"], str(tmp_path / "s"))[0] == []
    assert read_reports(str(tmp_path / "secret"), str(tmp_path / "s")) == (
        [],
        [f"{tmp_path / 'secret'}: not under {tmp_path / 's'}"],
    )
    assert read_reports(str(tmp_path / "secret"), str(tmp_path))[0] == [{"step": 0, "metrics": {"loss": 1}}]


def test_batched_trials_map_to_their_chunk_and_a_silent_failed_task_says_so():
    view = build_sweep_view(
        [plan(chunk_size=2, trial_task="s.run_batch")],
        {},
        {("s.run_batch", 0): "running", ("s.run_batch", 1): "failed"},
    )
    rows = {p["index"]: p for p in view["problems"]}
    assert view["counts"]["running"] == 2 and set(rows) == {3, 4}
    assert rows[3]["map_index"] == 1 and "published no outcome" in rows[3]["error"]


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"trial_task": ""}, "trial_task"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"objective": {"metric": "a", "mode": "up"}}, "objective"),
        ({"trials": [{"index": "0"}]}, "trials[0].index"),
        ({"pending": [1]}, "pending[0]"),
    ],
)
def test_a_bad_plan_record_is_refused_naming_the_key(change, key):
    with pytest.raises(BadRecordError, match=re.escape(f"'{key}'")):
        plan(**change)


def test_running_leases_count_in_gpu_time_and_published_gpu_time_is_checked():
    lease = read_lease_record(
        {
            "host": "h",
            "lease_id": "l",
            "gpus": [0, 1],
            "memory": {},
            "whole": True,
            "job_class": "idle",
            "started": 900.0,
            "dag_id": "d",
            "run_id": "r",
            "task_id": "t",
        },
        "x",
    )
    board = build_board(
        [lease],
        ledger=[read_gpu_time_record({"job_class": "idle", "gpu_seconds": 7.0, "preemptions": 2}, "y", ended=950.0)],
        now=1000.0,
    )
    idle = board["gpu_time"]["hour"]["idle"]
    assert idle["gpu_seconds"] == 7.0 + 2 * 100.0 and idle["running"] == 1 and idle["preemptions"] == 2
    with pytest.raises(BadRecordError, match="gpu_seconds"):
        read_gpu_time_record({"job_class": "idle", "gpu_seconds": -1}, "y", ended=1.0)


def test_a_rerun_shows_skipped_trials_as_they_ended_and_lists_pruned_ones_with_their_step():
    """Issue 29: a re-run skipped 1 succeeded and 1 pruned trial; the view counts them as such (not 2 succeeded),
    draws the pruned trial's curve as pruned, and lists it with the step it stopped at and why."""
    skipped = [
        {"trial_id": "t0", "result": {"acc": 0.5}, "state": "succeeded", "run": "r0"},
        {
            "trial_id": "t1",
            "result": None,
            "state": "pruned",
            "error": "median stopping at step 3: ...",
            "step": 3,
            "run": "r0",
        },
    ]
    record = plan(pending=["t2", "t3", "t4"], skipped=skipped, curve_metric="acc", folder="/results/s")
    outcomes = {
        "t2": {"trial_id": "t2", "state": "pruned", "result": None, "seconds": 1, "error": "ASHA at step 1", "step": 1}
    }
    curves = {
        t: [{"step": 0, "metrics": {"acc": 0.1}}, {"step": 1, "metrics": {"acc": 0.2}}] for t in ("t0", "t1", "t2")
    }
    view = build_sweep_view([record], outcomes, {}, reports=curves.get)
    c = view["counts"]
    assert (c["succeeded"], c["pruned"], c["skipped"], c["waiting"]) == (1, 2, 2, 2), c
    assert {x["index"]: x["state"] for x in view["curves"]} == {0: "succeeded", 1: "pruned", 2: "pruned"}
    assert [(p["index"], p["step"], p["skipped"], p["task_id"]) for p in view["pruned"]] == [
        (1, 3, True, None),
        (2, 1, False, "s.trial"),
    ]
    assert view["pruned"][0]["error"].startswith("median stopping at step 3")
    assert [r["trial_id"] for r in view["leaderboard"]] == ["t0"]  # a pruned trial is never ranked
    # the curve each trial draws: this run's, or for a skipped trial the run that did it
    from airflow_provider_gpusched.core.sweep.results.view import report_runs

    assert report_runs([record], "r1") == {"t0": "r0", "t1": "r0", "t2": "r1", "t3": "r1", "t4": "r1"}
    with pytest.raises(BadRecordError, match=re.escape("'skipped[0].state'")):
        plan(skipped=[{"trial_id": "t0", "result": None, "state": "failed"}])
    with pytest.raises(BadRecordError, match="key 'step'"):
        read_outcome_records([{"trial_id": "t1", "state": "pruned", "step": "3"}], "outcomes")


def test_parameter_scales_and_categorical_parameters_for_the_plots():
    """lr from a loguniform space is drawn on a log axis; a grid list spanning 100x or more is too; strings get a
    plot of their own (one strip per value); a constant gets none."""
    trials = [
        {"index": i, "trial_id": f"t{i}", "label": f"t{i}", "params": p}
        for i, p in enumerate(
            [
                {"lr": 1e-4, "wd": 0.1, "grid_lr": 0.1, "opt": "sgd", "flag": True, "width": 64, "fixed": "a"},
                {"lr": 3e-3, "wd": 0.2, "grid_lr": 0.01, "opt": "adam", "flag": False, "width": 128, "fixed": "a"},
                {"lr": 1e-2, "wd": 0.3, "grid_lr": 0.001, "opt": "sgd", "flag": True, "width": 256, "fixed": "a"},
            ]
        )
    ]
    record = plan(trials=trials, pending=["t0", "t1", "t2"], skipped=[], defined=3, log_params=["lr"])
    outcomes = {
        f"t{i}": {"trial_id": f"t{i}", "state": "succeeded", "result": {"acc": i / 10}, "seconds": 1, "error": None}
        for i in range(3)
    }
    view = build_sweep_view([record], outcomes, {})
    assert view["param_scales"] == {"grid_lr": "log", "lr": "log", "wd": "linear", "width": "linear"}
    assert view["categorical_params"] == {"flag": ["false", "true"], "opt": ["adam", "sgd"]}
    assert view["points"][1]["categories"] == {"opt": "adam", "flag": "false", "fixed": "a"}
    with pytest.raises(BadRecordError, match="'log_params'"):
        plan(log_params="lr")


def test_a_runs_curve_is_its_own_after_a_later_run_ran_the_trial_again(tmp_path):
    """reports.jsonl belongs to the run in status.json; the run before keeps its curve in reports.previous.jsonl;
    any older run gets no curve (never a later run's)."""
    from airflow_provider_gpusched.core.sweep import Objective, SweepSpec
    from airflow_provider_gpusched.core.sweep.records.reports import reports_of_run
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession

    session = SweepSession(
        SweepSpec(
            name="curves",
            test_config=[{"x": [1]}],
            python_callable=lambda p: {"y": 1},
            objective=Objective("y"),
            results_root=str(tmp_path),
        )
    )
    (trial,) = session.spec.trials()
    store = session.store
    path = os.path.join(store.trial_dir(trial), "reports.jsonl")
    for run, steps in (("run A", 3), ("run B", 5)):
        store.mark_running(trial, run=run)
        with open(path, "a") as fh:
            fh.writelines(f'{{"step": {s}, "loss": {s}}}\n' for s in range(steps))
        store.mark_finished(trial, ok=True)
    assert store.status(trial)["previous_run"] == "run A"
    assert len(reports_of_run(path, "run B", str(tmp_path))[0]) == 5
    assert len(reports_of_run(path, "run A", str(tmp_path))[0]) == 3
    assert reports_of_run(path, "run 0", str(tmp_path)) == (
        None,
        "ran again in DAG run run B; the curve of this run is not kept",
    )
    assert reports_of_run(path, "run B", str(tmp_path / "elsewhere"))[0] is None  # only under the root


@pytest.mark.heavy  # 0.5 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_the_ui_reads_only_the_newest_part_of_a_huge_reports_file(tmp_path):
    """Issue 30, item 5: a trial with 10^6 report lines: the view reads the newest 512 KiB, not the whole file."""
    from airflow_provider_gpusched.core.sweep.records.reports import UI_REPORTS_BYTES, reports_of_run

    folder = tmp_path / "s" / "trials" / "x=1.t1"
    folder.mkdir(parents=True)
    with open(folder / "reports.jsonl", "w") as fh:
        fh.writelines(f'{{"step": {s}, "loss": {s}}}\n' for s in range(1_000_000))
    found, note = reports_of_run(str(folder / "reports.jsonl"), "r1", str(tmp_path))
    assert note == "" and found[-1]["step"] == 999_999
    assert len(found) < UI_REPORTS_BYTES / 20 < 1_000_000


def test_a_10000_trial_sweep_view_samples_its_points_but_keeps_the_best_and_the_whole_best_so_far_line():
    import json
    import random

    from airflow_provider_gpusched.core.sweep.results.view import MAX_POINTS

    rnd = random.Random(7)
    n = 10_000
    trials = [
        {
            "index": i,
            "trial_id": f"t{i}",
            "label": f"lr={i}",
            "params": {"lr": rnd.random(), "opt": rnd.choice(["sgd", "adam"])},
        }
        for i in range(n)
    ]
    scores = {f"t{i}": rnd.random() for i in range(n)}
    scores["t9999"] = 2.0  # the best trial is the last one: the sample must keep it, the line must reach it
    record = plan(
        defined=n,
        trials=trials,
        pending=[t["trial_id"] for t in trials],
        skipped=[],
        chunk_size=5000,
        trial_task="s.run_batch",
    )
    outcomes = {
        t: {"trial_id": t, "state": "succeeded", "result": {"acc": s}, "seconds": 1.0, "error": None}
        for t, s in scores.items()
    }
    view = build_sweep_view([record], outcomes, {})
    assert view["counts"]["succeeded"] == n and view["points_total"] == n and len(view["points"]) == MAX_POINTS
    shown = {p["index"] for p in view["points"]}
    best_quarter = sorted(range(n), key=lambda i: -scores[f"t{i}"])[: MAX_POINTS // 4]
    assert set(best_quarter) <= shown  # the best region drawn whole
    assert [p["index"] for p in view["points"]] == sorted(shown)  # in trial order
    rest = sorted(shown - set(best_quarter))
    assert rest[0] < 50 and rest[-1] > n - 50  # the sample spans the whole sweep
    line = view["best_so_far"]
    assert line[-1] == [9999, 2.0] and all(a[1] < b[1] for a, b in zip(line, line[1:], strict=False))
    expected, best = [], None
    for i in range(n):
        if best is None or scores[f"t{i}"] > best:
            best = scores[f"t{i}"]
            expected.append([i, best])
    assert line == expected  # over every trial, not the sample
    assert "show 2,000 of 10,000 scored trials" in view["points_note"]
    assert view["leaderboard"][0]["trial_id"] == "t9999" and view["categorical_params"] == {"opt": ["adam", "sgd"]}
    # uniform(0, 1) draws reach 1e-4 and below, yet spread evenly: a linear axis (a log one squeezed them right)
    assert view["param_scales"] == {"lr": "linear"}
    assert len(json.dumps(view)) < 1_000_000


def test_a_small_sweep_view_shows_every_point():
    outcomes = {
        f"t{i}": {"trial_id": f"t{i}", "state": "succeeded", "result": {"acc": a}, "seconds": 1.0, "error": None}
        for i, a in ((1, 0.4), (2, 0.7), (3, 0.6))
    }
    view = build_sweep_view([plan()], outcomes, {})
    assert [(p["index"], p["score"]) for p in view["points"]] == [(0, 0.5), (1, 0.4), (2, 0.7), (3, 0.6)]
    assert view["points_total"] == 4 and "points_note" not in view
    assert view["best_so_far"] == [[0, 0.5], [2, 0.7], [3, 0.7]]  # improvements, then on to the last trial


def test_a_large_pbt_population_draws_every_members_curve_past_the_curve_cap():
    """8 members over 10 generations are 80 trials, more than the MAX_CURVES curves the reports plot draws: the
    population reads every member trial's curve (up to MAX_REPORT_READS, said when more)."""
    from airflow_provider_gpusched.core.sweep.results.view import MAX_CURVES

    members, generations = 8, 10
    trials = [
        {"index": i, "trial_id": f"t{i}", "label": f"m{i % members}", "params": {"lr": 0.1}}
        for i in range(members * generations)
    ]
    record = plan(
        search="pbt",
        trials=trials,
        pending=[t["trial_id"] for t in trials],
        skipped=[],
        defined=len(trials),
        folder="/nowhere",
        curve_metric="score",
    )
    lineage = {
        "members": [
            [
                {
                    "member": k,
                    "generation": g,
                    "step": 2 * (g + 1),
                    "hyper": {"lr": 0.1},
                    "from": None,
                    "score": g / 10,
                    "trial_id": f"t{g * members + k}",
                }
                for g in range(generations)
            ]
            for k in range(members)
        ],
        "exploits": [],
    }
    outcomes = {
        t["trial_id"]: {
            "trial_id": t["trial_id"],
            "state": "succeeded",
            "result": {"acc": 1},
            "seconds": 1,
            "error": None,
        }
        for t in trials
    }

    def read(trial_id):  # trial g*8+k reports steps 2g+1 and 2g+2
        g = int(trial_id[1:]) // members
        return [{"step": s, "metrics": {"score": s / 100}} for s in (2 * g + 1, 2 * g + 2)]

    view = build_sweep_view([record], outcomes, {}, reports=read, lineage=lineage)
    assert len(view["curves"]) == MAX_CURVES < len(trials)
    population = view["population"]
    assert [len(m["curve"]) for m in population["members"]] == [2 * generations] * members
    assert "population_note" not in view
