"""Running sweeps without Airflow: trial runner, skip-completed/force_rerun, state counts, leaderboard,
batched mode on SIMULATED GPUs, and the searches in rounds (evolution, optuna) with resume."""

import io
import json
import os
import re
import subprocess
import sys
from collections import deque
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.sweep_batch import run_local_batch
from airflow_provider_gpusched.core.sweep import EvolutionSettings, Objective, SweepSpec, uniform
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
from airflow_provider_gpusched.core.sweep.running.trial_run import run_trial

WRITE_RESULT = (
    "import json, os, sys; p = json.loads(os.environ['GPUSCHED_TRIAL_PARAMS']); "
    "open('argv.json', 'w').write(json.dumps(sys.argv[1:])); "
    "sys.exit(3) if p['x'] == 3 else json.dump({'loss': (p['x'] - 2) ** 2}, open('result.json', 'w'))"
)


def command_spec(root, **kw):
    return SweepSpec(
        name="cmd",
        test_config=[{"x": [1, 2, 3, 4], "tag": ["a b;c"]}],
        command=[sys.executable, "-c", WRITE_RESULT, "{x}", "{tag}"],
        objective=Objective("loss", "minimize"),
        results_root=str(root),
        **kw,
    )


def run_cli(manifest, trial):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_provider_gpusched.core.sweep.running.trial_run",
            manifest.path,
            trial.trial_id,
            trial.label,
        ],
        capture_output=True,
        text=True,
    )


@pytest.mark.heavy  # 1.7 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_trials_run_record_results_and_rank_by_the_objective(tmp_path):
    session = SweepSession(command_spec(tmp_path))
    manifest = session.prepare()
    codes = [run_cli(manifest, t).returncode for t in manifest.pending]  # another process: ids must agree
    assert codes == [0, 0, 3, 0]
    folder = session.store.trial_dir(manifest.trials[0])
    assert json.loads(Path(os.path.join(folder, "argv.json")).read_text()) == ["1", "a b;c"]
    assert json.loads(Path(os.path.join(folder, "params.json")).read_text()) == {"x": 1, "tag": "a b;c"}
    summary = session.collect()
    assert summary["counts"] == {
        "defined": 4,
        "waiting": 0,
        "running": 0,
        "succeeded": 3,
        "failed": 1,
        "invalid": 0,
        "timeout": 0,
        "pruned": 0,
        "stopped": 0,
        "skipped": 0,
    }
    assert [r["params"]["x"] for r in summary["leaderboard"]] == [2, 1, 4]
    assert summary["best"]["score"] == 0.0
    assert json.loads(Path(tmp_path / "cmd" / "best.json").read_text())["params"] == {"x": 2, "tag": "a b;c"}
    assert "x=3,tag=a b;c [failed]: exit code 3" in summary["text"]


def test_rerun_skips_succeeded_and_reruns_failed_unless_force_rerun(tmp_path):
    session = SweepSession(command_spec(tmp_path))
    manifest = session.prepare()
    for t in manifest.pending:
        run_trial(manifest, t, out=io.StringIO())
    again = session.prepare()
    assert [t.params["x"] for t in again.pending] == [3]  # only the failed one
    assert len(again.record.skipped) == 3
    counts = session.collect()["counts"]
    assert counts["skipped"] == 3 and counts["failed"] == 1
    forced = SweepSession(command_spec(tmp_path, force_rerun=True)).prepare()
    assert len(forced.pending) == 4 and forced.record.skipped == []
    preview = session.preview()
    assert (preview["would_run"], preview["would_skip"]) == (1, 3)


def test_callable_trials_return_values_and_exceptions(tmp_path):
    def trial(params, trial_dir):
        if params["x"] > 0.9:
            raise ValueError("diverged")
        Path(trial_dir, "ckpt").write_text("x")
        return params["x"]

    spec = SweepSpec(
        name="fn",
        search="random",
        space={"x": uniform(0, 1)},
        count=20,
        seed=2,
        python_callable=trial,
        objective=Objective("acc"),
        results_root=str(tmp_path),
    )
    session = SweepSession(spec)
    manifest = session.prepare()
    for t in manifest.pending:
        run_trial(manifest, t, out=io.StringIO())
    summary = session.collect()
    bad = [t for t in manifest.trials if t.params["x"] > 0.9]
    assert summary["counts"]["failed"] == len(bad) and summary["counts"]["succeeded"] == 20 - len(bad)
    assert summary["best"]["score"] == max(t.params["x"] for t in manifest.trials if t.params["x"] <= 0.9)
    assert session.store.status(bad[0])["error"] == "ValueError: diverged"


def test_trial_folders_stay_under_the_results_root(tmp_path):
    spec = SweepSpec(
        name="evil",
        test_config=[{"name": ["../../x", "/etc", ".."]}],
        command=["true"],
        results_root=str(tmp_path / "root"),
    )
    session = SweepSession(spec)
    for trial in spec.trials():
        folder = session.store.prepare(trial)
        assert os.path.realpath(folder).startswith(str(tmp_path / "root" / "evil" / "trials") + os.sep)


@pytest.mark.heavy
def test_batched_mode_runs_a_thousand_tiny_trials_on_simulated_gpus(tmp_path):
    spec = SweepSpec(
        name="many",
        search="random",
        space={"x": uniform(0, 1)},
        count=1000,
        seed=0,
        python_callable=lambda p: {"y": p["x"]},
        objective=Objective("y"),
        results_root=str(tmp_path),
    )
    session = SweepSession(spec)
    manifest = session.prepare(chunk_size=500)
    assert manifest.chunk_count() == 2
    manager = LeaseManager(SimulatedInventory("4x24GiB"), str(tmp_path / "leases"))
    done = {"succeeded": 0, "failed": 0}
    processes: list[str] = []
    for k in range(2):
        outcome = run_local_batch(
            manifest,
            manifest.chunk(k),
            manager,
            GPURequest(gpu_memory="4GiB"),
            parallel=4,
            on_attempt=lambda _attempt, label: processes.append(label),
        )
        for key in done:
            done[key] += len(outcome[key])
    assert done == {"succeeded": 1000, "failed": 0}
    # trials this short grow their groups past the first 8 (a process start costs more than they do): 1000 trials
    # in well under the 125 processes groups of 8 would start (40 here, idle or with both cores busy: the rule
    # compares two times measured on the same host, so load does not change it)
    assert 10 <= len(processes) <= 60, len(processes)
    assert manager.leases() == []
    summary = session.collect()
    assert summary["counts"]["succeeded"] == 1000
    assert summary["best"]["score"] == max(t.params["x"] for t in manifest.trials)


def test_batched_group_with_a_failing_trial_keeps_the_others(tmp_path):
    session = SweepSession(command_spec(tmp_path))
    manifest = session.prepare()
    manager = LeaseManager(SimulatedInventory("1x24GiB"), str(tmp_path / "leases"))
    outcome = run_local_batch(manifest, manifest.pending, manager, GPURequest(gpus=1), parallel=1, trials_per_process=4)
    assert len(outcome["succeeded"]) == 3 and len(outcome["failed"]) == 1
    assert session.collect()["counts"]["succeeded"] == 3


def nas_spec(root, **kw):
    def measure(p):
        return {"flops": sum(p.values())}

    return SweepSpec(
        name="nas",
        search="evolution",
        space={f"op{i}": [1, 2, 3, 4, 5] for i in range(6)},
        python_callable=lambda p: {"acc": sum(v if v != 5 else 0 for v in p.values())},
        objective=Objective("acc"),
        results_root=str(root),
        seed=kw.pop("seed", 0),
        evolution=EvolutionSettings(
            candidate_pool_size=8,
            candidate_top_k=3,
            num_mutation=4,
            num_crossover=4,
            mutate_prob=0.3,
            max_epoch=6,
            constraints={"flops": 22},
            measure=measure,
        ),
        **kw,
    )


def run_rounds(session, rounds):
    bests = []
    for r in rounds:
        manifest = session.prepare(round_no=r)
        for t in manifest.pending:
            run_trial(manifest, t, out=io.StringIO())
        session.finish_round(r)
        bests.append(session.collect()["best"]["score"])
    return bests


def test_evolution_improves_over_rounds_within_the_constraint(tmp_path):
    session = SweepSession(nas_spec(tmp_path))
    bests = run_rounds(session, range(6))
    assert bests == sorted(bests) and bests[-1] > bests[0]
    assert bests[-1] >= 20 and bests[-1] - bests[0] >= 3, bests  # optimum under flops <= 22 is 22
    for record in json.loads(Path(tmp_path / "nas" / "summary.json").read_text())["records"]:
        assert sum(record["params"].values()) <= 22
    # asking a round again (a retried task, a re-run) gives the same candidates
    assert session.round_trials(2) == session.round_trials(2)


def test_optuna_study_resumes_from_the_results_folder(tmp_path):
    pytest.importorskip("optuna")

    def spec():
        return SweepSpec(
            name="opt",
            search="optuna",
            space={"x": uniform(-4, 4)},
            rounds=4,
            per_round=5,
            seed=3,
            python_callable=lambda p: {"y": -((p["x"] - 1) ** 2)},
            objective=Objective("y"),
            results_root=str(tmp_path),
        )

    run_rounds(SweepSession(spec()), range(2))
    first_two = [t.params for r in range(2) for t in SweepSession(spec()).round_trials(r)]
    bests = run_rounds(SweepSession(spec()), range(2, 4))  # a new process would see exactly this state
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    study = optuna.load_study(
        study_name="opt",
        storage=JournalStorage(JournalFileBackend(str(tmp_path / "opt" / "search" / "optuna.journal"))),
    )
    assert len(study.trials) == 20 and all(t.state.name == "COMPLETE" for t in study.trials)
    assert [t.params for r in range(2) for t in SweepSession(spec()).round_trials(r)] == first_two
    assert bests[-1] > -0.5


def test_one_session_asks_and_tells_like_a_fresh_session_per_call(tmp_path):
    """A session keeps its Optuna study (loaded from the journal once); what it proposes and records is what
    a fresh session per prepare/finish (a new process per Airflow task) would, and telling a round again
    (a retried task) records nothing twice."""
    pytest.importorskip("optuna")

    def spec(name):
        return SweepSpec(
            name=name,
            search="optuna",
            space={"x": uniform(-4, 4)},
            rounds=3,
            per_round=4,
            seed=7,
            python_callable=lambda p: {"y": -((p["x"] - 1) ** 2)},
            objective=Objective("y"),
            results_root=str(tmp_path),
        )

    kept = SweepSession(spec("kept"))
    kept_bests = run_rounds(kept, range(3))
    assert kept.search is kept.search
    fresh_bests = []
    for r in range(3):
        manifest = SweepSession(spec("fresh")).prepare(round_no=r)
        for t in manifest.pending:
            run_trial(manifest, t, out=io.StringIO())
        SweepSession(spec("fresh")).finish_round(r)
        fresh_bests.append(SweepSession(spec("fresh")).collect()["best"]["score"])
    assert [t.params for r in range(3) for t in kept.round_trials(r)] == [
        t.params for r in range(3) for t in SweepSession(spec("fresh")).round_trials(r)
    ]
    assert kept_bests == fresh_bests
    assert kept.finish_round(2)["told"] == 0


@pytest.mark.heavy  # 1.3 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_each_batch_process_reads_only_its_own_trials(tmp_path, monkeypatch):
    """A group's process gets a manifest of its few trials (the plan's settings, its trials and nothing
    else), written next to the plan and removed once the group has run; its state and results land in the
    same trial folders as with the full manifest."""
    from airflow_provider_gpusched.core.gpu import sweep_batch as batch

    spec = SweepSpec(
        name="slices",
        search="random",
        space={"x": uniform(0, 1)},
        count=40,
        seed=1,
        python_callable=lambda p: {"y": p["x"]},
        objective=Objective("y"),
        results_root=str(tmp_path),
    )
    session = SweepSession(spec)
    manifest = session.prepare(run="run 1")
    seen = []
    real_argv = batch.group_argv

    def spying_argv(sliced, group, python=None):
        data = json.loads(Path(sliced.path).read_text())
        seen.append((sliced.path, [t["trial_id"] for t in data["trials"]], data))
        return real_argv(sliced, group, python)

    monkeypatch.setattr(batch, "group_argv", spying_argv)
    manager = LeaseManager(SimulatedInventory("1x24GiB"), str(tmp_path / "leases"))
    outcome = run_local_batch(
        manifest, manifest.pending, manager, GPURequest(gpu_memory="4GiB"), parallel=2, trials_per_process=8
    )
    assert len(outcome["succeeded"]) == 40
    assert sorted(i for _, ids, _ in seen for i in ids) == sorted(t.trial_id for t in manifest.pending)
    for path, ids, data in seen:
        assert path != manifest.path and not os.path.exists(path)  # removed after the group ran
        assert data["pending"] == ids and len(ids) <= 8
        assert data["run"] == "run 1" and data["target"] == manifest.record.target
        assert data["group_of"] == manifest.path
    assert [len(ids) for _, ids, _ in seen] == [8] * 5  # tiny trials: full groups to the end
    assert session.collect(run="run 1")["counts"]["succeeded"] == 40


def batch_group_sizes(tmp_path, monkeypatch, name, count, seed, trial):
    """Run ``count`` trials of ``trial`` in batched mode (2 slots, groups of 8 to start with); the size of each
    group a process ran, and the outcome."""
    from airflow_provider_gpusched.core.gpu import sweep_batch as batch

    spec = SweepSpec(
        name=name,
        search="random",
        space={"x": uniform(0, 1)},
        count=count,
        seed=seed,
        python_callable=trial,
        objective=Objective("y"),
        results_root=str(tmp_path),
    )
    manifest = SweepSession(spec).prepare()
    sizes = []
    real_argv = batch.group_argv
    monkeypatch.setattr(batch, "group_argv", lambda m, g, python=None: sizes.append(len(g)) or real_argv(m, g))
    manager = LeaseManager(SimulatedInventory("1x24GiB"), str(tmp_path / "leases"))
    outcome = run_local_batch(
        manifest, manifest.pending, manager, GPURequest(gpu_memory="4GiB"), parallel=2, trials_per_process=8
    )
    return sizes, outcome


@pytest.mark.heavy  # 1.3 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_the_last_groups_shrink_only_for_long_trials(tmp_path, monkeypatch):
    from airflow_provider_gpusched.core.gpu import sweep_batch as batch

    monkeypatch.setattr(batch, "SHRINK_TAIL_ABOVE", 0.0)  # every trial counts as long
    sizes, outcome = batch_group_sizes(tmp_path, monkeypatch, "tail", 24, 2, lambda p: {"y": p["x"]})
    assert len(outcome["succeeded"]) == 24
    assert sizes[0] == 8 and min(sizes) < 8 and sum(sizes) == 24  # smaller groups once the tail is near


def group_size_after(ran_trials: int, ran_seconds: float, trial_seconds: float, todo: int = 100) -> int:
    """The size LocalBatch gives its next group once its groups so far took ``ran_seconds`` (wall time) for
    ``ran_trials`` trials, of which the trials themselves took ``trial_seconds`` (2 slots, groups of 8)."""
    from airflow_provider_gpusched.core.gpu import sweep_batch as batch

    b = object.__new__(batch.LocalBatch)
    b.todo, b.parallel, b.trials_per_process = deque([()] * todo), 2, 8
    b.ran_trials, b.ran_seconds, b.trial_seconds = ran_trials, ran_seconds, trial_seconds
    return b._group_size()


def test_groups_grow_only_while_the_trials_cost_less_than_their_processes():
    """The rule on measured figures: groups grow (up to GROW_TO, never past an even share of what is left) once two
    groups' worth of trials ran and the trials took less time than their processes cost besides them."""
    from airflow_provider_gpusched.core.gpu.sweep_batch import GROW_TO

    assert group_size_after(16, 16 * 0.3 + 2 * 0.4, 16 * 0.3) == 8  # 0.3 s trials, 0.4 s a process start: no
    assert group_size_after(16, 16 * 0.3 + 2 * 3.0, 16 * 0.3) == 50  # a start of 3 s (a loaded host): an even share
    assert group_size_after(16, 16 * 0.3 + 2 * 3.0, 16 * 0.3, todo=1000) == GROW_TO
    assert group_size_after(8, 8 * 0.01 + 1.0, 8 * 0.01) == 8  # one group is not yet enough to judge
    assert group_size_after(16, 16 * 1.2, 16 * 1.0, todo=6) == 3  # long trials: the tail shrinks instead


@pytest.mark.heavy  # 1.2 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_a_batch_sizes_its_groups_by_what_it_measured(tmp_path, monkeypatch):
    """Trials of 0.3 s: each decision the batch took is the rule applied to what it had measured then (the trials'
    own time from their status records, at least 0.3 s each), whatever the load of this host made the process starts
    cost; the first two groups are 8 before anything is known."""
    from airflow_provider_gpusched.core.gpu import sweep_batch as batch

    decisions = []
    real = batch.LocalBatch._group_size

    def watched(self):
        size = real(self)
        decisions.append((self.ran_trials, self.ran_seconds, self.trial_seconds, len(self.todo) + 1, size))
        return size

    monkeypatch.setattr(batch.LocalBatch, "_group_size", watched)

    def slow(p):
        import time

        time.sleep(0.3)
        return {"y": p["x"]}

    sizes, outcome = batch_group_sizes(tmp_path, monkeypatch, "steady", 40, 3, slow)
    assert len(outcome["succeeded"]) == 40 and sum(sizes) == 40
    assert sizes[:2] == [8, 8]
    assert len(decisions) == len(sizes)
    for ran_trials, ran_seconds, trial_seconds, todo, size in list(decisions):  # (the rule below adds to it)
        assert trial_seconds >= 0.3 * ran_trials - 1e-6  # the trials' own time is measured, not the groups' wall
        assert size == group_size_after(ran_trials, ran_seconds, trial_seconds, todo=todo - 1)


def test_evolution_on_a_small_space_ends_once_every_candidate_is_evaluated(tmp_path):
    """pavi's settings (pool 10, top 3, 5 mutations, 5 crossovers, 5 epochs) on a 3x3 space: the first round
    takes 9 candidates at most, later rounds take what is left, then propose nothing; no round fails and
    the best is the space's best."""
    spec = SweepSpec(
        name="tiny",
        search="evolution",
        space={"a": [1, 2, 3], "b": [1, 2, 3]},
        evolution={
            "candidate_pool_size": 10,
            "candidate_top_k": 3,
            "num_mutation": 5,
            "num_crossover": 5,
            "mutate_prob": 0.5,
            "max_epoch": 5,
        },
        python_callable=lambda p: {"score": p["a"] * 10 + p["b"]},
        objective=Objective("score"),
        results_root=str(tmp_path),
        seed=1,
    )
    session = SweepSession(spec)
    sizes = []
    for r in range(5):
        sizes.append(len(session.round_trials(r)))
        manifest = session.prepare(round_no=r)
        for t in manifest.pending:
            run_trial(manifest, t, out=io.StringIO())
        session.finish_round(r)
    assert sizes[0] == 9 and sizes[1:] == [0, 0, 0, 0], sizes
    summary = session.collect()
    assert summary["counts"]["succeeded"] == 9 and summary["best"]["score"] == 33


def test_evolution_fills_a_round_from_what_is_left_and_says_when_nothing_fits(tmp_path):
    spec = SweepSpec(
        name="left",
        search="evolution",
        space={"a": list(range(5)), "b": list(range(4))},
        evolution={
            "candidate_pool_size": 6,
            "candidate_top_k": 2,
            "num_mutation": 3,
            "num_crossover": 3,
            "mutate_prob": 0.0,
            "max_epoch": 5,
        },
        python_callable=lambda p: {"score": p["a"] + p["b"]},
        objective=Objective("score"),
        results_root=str(tmp_path),
        seed=2,
    )
    session = SweepSession(spec)
    seen = set()
    for r in range(5):
        trials = session.round_trials(r)
        ids = {t.trial_id for t in trials}
        assert not ids & seen  # nothing is evaluated twice
        seen |= ids
        manifest = session.prepare(round_no=r)
        for t in manifest.pending:
            run_trial(manifest, t, out=io.StringIO())
        session.finish_round(r)
    assert len(seen) == 20  # 6 + 6 + 6 + 2: mutation without mutate_prob repeats parents, the rest is filled

    def measure(params):
        return {"flops": 100}

    impossible = SweepSpec(
        name="none",
        search="evolution",
        space={"a": [1, 2], "b": [1, 2]},
        evolution={"constraints": {"flops": 10}, "measure": measure, "candidate_top_k": 2, "candidate_pool_size": 4},
        python_callable=lambda p: {"score": 1},
        objective=Objective("score"),
        results_root=str(tmp_path),
    )
    with pytest.raises(
        GpuschedError,
        match=r"none of the 4 candidates of the space satisfies the constraints "
        r"\{'flops': 10\}",
    ):
        SweepSession(impossible).round_trials(0)


def test_preview_of_rounds_claims_no_more_trials_than_the_space_holds(tmp_path):
    spec = SweepSpec(
        name="tiny",
        search="evolution",
        space={"a": [1, 2, 3], "b": [1, 2, 3]},
        evolution={"candidate_pool_size": 4, "candidate_top_k": 2, "max_epoch": 5},
        python_callable=lambda p: {"score": 1},
        objective=Objective("score"),
        results_root=str(tmp_path),
    )
    preview = SweepSession(spec).preview()
    assert [r["trials"] for r in preview["rounds"]] == [4, 4, 1, 0, 0]
    assert preview["trials"] == 9 and preview["space_size"] == 9
    spec = SweepSpec(
        name="cont",
        search="evolution",
        space={"a": list(range(100))},
        evolution={"candidate_pool_size": 4, "candidate_top_k": 2, "max_epoch": 3},
        python_callable=lambda p: {"score": 1},
        objective=Objective("score"),
        results_root=str(tmp_path),
    )
    assert SweepSession(spec).preview()["trials"] == 12


@pytest.mark.heavy  # 0.6 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_optuna_rounds_propose_distinct_new_points_and_leave_nothing_running(tmp_path):
    pytest.importorskip("optuna")
    import optuna

    def spec(name, space, rounds):
        return SweepSpec(
            name=name,
            search="optuna",
            space=space,
            rounds=rounds,
            per_round=8,
            seed=5,
            python_callable=lambda p: {"y": -((p["a"] - 1) ** 2)},
            objective=Objective("y"),
            results_root=str(tmp_path),
        )

    session = SweepSession(spec("fifty", {"a": list(range(10)), "b": list(range(5))}, 4))
    ids = []
    for r in range(4):
        trials = session.round_trials(r)
        assert len(trials) == 8, (r, [t.params for t in trials])  # a round does not pile onto one point
        ids += [t.trial_id for t in trials]
        run_rounds(session, [r])
    assert len(set(ids)) == 32  # and no round repeats an earlier one

    session = SweepSession(spec("ten", {"a": list(range(10))}, 3))
    sizes = []
    for r in range(3):
        sizes.append(len(session.round_trials(r)))
        run_rounds(session, [r])
    assert sizes == [8, 2, 0]
    assert not session.search.study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert session.collect()["best"]["score"] == 0


def noisy_trial(params):
    print(f"training with x={params['x']}")
    if params["x"] == 2:
        raise RuntimeError("diverged")
    return {"loss": params["x"]}


def test_a_trial_status_records_its_gpus_slurm_job_and_log(tmp_path, monkeypatch):
    """GPU Task Scheduler's scheduler log (start, end and worker GPU per test) and per-folder log file:
    status.json names the GPUs (CUDA_VISIBLE_DEVICES as given), the Slurm job and the log, and a callable's
    printed output and traceback land in that log as they do for commands."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv("SLURM_JOB_ID", "4711")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "4700")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "11")
    spec = SweepSpec(
        name="logs",
        test_config=[{"x": [1, 2]}],
        python_callable=noisy_trial,
        objective=Objective("loss", "minimize"),
        results_root=str(tmp_path),
    )
    session = SweepSession(spec)
    manifest = session.prepare()
    for t in manifest.pending:
        run_trial(manifest, t, out=io.StringIO())
    session.collect()
    records = {r["params"]["x"]: r for r in json.loads(Path(tmp_path / "logs" / "summary.json").read_text())["records"]}
    for x, record in records.items():
        status = json.loads(Path(os.path.join(record["folder"], "status.json")).read_text())
        assert status["gpus"] == record["gpus"] == "2,3" and status["slurm_job"] == record["slurm_job"] == "4700_11"
        assert record["log"] == os.path.join(record["folder"], "output.log") and record["host"]
        assert f"training with x={x}" in Path(record["log"]).read_text()
    assert "RuntimeError: diverged" in Path(records[2]["log"]).read_text() and records[2]["state"] == "failed"
    assert f"[failed]: RuntimeError: diverged (log: {records[2]['log']})" in session.collect()["text"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(name)
    session = SweepSession(command_spec(tmp_path))
    manifest = session.prepare()
    run_trial(manifest, manifest.pending[0], out=io.StringIO())
    session.collect()
    record = json.loads(Path(tmp_path / "cmd" / "summary.json").read_text())["records"][0]
    assert record["gpus"] is None and record["slurm_job"] is None
    assert record["log"].endswith("output.log") and os.path.exists(record["log"])


WRITE_PICKLE = (
    "import os, pickle, sys, numpy; p = __import__('json').loads(os.environ['GPUSCHED_TRIAL_PARAMS']); "
    "os.makedirs('hpo', exist_ok=True); "
    "pickle.dump({'eval_value': numpy.float64(p['x'] * 10), 'steps': numpy.int64(5)}, "
    "open('hpo/result.pkl', 'wb'))"
)


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch ran-code",))


@pytest.mark.heavy  # 0.6 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_di_toolkit_result_pkl_and_r_objective(tmp_path):
    """DI-toolkit's trials pickle their metrics to hpo/result.pkl and the search maximizes R['eval_value']:
    both work as they are; a pickle that would run code is not loaded, and the trial is invalid, saying why."""
    spec_file = tmp_path / "ditk.yaml"
    spec_file.write_text(
        json.dumps(
            {
                "name": "ditk",
                "test_config": [{"x": [1, 2, 3]}],
                "objective": "maximize R['eval_value']",
                "command": [sys.executable, "-c", WRITE_PICKLE],
                "results_root": str(tmp_path),
            }
        )
    )
    spec = SweepSpec.from_yaml(str(spec_file))
    assert spec.objective == Objective("eval_value", "maximize")
    session = SweepSession(spec)
    manifest = session.prepare()
    for t in manifest.pending:
        assert run_trial(manifest, t, out=io.StringIO()) == 0
    summary = session.collect()
    assert summary["best"]["score"] == 30.0 and summary["counts"]["succeeded"] == 3
    assert session.store.result(manifest.trials[0]) == {"eval_value": 10.0, "steps": 5}

    import pickle

    evil = SweepSpec(
        name="evil",
        test_config=[{"x": [1]}],
        objective=Objective("R['eval_value']"),
        command=[
            sys.executable,
            "-c",
            "import sys; open('result.pkl', 'wb').write(bytes.fromhex(sys.argv[1]))",
            pickle.dumps(_RunsCode()).hex(),
        ],
        results_root=str(tmp_path),
    )
    session = SweepSession(evil)
    manifest = session.prepare()
    run_trial(manifest, manifest.pending[0], out=io.StringIO())
    status = session.store.status(manifest.pending[0])
    assert status["state"] == "invalid" and "only dicts (EasyDict too), lists, numbers, strings" in status["error"], (
        status
    )
    assert not os.path.exists(os.path.join(session.store.trial_dir(manifest.pending[0]), "ran-code"))


EASYDICT_RESULT = """
# (no braces: in a sweep command they are placeholders)
import os, pickle, sys, types, numpy
# EasyDict as the easydict package defines it (a dict whose items are attributes too), pickled by a trial
easydict = types.ModuleType("easydict")
class EasyDict(dict):
    def __init__(self, d=None, **kw):
        super().__init__()
        for k, v in dict(d or {}, **kw).items():
            setattr(self, k, v)
    def __setattr__(self, name, value):
        value = EasyDict(value) if isinstance(value, dict) and not isinstance(value, EasyDict) else value
        super().__setattr__(name, value)
        super().__setitem__(name, value)
EasyDict.__module__ = "easydict"
easydict.EasyDict = EasyDict
sys.modules["easydict"] = easydict
x = float(sys.argv[1])
pickle.dump(EasyDict(dict(eval_value=numpy.float32(x), curve=numpy.arange(3) * x, info=dict(env="cartpole"))),
            open("result.pkl", "wb"))
"""


def test_easydict_and_numpy_results_are_read_without_running_their_classes(tmp_path):
    """DI-toolkit's results are EasyDicts holding numpy values: read as plain values; neither easydict (not
    installed here) nor any other class is imported or run."""
    spec = SweepSpec(
        name="ez",
        test_config=[{"x": [1, 2]}],
        objective=Objective.parse("maximize R['eval_value']"),
        command=[sys.executable, "-c", EASYDICT_RESULT, "{x}"],
        results_root=str(tmp_path),
    )
    session = SweepSession(spec)
    manifest = session.prepare()
    for t in manifest.pending:
        assert run_trial(manifest, t, out=io.StringIO()) == 0
    assert "easydict" not in sys.modules
    summary = session.collect()
    assert summary["best"]["score"] == 2.0 and summary["counts"]["succeeded"] == 2
    assert session.store.result(manifest.trials[1]) == {
        "eval_value": 2.0,
        "curve": [0.0, 2.0, 4.0],
        "info": {"env": "cartpole"},
    }


def test_objective_text_forms_and_their_errors():
    assert Objective.parse("minimize loss") == Objective("loss", "minimize")
    assert Objective.parse("maximize R['eval']['value']").metric == "eval.value"
    with pytest.raises(Exception, match="'maximize METRIC' or 'minimize METRIC'"):
        Objective.parse("maximise acc")
    with pytest.raises(Exception, match=r"R\['key'\]"):
        Objective("R[eval]")


READ_CONFIG = (
    "import os, sys, json, runpy; cfg = runpy.run_path(sys.argv[1])['main_config']; "
    "assert os.environ['GPUSCHED_TRIAL_CONFIG'] == sys.argv[1]; "
    "json.dump({'eval_value': cfg['policy']['discount_factor'] * 100, 'name': cfg['exp_name']}, "
    "open('result.json', 'w'))"
)


def test_a_config_template_is_rendered_into_each_trial(tmp_path):
    """DI-toolkit passes parameters by rendering the task's config file per trial: {{ name }} placeholders
    become literals of the file's language, the copy lands in the trial folder, the command gets its path."""
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "dqn_config.py").write_text(
        "main_config = dict(\n    exp_name={{ exp }},\n    policy=dict(discount_factor={{ policy.discount_factor }}),\n)\n"
    )
    (tmp_path / "spec.yaml").write_text(
        json.dumps(
            {
                "name": "tmpl",
                "global_config": {"exp": 'it\'s "quoted"; {x}'},
                "test_config": [{"policy": {"discount_factor": [0.95, 0.99]}}],
                "config_template": "cfg/dqn_config.py",  # relative to the spec file
                "command": [sys.executable, "-c", READ_CONFIG, "{config}"],
                "objective": "maximize R['eval_value']",
                "results_root": str(tmp_path / "results"),
            }
        )
    )
    spec = SweepSpec.from_yaml(str(tmp_path / "spec.yaml"))
    session = SweepSession(spec)
    manifest = session.prepare()
    for t in manifest.pending:
        assert run_trial(manifest, t, out=io.StringIO()) == 0
    summary = session.collect()
    assert summary["best"]["score"] == 99.0
    folder = session.store.trial_dir(manifest.trials[0])
    rendered = Path(os.path.join(folder, "dqn_config.py")).read_text()
    assert "discount_factor=0.95" in rendered and "exp_name='it\\'s \"quoted\"; {x}'" in rendered, rendered
    assert os.stat(os.path.join(folder, "dqn_config.py")).st_mode & 0o077 == 0
    assert session.store.result(manifest.trials[0])["name"] == 'it\'s "quoted"; {x}'

    (tmp_path / "cfg" / "bad.yaml").write_text("lr: {{ learning_rate }}\n")
    with pytest.raises(
        Exception, match=r"config_template: expected placeholders naming a parameter.*bad.yaml: \{\{ learning_rate \}\}"
    ):
        SweepSpec(
            name="bad", test_config=[{"lr": [1]}], command=["true"], config_template=str(tmp_path / "cfg" / "bad.yaml")
        )
    with pytest.raises(Exception, match="an existing config template file"):
        SweepSpec(name="bad", command=["true"], config_template=str(tmp_path / "nope.py"))
    with pytest.raises(Exception, match=r"\{config\} is neither"):
        SweepSpec(name="bad", command=["run", "{config}"])


def test_config_values_are_written_in_the_files_language(tmp_path):
    from airflow_provider_gpusched.core.sweep.parts.config_template import ConfigTemplate

    values = {"a": "x y", "b": [1, 2.5], "c": True, "d": None}
    text = "{{ a }} {{ b }} {{c}} {{ d }}"
    assert ConfigTemplate("c.py", text).render(values) == "'x y' [1, 2.5] True None"
    assert ConfigTemplate("c.yaml", text).render(values) == '"x y" [1, 2.5] true null'
    assert ConfigTemplate("c.txt", text).render(values) == "x y [1, 2.5] true null"
    with pytest.raises(Exception, match="a parameter this trial has"):
        ConfigTemplate("c.py", "{{ e }}").render(values)


def _billion_laughs(levels: int = 40) -> bytes:
    """A pickle of a few hundred bytes whose list holds the previous list ten times, ``levels`` deep: 10**levels
    values once expanded."""
    import pickle

    value: list = [0]
    for _ in range(levels):
        value = [value] * 10
    return pickle.dumps(value)


def _deep_pickle(depth: int = 100_000) -> bytes:

    # protocol 0 built by hand: "(" mark, "l" list, repeated, then "a" appends: no recursion to build or load
    return b"(l" * depth + b"a" * (depth - 1) + b"."


@pytest.mark.parametrize(
    ("name", "content", "why"),
    [
        ("result.json", b"[" * 100_000 + b"]" * 100_000, "nested deeper than 64 levels"),
        (
            "result.json",
            b'{"loss": 1, "pad": "' + b"x" * (17 * 2**20) + b'"}',
            "more than the 16 MiB a result may have",
        ),
        ("result.pkl", _deep_pickle(), "nested deeper than 64 levels"),
        ("result.pkl", _billion_laughs(), "more than 100000 values"),
    ],
)
def test_hostile_result_files_make_the_trial_invalid_with_the_reason(tmp_path, name, content, why):
    """Issue 30, items 2, 3 and 5: deep nesting, a billion-laughs pickle and a huge file are read with bounds: the
    trial is invalid, saying why; the runner and collect do not crash or grow without limit."""
    import resource

    spec = SweepSpec(
        name="hostile",
        test_config=[{"x": [1]}],
        objective=Objective("loss", "minimize"),
        command=[sys.executable, "-c", f"open({name!r}, 'wb').write(bytes.fromhex(open('payload').read()))"],
        results_root=str(tmp_path),
    )
    session = SweepSession(spec)
    manifest = session.prepare()
    (trial,) = manifest.pending
    folder = session.store.prepare(trial)
    with open(os.path.join(folder, "payload"), "w") as fh:
        fh.write(content.hex())
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run_trial(manifest, trial, out=io.StringIO())
    status = session.store.status(trial)
    assert status["state"] == "invalid" and why in status["error"], status
    summary = session.collect()
    assert summary["counts"]["invalid"] == 1 and summary["leaderboard"] == []
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before  # KiB
    assert grown < 400 * 1024, f"reading the result grew this process by {grown // 1024} MiB"


def test_result_and_report_files_linked_out_of_the_trial_folder_are_not_followed(tmp_path):
    """Issue 30, item 4: a result.json or reports.jsonl that is a symbolic link to a file elsewhere is not read."""
    spec = SweepSpec(
        name="linked",
        test_config=[{"x": [1]}],
        objective=Objective("loss", "minimize"),
        command=[
            sys.executable,
            "-c",
            "import os, sys; os.symlink(sys.argv[1], 'result.json'); "
            "os.symlink(sys.argv[2], os.environ['GPUSCHED_REPORT_FILE'])",
            str(tmp_path / "elsewhere.json"),
            str(tmp_path / "elsewhere.jsonl"),
        ],
        results_root=str(tmp_path / "results"),
    )
    (tmp_path / "elsewhere.json").write_text('{"loss": -1000}')
    (tmp_path / "elsewhere.jsonl").write_text('{"step": 1, "loss": 1}\n')
    session = SweepSession(spec)
    manifest = session.prepare()
    (trial,) = manifest.pending
    run_trial(manifest, trial, out=io.StringIO())
    status = session.store.status(trial)
    assert status["state"] == "invalid" and "result.json: not inside the trial folder" in status["error"], status
    reports = session.store.reports(trial)
    assert reports["count"] == 0 and "reports.jsonl: not under" in reports["problems"][0], reports
    assert session.collect()["leaderboard"] == []


def test_a_results_root_others_can_write_and_a_planted_sweep_folder_are_refused(tmp_path):
    """Issue 30, item 9: in a results root every user may write (1777), another user's link <root>/<sweep> would
    send this sweep's trials and manifest elsewhere; the root is refused, and so is a sweep folder that is a link
    or another user's."""
    from airflow_provider_gpusched.core.safe_files import UnsafePathError

    def spec(root):
        return SweepSpec(
            name="victim",
            test_config=[{"x": [1]}],
            python_callable=lambda p: {"y": 1},
            objective=Objective("y"),
            results_root=str(root),
        )

    open_root = tmp_path / "open"
    open_root.mkdir()
    os.chmod(open_root, 0o1777)
    with pytest.raises(UnsafePathError, match=r"results_root .* is writable by every user \(mode 1777\)"):
        SweepSession(spec(open_root)).prepare()
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (mine / "victim").symlink_to(elsewhere)
    with pytest.raises(UnsafePathError, match="sweep folder .*victim is a symbolic link"):
        SweepSession(spec(mine)).prepare()
    assert list(elsewhere.iterdir()) == []
    if os.geteuid() == 0:  # a folder of another user (only root can make one here)
        (mine / "victim").unlink()
        (mine / "victim").mkdir(mode=0o755)
        os.chown(mine / "victim", 65534, 65534)
        with pytest.raises(UnsafePathError, match="belongs to uid 65534, not to this user"):
            SweepSession(spec(mine)).prepare()
    ok = tmp_path / "ok"
    ok.mkdir(mode=0o700)
    assert SweepSession(spec(ok)).prepare().pending


def test_a_sweep_folder_belongs_to_the_dag_that_planned_in_it_first(tmp_path):
    """Issue 30, item 11: two DAGs with the same sweep name would share one folder, and a DAG that a user may read
    would show another, private DAG's trials: the second DAG is refused unless both share it on purpose."""
    spec = SweepSpec(
        name="s",
        test_config=[{"x": [1]}],
        python_callable=lambda p: {"y": 1},
        objective=Objective("y"),
        results_root=str(tmp_path),
    )
    store = SweepSession(spec).store
    SweepSession(spec).prepare()  # a folder from before the record: taken over by the next DAG that plans
    store.claim_for_dag("private_dag")
    store.claim_for_dag("private_dag")
    with pytest.raises(GpuschedError, match="belongs to DAG 'private_dag'; DAG 'public_dag' cannot use it"):
        store.claim_for_dag("public_dag")
    store.claim_for_dag("public_dag", shared=True)
    assert json.loads(Path(tmp_path / "s" / "dags.json").read_text()) == {"dags": ["private_dag", "public_dag"]}
    (tmp_path / "s" / "dags.json").write_text('{"dags": "private_dag"}')
    with pytest.raises(GpuschedError, match="key 'dags': expected a list of DAG ids"):
        store.claim_for_dag("private_dag")


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("c.py", 'lr = "{{ v }}"\n'),
        ("c.py", "cmd = f'run {{ v }}'\n"),
        ("c.json", '{"lr": "{{ v }}"}'),
        ("c.yaml", "lr: '{{ v }}'\n"),
        ("c.toml", 'lr = "{{ v }}"\n'),
        ("c.sh", 'python train.py --lr "{{ v }}"\n'),
    ],
)
def test_a_placeholder_inside_quotes_is_refused(tmp_path, name, text):
    """Issue 30, item 6: inside a string a value could close the quotes and go on as code; the literal brings its
    own quotes, so a quoted placeholder is refused when the spec is read."""
    from airflow_provider_gpusched.core.sweep.parts.config_template import ConfigTemplate

    with pytest.raises(InvalidArgumentError, match="a placeholder outside quotes"):
        ConfigTemplate(name, text)


HOSTILE = 'x"; __import__("os").system("touch ran-code"); "\n[evil]\nkey = 1'


@pytest.mark.parametrize(
    ("name", "text", "check"),
    [
        (
            "c.py",
            "lr = {{ v }}  # the learning rate, don't quote\n",
            lambda out: eval(out.split("=", 1)[1].split("#")[0]) == HOSTILE,
        ),
        ("c.json", '{"lr": {{ v }}, "note": "it\'s fine"}', lambda out: json.loads(out)["lr"] == HOSTILE),
        (
            "c.yaml",
            "# it's a comment\nname: it's mine\nlr: {{ v }}\n",
            lambda out: __import__("yaml").safe_load(out)["lr"] == HOSTILE,
        ),
        ("c.toml", "lr = {{ v }}\n", lambda out: __import__("tomllib").loads(out)["lr"] == HOSTILE),
        ("c.sh", "python train.py --lr {{ v }}\n", lambda out: __import__("shlex").split(out)[3] == HOSTILE),
    ],
)
def test_a_hostile_value_stays_one_value_in_every_template_kind(tmp_path, name, text, check):
    from airflow_provider_gpusched.core.sweep.parts.config_template import ConfigTemplate

    out = ConfigTemplate(name, text).render({"v": HOSTILE})
    assert check(out), out  # read back by the file's own parser: one value, exactly the parameter


def test_a_plain_text_template_refuses_a_value_with_a_newline():
    from airflow_provider_gpusched.core.sweep.parts.config_template import ConfigTemplate

    template = ConfigTemplate("c.ini", "[train]\nlr = {{ v }}\n")
    assert template.render({"v": 0.1}) == "[train]\nlr = 0.1\n"
    with pytest.raises(InvalidArgumentError, match="without newlines or control characters"):
        template.render({"v": "0.1\n[evil]"})


FULL_DISK = r"""
import json, os, subprocess, sys
from airflow_provider_gpusched.core.sweep import Objective, SweepSpec
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
root = sys.argv[1]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", root], check=True)
FILL = ("import errno\nf = open('fill.bin', 'wb')\n"
        "try:\n    while True:\n        f.write(b'x' * 4096)\n        f.flush()\n"
        "except OSError as e:\n    assert e.errno == errno.ENOSPC\n")
session = SweepSession(SweepSpec(name="full", test_config=[{"x": [1]}], command=[sys.executable, "-c", FILL],
                                 objective=Objective("y"), results_root=root))
manifest = session.prepare(run="r1")
(trial,) = manifest.pending
run = subprocess.run([sys.executable, "-m", "airflow_provider_gpusched.core.sweep.running.trial_run", manifest.path,
                      trial.trial_id], capture_output=True, text=True, timeout=120)
os.remove(os.path.join(session.store.trial_dir(trial), "fill.bin"))  # the disk has room again
marked = session.settle(None, "r1")
print(json.dumps({"code": run.returncode, "stderr": run.stderr, "marked": marked,
                  "status": session.store.status(trial), "folder": session.store.trial_dir(trial)}))
"""


@pytest.mark.heavy  # 0.9 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root (CI runs as root)")
def test_a_full_disk_under_the_results_root_is_named_and_the_trial_ends_failed(tmp_path):
    """Issue 30, item 12: a trial fills the results root's disk; its runner says which file it could not write,
    without a traceback, and once there is room the trial is marked failed (not left running)."""
    root = tmp_path / "small"
    root.mkdir(mode=0o700)
    proc = subprocess.run(
        ["unshare", "-m", sys.executable, "-c", FULL_DISK, str(root)], capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["code"] == 4 and "Traceback" not in out["stderr"], out
    assert f"cannot write {out['folder']}/status.json: No space left on device" in out["stderr"], out
    assert out["marked"] == 1 and out["status"]["state"] == "failed", out
    assert "runner stopped before recording an outcome" in out["status"]["error"]


def test_a_failed_command_trial_names_its_last_error_next_to_the_exit_code(tmp_path):
    """Issue 52: the failed table, check_trials and `gpusched sweep run` showed only "exit code 1"."""
    code = (
        "import sys\nprint('epoch 1')\nif sys.argv[1] == '2':\n    print('no error line here', flush=True)\n"
        "    sys.exit(4)\nraise ValueError('lr must be positive, got ' + sys.argv[1])\n"
    )
    spec = SweepSpec(
        name="errline",
        test_config=[{"x": [1, 2]}],
        command=[sys.executable, "-c", code, "{x}"],
        results_root=str(tmp_path),
        max_failed_trials=None,
    )
    session = SweepSession(spec)
    manifest = session.prepare()
    for t in manifest.pending:
        run_trial(manifest, t, out=io.StringIO())
    summary = session.collect()
    errors = {p["label"]: p["error"] for p in summary["problems"]}
    assert errors == {
        "x=1": "exit code 1: ValueError: lr must be positive, got 1",
        "x=2": "exit code 4: no error line here",
    }
    assert "exit code 1: ValueError: lr must be positive, got 1" in summary["text"]


@pytest.mark.parametrize(
    ("text", "line", "why"),
    [
        ("cat > train.cfg <<EOT\nname={{ v }}\nEOT\n", 2, "inside a heredoc (<<EOT, opened on line 1)"),
        ("cat > train.cfg <<'EOT'\nname={{ v }}\nEOT\n", 2, "inside a heredoc (<<EOT, opened on line 1)"),
        ("set -e\ncat <<-END >f\n\tx={{ v }}\n\tEND\n", 3, "inside a heredoc (<<END, opened on line 2)"),
        ("cat <<A <<B\na\nA\nb {{ v }}\nB\n", 4, "inside a heredoc (<<B, opened on line 1)"),
        ("x=`echo {{ v }}`\n", 1, "inside backticks"),
        ("cat <<{{ v }}\nhi\n", 1, "as a heredoc's delimiter"),
    ],
)
def test_a_shell_template_refuses_the_contexts_a_quoted_value_cannot_be_made_safe_in(text, line, why):
    """Issue 53, item 9: in `cat > train.cfg <<EOT / name={{ exp }} / EOT` the value `$(touch X)` ran, and so did a
    value holding a line `EOT` and a command. Heredocs, backticks and heredoc delimiters are refused when the spec is
    read, naming the line."""
    from airflow_provider_gpusched.core.sweep.parts.config_template import ConfigTemplate

    with pytest.raises(InvalidArgumentError, match=re.escape(why)) as caught:
        ConfigTemplate("job.sh", text)
    assert f"job.sh, line {line}: {{{{ v }}}}" in str(caught.value)


def test_hostile_values_in_a_shell_template_run_no_code(tmp_path):
    """Rendered and run by bash: a value in a command's word, in `$( )` and in a comment stays one word; a newline
    in a comment's value is refused (it would end the comment and start a command)."""
    import subprocess

    from airflow_provider_gpusched.core.sweep.parts.config_template import ConfigTemplate

    template = ConfigTemplate(
        "job.sh",
        "# experiment {{ v }}\nprintf '%s\\n' {{ v }} > out\n"
        "x=$(printf '%s' {{ v }})\nprintf '%s\\n' \"$x\" >> out\ncat > cfg <<'EOT'\nfixed\nEOT\n",
    )
    for value in ("$(touch ran)", "`touch ran`", "x; touch ran", "a'b\"c $HOME", "EOT"):
        (tmp_path / "job.sh").write_text(template.render({"v": value}))
        subprocess.run(["bash", "job.sh"], cwd=tmp_path, check=True, timeout=30)
        assert (tmp_path / "out").read_text().splitlines() == [value, value] and not (tmp_path / "ran").exists()
    with pytest.raises(InvalidArgumentError, match="in a shell comment"):
        template.render({"v": "x\ntouch ran"})


def test_a_results_root_another_user_could_redirect_is_refused(tmp_path):
    """Issue 53, item 12: a results root that is a link planted by another user, in a 0777 parent without the sticky
    bit, redirected root's sweep writes into the link's target. The parent that lets anyone replace the root is
    refused, and so is a link on the way that another user owns (even in a sticky /tmp-like folder)."""
    from airflow_provider_gpusched.core.safe_files import UnsafePathError

    def prepare(root):
        SweepSession(
            SweepSpec(
                name="victim",
                test_config=[{"x": [1]}],
                python_callable=lambda p: {"y": 1},
                objective=Objective("y"),
                results_root=str(root),
            )
        ).prepare()

    open_parent = tmp_path / "shared"
    open_parent.mkdir()
    os.chmod(open_parent, 0o777)
    target = tmp_path / "attacker"
    target.mkdir()
    (open_parent / "results").symlink_to(target)
    with pytest.raises(
        UnsafePathError,
        match=r"results_root .*shared/results: .*shared is writable by every user "
        r"without the sticky bit \(mode 0777\)",
    ):
        prepare(open_parent / "results")
    assert list(target.iterdir()) == []
    if os.geteuid() == 0:  # a link owned by another user (only root can make one here)
        sticky = tmp_path / "tmp"
        sticky.mkdir()
        os.chmod(sticky, 0o1777)
        (sticky / "results").symlink_to(target)
        os.lchown(sticky / "results", 65534, 65534)
        with pytest.raises(
            UnsafePathError,
            match=r"tmp/results is a symbolic link .* owned by .*not by this user or "
            r"root: another user may have planted it",
        ):
            prepare(sticky / "results")
        assert list(target.iterdir()) == []
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(mine)  # a link of this user's own: followed, and its target checked
    prepare(tmp_path / "link")
    assert (mine / "victim").is_dir()
