"""Asynchronous search (core/sweep/running/asynchronous.py): workers ask one shared Optuna study for their next trial the
moment a slot frees. Real trial runner processes on simulated GPUs (no GPU here), a real journal file."""

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.sweep import EvolutionSettings, Objective, SweepSpec, uniform
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
from airflow_provider_gpusched.core.sweep.running.terminal import run_sweep

optuna = pytest.importorskip("optuna")

#: a command trial: 6 steps of a curve whose level is set by x; trials with x > 0 sleep longer per step, so the
#: slots free at different times (what a round would wait for)
TRAIN = (
    "import json, os, sys, time; p = json.loads(os.environ['GPUSCHED_TRIAL_PARAMS']); "
    "d = os.environ['GPUSCHED_TRIAL_DIR']\n"
    "from airflow_provider_gpusched.trial import report\n"
    "for s in range(1, 7):\n"
    "    time.sleep(0.15 if p['x'] > 0 else 0.02); report(step=s, y=-(p['x'] - 1) ** 2 * (1 + 1 / s))\n"
    "json.dump({'y': -(p['x'] - 1) ** 2}, open(os.path.join(d, 'result.json'), 'w'))"
)


#: TRAIN whose slow trials (x > 0) also wait, up to 60 s, until a fourth trial of the run has begun. Only a freed slot
#: that takes the next trial at once lets them go on: behind a round barrier they would wait the whole minute and end
#: after the fourth trial's start. (Timing the slow trials against the fast ones alone failed on a loaded machine,
#: where a trial process's start-up outweighed the 0.8 s between them.)
TRAIN_UNTIL_A_FOURTH_BEGINS = TRAIN.replace(
    "from airflow_provider_gpusched.trial import report\n",
    "from airflow_provider_gpusched.trial import report\n"
    "began = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(d))), 'began')\n"
    "os.makedirs(began, exist_ok=True); open(os.path.join(began, os.path.basename(d)), 'w').close()\n"
    "deadline = time.monotonic() + 60\n"
    "while p['x'] > 0 and len(os.listdir(began)) < 4 and time.monotonic() < deadline:\n"
    "    time.sleep(0.05)\n",
)
assert TRAIN_UNTIL_A_FOURTH_BEGINS != TRAIN


def spec(root, **kw):
    settings = dict(
        name="asy",
        search="optuna",
        asynchronous=True,
        count=8,
        per_round=3,
        seed=1,
        space={"x": uniform(-4, 4)},
        command=[sys.executable, "-c", TRAIN],
        objective=Objective("y"),
        results_root=str(root),
    )
    settings.update(kw)
    return SweepSpec(**settings)


def manager(root, gpus="3x24GiB"):
    return LeaseManager(SimulatedInventory(gpus), str(root / "leases"))


def study(root, name="asy"):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    journal = JournalFileBackend(str(root / name / "search" / "optuna.journal"))
    return optuna.load_study(study_name=name, storage=JournalStorage(journal))


def statuses(root, name="asy"):
    out = {}
    trials = root / name / "trials"
    for folder in os.listdir(trials):
        path = trials / folder / "status.json"
        if path.exists():
            status = json.loads(path.read_text())
            out[status["trial_id"]] = {**status, "folder_name": folder}
    return out


@pytest.mark.heavy  # worker processes sharing a study: 2.8 s of CPU
def test_workers_share_one_study_and_a_freed_slot_takes_the_next_trial_at_once(tmp_path):
    """8 trials on 3 slots, with Optuna's Hyperband pruner judging in the study itself: every trial of the study is
    a trial of the sweep, run once and told once; trials start while slower ones of the first three still run."""
    pruning = {"rule": "optuna", "pruner": "hyperband", "options": {"min_resource": 1, "max_resource": 6}}
    command = [sys.executable, "-c", TRAIN_UNTIL_A_FOURTH_BEGINS]
    summary = run_sweep(
        spec(tmp_path, pruning=pruning, command=command), manager=manager(tmp_path), progress=False, run="r1"
    )
    counts = summary["counts"]
    assert counts["defined"] == 8 and counts["succeeded"] + counts["pruned"] == 8, counts
    assert len(os.listdir(tmp_path / "began")) == 8  # (every trial ran the waiting command)
    s = study(tmp_path)
    assert Counter(t.state.name for t in s.trials) == Counter(
        {"COMPLETE": counts["succeeded"], "PRUNED": counts["pruned"]}
    )
    assert sorted(t.user_attrs["index"] for t in s.trials) == list(range(8))
    records = statuses(tmp_path)
    assert {t.user_attrs["trial_id"] for t in s.trials} == set(records)
    for t in s.trials:  # the study's values are the trials' own results
        record = records[t.user_attrs["trial_id"]]
        assert t.user_attrs["folder"] == record["folder_name"]
        if t.state.name == "COMPLETE":
            result = json.loads((tmp_path / "asy" / "trials" / t.user_attrs["folder"] / "result.json").read_text())
            assert t.value == pytest.approx(result["y"])
            assert sorted(t.intermediate_values) == list(range(1, 7))  # the whole curve reached the study
    # no barrier: the 4th trial started before the last of the first three ended (the slow ones waited for it, and
    # would have waited a minute and ended after it behind a barrier)
    index = {t.user_attrs["trial_id"]: t.user_attrs["index"] for t in s.trials}
    by_index = sorted(records.values(), key=lambda r: index[r["trial_id"]])
    first_x = sorted(t.params["x"] for t in s.trials if t.user_attrs["index"] < 3)
    assert first_x[0] <= 0 < first_x[-1]  # (the seed's first three: a slow trial and a fast one)
    assert by_index[3]["started"] < max(r["ended"] for r in by_index[:3])
    # the pruner that decided is Optuna's, in the study
    for record in records.values():
        if record["state"] == "pruned":
            assert "HyperbandPruner in the sweep's study" in record["error"]


def drive(root, run, **kw):
    """One run of the search in this process, as a worker pool does it without processes: hand out, record the
    trial's result in the store as its runner would, tell; returns the run's summary."""
    session = SweepSession(spec(root, **kw), str(root))
    searching = session.asynchronous(run)
    searching.plan()
    while (trial := searching.next_trial("w")) is not None:
        session.store.mark_running(trial, run=run)
        result = {"y": -((trial.params["x"] - 1) ** 2)}
        session.store.mark_finished(trial, ok=True, result=result, exit_code=0)
        assert searching.finish(trial) == "succeeded"
    return session.collect(run)


def test_a_rerun_skips_what_is_done_and_force_rerun_runs_them_again_on_new_study_trials(tmp_path):
    drive(tmp_path, "r1", count=4)
    first = {t.user_attrs["trial_id"]: t.params for t in study(tmp_path).trials}
    again = drive(tmp_path, "r2", count=4)
    assert again["counts"]["skipped"] == 4 and len(study(tmp_path).trials) == 4  # nothing asked, nothing run
    more = drive(tmp_path, "r3", count=6)
    assert more["counts"]["skipped"] == 4 and more["counts"]["succeeded"] == 6
    forced = drive(tmp_path, "r4", count=6, force_rerun=True)
    assert forced["counts"]["succeeded"] == 6 and forced["counts"]["skipped"] == 0
    trials = study(tmp_path).trials
    assert len(trials) == 12 and all(t.state.name == "COMPLETE" for t in trials)  # 6 + the 6 run again
    assert {tid: p for tid, p in ((t.user_attrs["trial_id"], t.params) for t in trials) if tid in first} == first
    assert {s["run"] for s in statuses(tmp_path).values()} == {"r4"}
    assert len(forced["leaderboard"]) == 6


@pytest.mark.heavy  # 0.9 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_a_killed_run_resumes_its_trials_on_the_same_study_trials(tmp_path):
    """A worker that dies after taking trials leaves them RUNNING in the study without an outcome (one had started:
    ``running`` in the store): the next run plans them first and runs them on the same study trials; the study ends
    with count trials, none lost or doubled."""
    session = SweepSession(spec(tmp_path, count=3), str(tmp_path))
    dead = session.asynchronous("r1")
    dead.plan()
    taken = [dead.next_trial("w1"), dead.next_trial("w2")]
    session.store.mark_running(taken[1], run="r1")
    numbers = {t.user_attrs["trial_id"]: t.number for t in study(tmp_path).trials}
    assert [numbers[t.trial_id] for t in taken] == [0, 1]
    # (the worker dies here)
    summary = run_sweep(spec(tmp_path, count=3), manager=manager(tmp_path), progress=False, run="r2")
    assert summary["counts"]["succeeded"] == 3 and summary["counts"]["skipped"] == 0
    trials = study(tmp_path).trials
    assert len(trials) == 3 and all(t.state.name == "COMPLETE" for t in trials)
    assert {t.user_attrs["trial_id"]: t.number for t in trials if t.number < 2} == {
        t.trial_id: numbers[t.trial_id] for t in taken
    }
    assert all(s["run"] == "r2" for s in statuses(tmp_path).values())


HAND_OUT = """
import json, sys
sys.path.insert(0, sys.argv[3])
from test_async_search import spec
from pathlib import Path
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
run = SweepSession(spec(Path(sys.argv[1]), count=12), sys.argv[1]).asynchronous("r1")
got = []
while (trial := run.next_trial(sys.argv[2])) is not None:
    got.append(trial.trial_id)
print(json.dumps(got))
"""


@pytest.mark.heavy  # 2.5 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_processes_handing_out_trials_at_once_never_get_the_same_one(tmp_path):
    SweepSession(spec(tmp_path, count=12), str(tmp_path)).asynchronous("r1").plan()
    here = os.path.dirname(os.path.abspath(__file__))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", HAND_OUT, str(tmp_path), f"w{i}", here], stdout=subprocess.PIPE, text=True
        )
        for i in range(3)
    ]
    got = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    handed = [tid for ids in got for tid in ids]
    assert len(handed) == 12 == len(set(handed))
    s = study(tmp_path)
    assert len(s.trials) == 12 and {t.user_attrs["trial_id"] for t in s.trials} == set(handed)
    manifest = SweepSession(spec(tmp_path, count=12), str(tmp_path)).manifest(None, "r1")
    assert [t.trial_id for t in manifest.trials] == [t.user_attrs["trial_id"] for t in s.trials]


@pytest.mark.heavy  # 1.2 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
@pytest.mark.parametrize("sampler", ["tpe", "cmaes", "random", "nsga2"])
def test_every_sampler_runs_asynchronously(tmp_path, sampler):
    """(``gp``, which imports PyTorch here: tests/core/test_async_search_gp.py, with the other PyTorch tests)"""
    summary = drive(tmp_path, "r1", count=5, per_round=2, sampler=sampler)
    assert summary["counts"]["succeeded"] == 5
    assert len({tuple(t.params.items()) for t in study(tmp_path).trials}) == 5


@pytest.mark.parametrize(
    ("settings", "argument", "expected"),
    [
        ({"search": "evolution", "space": {"x": [1, 2]}}, "asynchronous", "false for search: evolution"),
        ({"asynchronous": False, "count": 5}, "count", "count only with asynchronous: true"),
        (
            {"asynchronous": False, "pruning": {"rule": "optuna", "pruner": "hyperband"}},
            "pruning.pruner",
            "use it with search: optuna and asynchronous: true",
        ),
        (
            {"sampler": "cmaes", "objective": Objective(["a", "b"], ["maximize", "minimize"])},
            "sampler",
            "a multi-objective sampler",
        ),
        ({"sampler": "bayes"}, "sampler", "one of 'tpe', 'gp', 'cmaes', 'random', 'nsga2'"),
        ({"asynchronous": "yes"}, "asynchronous", "true or false"),
        ({"count": 0}, "count", "an integer >= 1"),
    ],
)
def test_bad_asynchronous_settings_are_refused_naming_the_key(tmp_path, settings, argument, expected):
    if settings.get("search") == "evolution":
        settings = {**settings, "evolution": EvolutionSettings()}
    with pytest.raises(InvalidArgumentError) as err:
        spec(tmp_path, **settings)
    assert err.value.argument.endswith(argument), err.value
    assert expected in err.value.expected, err.value


def test_the_preview_says_how_many_trials_and_workers(tmp_path):
    preview = SweepSession(spec(tmp_path, count=9, max_workers=2), str(tmp_path)).preview()
    assert preview["asynchronous"] is True and preview["trials"] == 9 and preview["workers"] == 2
    assert not (tmp_path / "asy" / "search").exists()  # a preview writes nothing


def test_a_backend_that_runs_no_asynchronous_search_refuses_it_by_name(tmp_path):
    from airflow_provider_gpusched.core.backends import Backend, register_backend, unregister_backend
    from airflow_provider_gpusched.core.errors import GpuschedError

    class InRounds(Backend):
        name = "in_rounds"

    register_backend(InRounds)
    try:
        with pytest.raises(GpuschedError, match=r"asynchronous: true runs on.*the in_rounds backend"):
            run_sweep(spec(tmp_path), backend="in_rounds", handle=object(), progress=False)
    finally:
        unregister_backend("in_rounds")
    assert not (tmp_path / "asy").exists()  # refused before anything was planned


def test_a_worker_process_runs_trials_until_none_are_left_and_says_what_it_lacks(tmp_path, capsys):
    """core/sweep/running/worker.py, as a Slurm array task runs it (here in this process): its usage, a plan without the
    spec it asks with, and a plan with it: it runs the trials and tells the study."""
    from airflow_provider_gpusched.core.sweep.running.worker import main

    assert main(["only-one-argument"]) == 2
    assert (
        "usage: python -m airflow_provider_gpusched.core.sweep.running.worker MANIFEST NAME" in capsys.readouterr().err
    )
    session = SweepSession(
        spec(tmp_path, count=2, python_callable=lambda p: {"y": p["x"]}, command=None), str(tmp_path)
    )
    manifest = session.asynchronous("r1").plan()
    saved = tmp_path / "asy" / "search" / "spec.pkl"
    assert oct(saved.stat().st_mode & 0o777) == "0o600"
    saved.rename(tmp_path / "elsewhere.pkl")
    assert main([manifest.path, "w1"]) == 2
    assert f"cannot read the search's spec {saved}" in capsys.readouterr().err
    (tmp_path / "elsewhere.pkl").rename(saved)
    assert main([manifest.path, "w1"]) == 0
    trials = study(tmp_path).trials
    assert len(trials) == 2 and all(t.state.name == "COMPLETE" and t.value == t.params["x"] for t in trials)


@pytest.mark.heavy  # three real batches: 3.4 s of CPU
def test_the_caller_hears_each_trial_a_slot_takes_on_its_own_thread_and_a_slot_failure_is_raised(tmp_path):
    """A task publishes what its slots took (Airflow's calls made from one thread: dag.test's in-process supervisor
    answers a call with its channel removed, so a slot's thread calling at that moment failed the task). on_tick
    runs on the calling thread, woken as soon as a slot takes a trial, not at the next 60 s tick, with each slot
    a worker process running trial after trial (the default) and with a process per trial (a time limit); a slot
    whose search fails ends the batch with that error, not one slot short."""
    import threading

    from airflow_provider_gpusched.core.gpu.placement import GPURequest
    from airflow_provider_gpusched.core.gpu.sweep_batch import run_local_batch

    for name, time_limit, per_process in (("slots", None, 8), ("limited", 600.0, 8), ("one-each", None, 1)):
        session = SweepSession(spec(tmp_path, name=name, count=4), str(tmp_path))
        searching = session.asynchronous("r1")
        manifest = searching.plan()
        taken: list[str] = []
        ticks: list[tuple[bool, list[str]]] = []
        outcome = run_local_batch(
            manifest,
            [],
            manager(tmp_path),
            GPURequest(gpus=1),
            parallel=2,
            on_tick=lambda: ticks.append((threading.current_thread() is threading.main_thread(), list(taken))),  # noqa: B023
            tick_seconds=60.0,
            search=searching,
            worker="w",
            on_taken=lambda trial: taken.append(trial.trial_id),  # noqa: B023 - used within this loop's call
            time_limit=time_limit,
            trials_per_process=per_process,
        )
        assert len(taken) == 4 and sorted(sum(outcome.values(), [])) == sorted(taken), (name, outcome)
        assert sum(len(v) for k, v in outcome.items() if k in ("succeeded", "pruned")) == 4, (name, outcome)
        assert ticks and all(on_main for on_main, _ in ticks), name
        seen = {tid for _, ids in ticks for tid in ids}
        assert set(taken[:3]) <= seen, (name, ticks)  # told while they ran (the 4th may be its slot's last act)
        assert Counter(t.state.name for t in study(tmp_path, name).trials) == Counter(
            {"COMPLETE": len(outcome["succeeded"]), "PRUNED": len(outcome["pruned"])}
        )
        handed = json.loads(next((tmp_path / name / "runs").glob("*/handed.json")).read_text())["handed"]
        assert {e["worker"] for e in handed.values()} == {"w slot 0", "w slot 1"}, name
        logs = sorted(p.name for p in (tmp_path / name / "logs").iterdir())
        if name == "slots":  # one worker process per slot ran its trials, not a process per trial
            assert logs == ["worker-w_slot_0.log", "worker-w_slot_1.log"], logs
        else:
            assert len(logs) == 4 and not any(n.startswith("worker-") for n in logs), logs

    class Broken:
        def next_trial(self, worker="", resume=False):
            raise OSError("the search folder is gone")

        def finish(self, trial):
            raise AssertionError("never reached")

        def taken(self, worker):
            return []

    with pytest.raises(OSError, match="the search folder is gone"):
        run_local_batch(
            manifest, [], manager(tmp_path), GPURequest(gpus=1), parallel=1, search=Broken(), time_limit=600.0
        )


@pytest.mark.heavy  # 1.8 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_a_slot_whose_worker_process_dies_fails_that_trial_once_and_goes_on_with_the_search(tmp_path):
    """A slot's worker process (trial after trial in one process) that dies mid-trial: that trial ends failed,
    saying its runner stopped, the study hears it, and the slot starts a new worker that runs the rest, each
    worker at most trials_per_process."""
    from airflow_provider_gpusched.core.gpu.placement import GPURequest
    from airflow_provider_gpusched.core.gpu.sweep_batch import run_local_batch

    mark = str(tmp_path / "died-once")

    def train(p):
        if not os.path.exists(mark):  # the first trial kills its whole process, as a segfault would
            open(mark, "w").close()
            os._exit(139)
        return {"y": -((p["x"] - 1) ** 2)}

    session = SweepSession(spec(tmp_path, count=4, command=None, python_callable=train), str(tmp_path))
    searching = session.asynchronous("r1")
    events: list[str] = []
    attempts: list[str] = []
    outcome = run_local_batch(
        searching.plan(),
        [],
        manager(tmp_path),
        GPURequest(gpus=1),
        parallel=1,
        trials_per_process=2,
        search=searching,
        worker="w",
        on_event=events.append,
        on_attempt=lambda attempt, label: attempts.append(label),
    )
    assert len(outcome["failed"]) == 1 and len(outcome["succeeded"]) == 3, outcome
    (dead,) = outcome["failed"]
    assert "its runner stopped before recording an outcome" in statuses(tmp_path)[dead]["error"]
    states = Counter(t.state.name for t in study(tmp_path).trials)
    assert states == Counter({"FAIL": 1, "COMPLETE": 3}), states
    assert events[-1] == "4/4 trials done (1 failed)", events
    # three processes ran the four trials: the one that died, one that ran its trials_per_process (2), the last;
    # each is a bar of the GPU timeline named by the trials it ran
    assert [label.split(": ")[0] for label in attempts] == ["w", "w", "w"], attempts
    first = searching.taken("w")[0]
    assert attempts == ["w: trial 0 " + first.label, "w: trials 1-2 (2)", "w: trial 3 " + searching.taken("w")[3].label]
    log = (tmp_path / "asy" / "logs" / "worker-w.log").read_text()
    assert log.count("(id ") == 4, log


def test_a_finished_search_run_again_needs_no_worker(tmp_path):
    """Issue 76: re-running a finished asynchronous sweep ("0 to run") held 4 GPUs for about 40 s while its workers
    found nothing to do. The plan says how many trials are left, and the task group starts that many workers."""
    drive(tmp_path, "r1", count=4)
    session = SweepSession(spec(tmp_path, count=4), str(tmp_path))
    assert session.trials_left(session.prepare(run="r2")) == 0  # done: no worker starts
    grown = SweepSession(spec(tmp_path, count=6), str(tmp_path))
    assert grown.trials_left(grown.prepare(run="r3")) == 2  # two more to ask for: at most two workers
    forced = SweepSession(spec(tmp_path, count=4, force_rerun=True), str(tmp_path))
    assert forced.trials_left(forced.prepare(run="r4")) is None  # every trial again: as many workers as asked


def test_a_corrupted_journal_is_named_with_the_way_forward_and_the_way_forward_works(tmp_path, caplog):
    """A journal line that is not a record (not the last one, which Optuna leaves out when a crash cut it) stops
    the search with the file, the line and what to do, not a raw JSONDecodeError. Doing it (moving the journal aside,
    running again) rebuilds the study from the trial records: no finished trial runs again, they count towards
    ``count`` (one new trial is asked for the fourth), the summary ranks all of them, and the log says so."""
    from airflow_provider_gpusched.core.errors import GpuschedError

    drive(tmp_path, "r1", count=3)
    first = {t.user_attrs["trial_id"]: (t.params, t.value) for t in study(tmp_path).trials}
    journal = tmp_path / "asy" / "search" / "optuna.journal"
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join([*lines[:3], "{not json\n", *lines[3:]]))
    with pytest.raises(GpuschedError) as raised:
        drive(tmp_path, "r2", count=4)
    said = str(raised.value)
    assert said.startswith(f"{journal}: the Optuna study of the sweep cannot be read (line 4): ")
    assert f"mv {journal} {journal}.bad" in said and "run the sweep again" in said
    assert "rebuilds the study from the records" in said and "succeeded or were pruned do not run again" in said
    journal.rename(f"{journal}.bad")
    with caplog.at_level("WARNING", logger="airflow_provider_gpusched.core.sweep.searches.optuna"):
        again = drive(tmp_path, "r3", count=4)
    runs = Counter(s["run"] for s in statuses(tmp_path).values())
    assert runs == {"r1": 3, "r3": 1}  # the three finished trials did not run again; the fourth is new
    assert again["counts"]["skipped"] == 3 and len(again["leaderboard"]) == 4
    trials = study(tmp_path).trials
    assert len(trials) == 4 and all(t.state.name == "COMPLETE" for t in trials)
    rebuilt = {
        t.user_attrs["trial_id"]: (t.params, t.value) for t in trials if t.user_attrs.get("rebuilt_from_records")
    }
    assert rebuilt == first  # the study knows them as the first run told them (TPE learns from them)
    assert sorted(t.user_attrs["index"] for t in trials) == [0, 1, 2, 3]
    assert f"rebuilt 3 trial(s) from their records in {tmp_path / 'asy' / 'trials'}" in caplog.text


def test_a_rebuilt_study_holds_each_trial_as_it_ended_and_names_the_records_it_cannot_read(tmp_path, caplog):
    """The rebuild reads each finished trial's records: a pruned one with its curve, a failed one (which the next run
    runs again), a succeeded one with its value; a trial whose status.json cannot be read is left out and named."""
    drive(tmp_path, "r1", count=4)
    by_id = {t.user_attrs["trial_id"]: t for t in study(tmp_path).trials}
    records = sorted(statuses(tmp_path).values(), key=lambda r: by_id[r["trial_id"]].number)
    folders = [tmp_path / "asy" / "trials" / r["folder_name"] for r in records]

    def restate(folder, state):
        status = json.loads((folder / "status.json").read_text())
        (folder / "status.json").write_text(json.dumps({**status, "state": state}))

    restate(folders[0], "failed")
    restate(folders[1], "pruned")
    (folders[1] / "reports.jsonl").write_text("".join(json.dumps({"step": s, "y": -s}) + "\n" for s in (1, 2)))
    (folders[2] / "status.json").write_text("{not json")
    (tmp_path / "asy" / "search" / "optuna.journal").rename(tmp_path / "moved.journal")
    with caplog.at_level("WARNING", logger="airflow_provider_gpusched.core.sweep.searches.optuna"):
        session = SweepSession(spec(tmp_path, count=4), str(tmp_path))
        plan = session.prepare(run="r2")
    assert "rebuilt 3 trial(s)" in caplog.text and "(1 complete, 1 pruned, 1 failed)" in caplog.text
    assert f"{folders[2].name} (status.json: " in caplog.text  # named, left out
    trials = {t.user_attrs["trial_id"]: t for t in study(tmp_path).trials}
    assert [trials[r["trial_id"]].state.name for r in (records[0], records[1], records[3])] == [
        "FAIL",
        "PRUNED",
        "COMPLETE",
    ]
    assert trials[records[1]["trial_id"]].intermediate_values == {1: -1.0, 2: -2.0}
    assert trials[records[3]["trial_id"]].value == by_id[records[3]["trial_id"]].value
    assert [t.trial_id for t in plan.pending] == [records[0]["trial_id"]]  # the failed one runs again
    assert session.trials_left(plan) == 2  # it, and a new trial in the place of the one left out
