"""Sweep task groups through dag.test() on SIMULATED GPUs (local backend) and the real Slurm test cluster."""

import json
from pathlib import Path

import pytest

from .conftest import REPO, dag_run_results, run_and_collect, the_dag

pytestmark = pytest.mark.airflow


@pytest.fixture
def sweeps_root(tmp_path, monkeypatch):
    root = tmp_path / "sweeps"
    monkeypatch.setenv("AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT", str(root))
    return root


@pytest.fixture
def run(airflow_db, sweeps_root):
    return run_and_collect


def test_grid_sweep_example_runs_the_four_seed_trials_and_ranks_them(run, sweeps_root, capfd):
    state, xcoms, states = run(the_dag(REPO / "dags" / "sweep_grid.py"))
    assert state == "success", states
    trials = sorted(k for k in states if isinstance(k, tuple) and k[0] == "gan_grid.trial")
    assert len(trials) == 4 and all(states[k][0] == "success" for k in trials)
    best = xcoms["gan_grid.leaderboard"]["return_value"]
    assert best["label"] == "method=WGAN,num_packing=3,num_zmode=1" and best["score"] == pytest.approx(7.7)
    board = json.loads((sweeps_root / "gan_grid" / "leaderboard.json").read_text())["leaderboard"]
    assert [r["score"] for r in board] == pytest.approx([7.7, 7.5, 6.5, 6.2])
    summary = xcoms["gan_grid.collect"]["return_value"]
    assert summary["counts"]["succeeded"] == 4 and summary["counts"]["skipped"] == 0
    out = capfd.readouterr().out
    assert "inception_score (maximize)" in out


def map_labels(dag_run, task_id):
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(TaskInstance.map_index, TaskInstance.rendered_map_index).where(
                TaskInstance.dag_id == dag_run.dag_id,
                TaskInstance.run_id == dag_run.run_id,
                TaskInstance.task_id == task_id,
            )
        ).all()
    return dict(rows)


def test_trials_are_labelled_and_a_rerun_skips_what_succeeded(airflow_db, sweeps_root):
    dag = the_dag(REPO / "dags" / "sweep_grid.py")
    first = dag.test()
    assert first.state == "success"
    assert sorted(map_labels(first, "gan_grid.trial").values()) == [
        "method=ALI,num_packing=1,num_zmode=1",
        "method=GAN,num_packing=1,num_zmode=1",
        "method=WGAN,num_packing=3,num_zmode=1",
        "method=WGAN,num_packing=3,num_zmode=2",
    ]
    second = dag.test()
    xcoms, states = dag_run_results(second)
    assert second.state == "success", states
    assert not [k for k in states if isinstance(k, tuple) and k[0] == "gan_grid.trial"]  # nothing left to run
    summary = xcoms["gan_grid.collect"]["return_value"]
    assert summary["counts"]["skipped"] == 4 and summary["counts"]["succeeded"] == 4
    assert xcoms["gan_grid.leaderboard"]["return_value"]["score"] == pytest.approx(7.7)


def test_hpo_example_random_and_optuna(run, sweeps_root):
    state, xcoms, states = run(the_dag(REPO / "dags" / "sweep_hpo.py"))
    assert state == "success", states
    assert len([k for k in states if isinstance(k, tuple) and k[0] == "hpo_random.trial"]) == 12
    for r in range(3):
        assert len([k for k in states if isinstance(k, tuple) and k[0] == f"hpo_optuna.round_{r}.trial"]) == 4
        assert xcoms[f"hpo_optuna.round_{r}.tell"]["return_value"]["scored"] == 4
    random_best = xcoms["hpo_random.leaderboard"]["return_value"]
    optuna_best = xcoms["hpo_optuna.leaderboard"]["return_value"]
    assert 0 < random_best["score"] < 0.95 and 0 < optuna_best["score"] < 0.95
    assert (sweeps_root / "hpo_optuna" / "search" / "optuna.journal").stat().st_size > 0
    for record in json.loads((sweeps_root / "hpo_random" / "summary.json").read_text())["records"]:
        assert ("momentum" in record["params"]) == (record["params"]["optimizer"] == "sgd")


def test_pareto_example_runs_a_two_objective_optuna_study_and_publishes_its_front(run, sweeps_root, capfd):
    state, xcoms, states = run(the_dag(REPO / "dags" / "sweep_pareto.py"))
    assert state == "success", states
    assert (
        len(
            [
                k
                for k in states
                if isinstance(k, tuple) and k[0].startswith("pareto_size.round_") and k[0].endswith(".trial")
            ]
        )
        == 18
    )
    summary = xcoms["pareto_size.collect"]["return_value"]
    front = summary["pareto_front"]
    assert len(front) >= 2
    for a in front:  # no member of the front is beaten on both metrics by another trial
        for b in front:
            assert not (
                b["values"]["val_accuracy"] >= a["values"]["val_accuracy"]
                and b["values"]["latency_ms"] <= a["values"]["latency_ms"]
                and a != b
                and b["values"] != a["values"]
            )
    best = xcoms["pareto_size.leaderboard"]["return_value"]
    assert best["front"] == 1 and best["values"] == front[0]["values"]  # the most accurate of the front
    records = json.loads((sweeps_root / "pareto_size" / "summary.json").read_text())["records"]
    assert all(r["reports"]["count"] == 10 and r["reports"]["last_step"] == 10 for r in records)
    written = json.loads((sweeps_root / "pareto_size" / "pareto.json").read_text())
    assert [r["trial_id"] for r in written["front"]] == [r["trial_id"] for r in front]
    out = capfd.readouterr().out
    assert f"Pareto front (maximize val_accuracy, minimize latency_ms): {len(front)} trial(s)" in out


def test_nas_example_improves_and_publishes_the_best_subnet(run, sweeps_root):
    state, xcoms, states = run(the_dag(REPO / "dags" / "nas_evolution.py"))
    assert state == "success", states
    round_bests = [xcoms[f"nas_evolution.round_{r}.tell"]["return_value"]["round_best"] for r in range(4)]
    best = xcoms["nas_evolution.leaderboard"]["return_value"]
    assert best["score"] == max(round_bests) and max(round_bests[1:]) > round_bests[0]
    published = json.loads((sweeps_root / "nas_evolution" / "best.json").read_text())
    assert published["trial_id"] == best["trial_id"] and published["result"]["flops"] <= 600
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    uri = f"file://{sweeps_root}/nas_evolution/best.json"
    with create_session() as session:
        asset = session.query(AssetModel).filter(AssetModel.uri == uri).one()
        assert session.query(AssetEvent).filter(AssetEvent.asset_id == asset.id).count() == 1


def test_yaml_loader_dags(run, sweeps_root):
    from .conftest import load_dag_file

    module = load_dag_file(REPO / "dags" / "sweeps_from_yaml.py")
    state, xcoms, states = run(module.sweep_lr_schedule_dag)
    assert state == "success", states
    best = xcoms["lr_schedule.leaderboard"]["return_value"]
    assert best["label"] == "schedule=cosine,lr=0.01" and best["score"] == 0.0
    # GPU Task Scheduler's config as it is: its GPU list, its folder names
    state, xcoms, states = run(module.sweep_gan_seed_dag)
    assert state == "success", states
    best = xcoms["gan_seed.leaderboard"]["return_value"]
    assert best["label"] == "method-WGAN,num_packing-3,num_zmode-1" and best["score"] == pytest.approx(7.7)
    folders = sorted(p.name.rsplit(".", 1)[0] for p in (sweeps_root / "gan_seed" / "trials").iterdir())
    assert folders == [
        "method-ALI,num_packing-1,num_zmode-1",
        "method-GAN,num_packing-1,num_zmode-1",
        "method-WGAN,num_packing-3,num_zmode-1",
        "method-WGAN,num_packing-3,num_zmode-2",
    ]
    records = json.loads((sweeps_root / "gan_seed" / "summary.json").read_text())["records"]
    assert {r["result"]["gpu"] for r in records} <= {"0", "1"} and {r["gpus"] for r in records} <= {"0", "1"}


def test_batched_local_mode_runs_hundreds_of_trials_in_two_runner_tasks(run, sweeps_root):
    from .conftest import load_dag_file

    state, xcoms, states = run(load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_sweeps.py").batched_local)
    assert state == "success", states
    runners = sorted(k for k in states if isinstance(k, tuple) and k[0] == "batched_local.run_batch")
    assert len(runners) == 2
    assert sum(xcoms[k]["return_value"]["succeeded"] for k in runners) == 600
    summary = xcoms["batched_local.collect"]["return_value"]
    assert summary["counts"]["succeeded"] == 600
    assert xcoms["batched_local.leaderboard"]["return_value"]["score"] == pytest.approx(1.0, abs=1e-3)


@pytest.mark.slurm
def test_slurm_mapped_and_array_sweeps(airflow_db, sweeps_root, slurm_cluster):
    from .conftest import load_dag_file

    module = load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_sweeps.py")
    run = module.slurm_mapped.test()
    xcoms, states = dag_run_results(run)
    assert run.state == "success", states
    assert xcoms["slurm_mapped.leaderboard"]["return_value"]["score"] == 6.0
    assert sorted(map_labels(run, "slurm_mapped.trial").values()) == [
        "x=1,note=it's a; b",
        "x=2,note=it's a; b",
        "x=3,note=it's a; b",
    ]
    result = json.loads(
        next((sweeps_root / "slurm_mapped" / "trials").glob("x=1*")).joinpath("result.json").read_text()
    )
    assert result["cuda"] is not None  # Slurm gave the job a GPU (gres)

    run = module.slurm_arrays.test()
    xcoms, states = dag_run_results(run)
    assert run.state == "success", states
    arrays = sorted(k for k in states if isinstance(k, tuple) and k[0] == "slurm_arrays.trial_array")
    assert len(arrays) == 2
    assert xcoms["slurm_arrays.collect"]["return_value"]["counts"]["succeeded"] == 30


@pytest.mark.slurm
def test_an_asynchronous_search_on_slurm_is_one_array_of_workers_and_the_sweeps_view_lists_its_trials(
    airflow_db, sweeps_root, slurm_cluster
):
    from airflow_provider_gpusched.core.sweep.results.view import trial_rows

    from .conftest import load_dag_file

    module = load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_sweeps.py")
    run = module.slurm_async.test()
    xcoms, states = dag_run_results(run)
    assert run.state == "success", states
    arrays = sorted(k for k in states if isinstance(k, tuple) and k[0] == "slurm_async.trial_array")
    assert len(arrays) == 1 and map_labels(run, "slurm_async.trial_array") == {0: "workers"}
    summary = xcoms["slurm_async.collect"]["return_value"]
    assert summary["counts"]["succeeded"] == 6 and summary["counts"]["defined"] == 6
    records = json.loads((sweeps_root / "slurm_async" / "summary.json").read_text())["records"]
    assert {r["slurm_job"].split("_")[0] for r in records} == {xcoms[arrays[0]]["slurm_job_id"]}
    rows = trial_rows(
        [xcoms["slurm_async.plan"]["gpusched_sweep_plan"]],
        {o["trial_id"]: o for o in xcoms[arrays[0]]["gpusched_trial_outcomes"]},
        {},
    )
    assert [r["index"] for r in rows] == list(range(6)) and {r["state"] for r in rows} == {"succeeded"}


@pytest.mark.slurm
def test_a_command_trial_on_slurm_is_pruned_by_the_runner_in_its_job(airflow_db, sweeps_root, slurm_cluster):
    """The same rule on the Slurm cluster: the trial runner inside the bad trial's Slurm job reads its report
    lines, stops the command at step 1 or 2 (it would have run 30 s), and the job and its task end green."""
    from .conftest import load_dag_file

    module = load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_sweeps.py")
    run = module.pruned_slurm_peers.test()
    assert run.state == "success", dag_run_results(run)[1]
    run = module.pruned_slurm.test()
    xcoms, states = dag_run_results(run)
    assert run.state == "success", states
    trials = sorted(k for k in states if isinstance(k, tuple) and k[0] == "pruned_slurm.trial")
    assert [states[k] for k in trials] == [("success", 1)]
    assert xcoms["pruned_slurm.collect"]["return_value"]["counts"]["pruned"] == 1
    record = [
        r
        for r in json.loads(Path(sweeps_root / "pruned_slurm" / "summary.json").read_text())["records"]
        if r["params"]["q"] == 5.0
    ][0]
    assert record["state"] == "pruned" and 1 <= record["reports"]["last_step"] <= 3, record
    assert record["slurm_job"] and record["seconds"] < 20, record  # stopped, not run for 30 s


def test_a_pruned_trial_ends_its_task_green_and_is_counted(run, sweeps_root):
    """On local GPUs through Airflow: the bad trial is stopped at step 1 by median stopping against the two
    peers of an earlier run, its task succeeds (no retry, no failed run), and collect counts it as pruned, not
    failed."""
    from .conftest import load_dag_file

    dags = load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_sweeps.py")
    state, _, states = run(dags.pruned_local_peers)
    assert state == "success", states
    state, xcoms, states = run(dags.pruned_local)
    assert state == "success", states
    trials = sorted(k for k in states if isinstance(k, tuple) and k[0] == "pruned_local.trial")
    assert [states[k] for k in trials] == [("success", 1)]  # only the new trial runs; one try: not retried
    summary = xcoms["pruned_local.collect"]["return_value"]
    assert summary["counts"]["pruned"] == 1 and summary["counts"]["succeeded"] == 2 and summary["counts"]["failed"] == 0
    record = [
        r
        for r in json.loads(Path(sweeps_root / "pruned_local" / "summary.json").read_text())["records"]
        if r["params"]["q"] == 5.0
    ][0]
    assert record["state"] == "pruned" and record["reports"]["last_step"] == 1
    assert "median stopping at step 1" in record["error"]


def test_a_sweep_folder_of_another_dag_is_refused_and_conf_force_rerun_redoes_done_trials(
    airflow_db, monkeypatch, capfd
):
    """Issue 30, item 11 through Airflow: the DAG that planned first owns the folder, another DAG with the same sweep
    name fails at plan saying so. A run triggered with {"force_rerun": true} runs every trial again; a conf value
    that is not a boolean is refused."""
    import uuid

    from .conftest import load_dag_file

    monkeypatch.setenv("GPUSCHED_TEST_SWEEP", f"owned_{uuid.uuid4().hex[:6]}")
    dags = load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_sweep_owner.py")
    state, _, states = run_and_collect(dags.private)
    assert state == "success", states
    state, _, states = run_and_collect(dags.private)  # nothing left to do: both trials skipped
    assert state == "success" and not [k for k in states if isinstance(k, tuple)], states
    state, xcoms, states = run_and_collect(dags.private, run_conf={"force_rerun": True})
    assert state == "success" and len([k for k in states if isinstance(k, tuple)]) == 2, states
    capfd.readouterr()
    state, _, states = run_and_collect(dags.private, run_conf={"force_rerun": "yes"})
    assert state == "failed" and "force_rerun: expected true or false, got 'yes'" in capfd.readouterr().out
    state, _, states = run_and_collect(dags.public)
    plan = [v for k, v in states.items() if (k[0] if isinstance(k, tuple) else k).endswith(".plan")]
    assert state == "failed" and plan and plan[0][0] == "failed", states
    assert "belongs to DAG 't_sweep_owner_private'; DAG 't_sweep_owner_public' cannot use it" in capfd.readouterr().out
