"""The drop-in examples that really train (dags/digits_*.py), run for real on the CPU through dag.test():
PyTorch trains on scikit-learn's digits, on SIMULATED GPU leases (4 x 24 GiB; a CPU build of PyTorch sees
no GPU, so the training itself runs on the CPU). The figures they produce are in docs/examples.md."""

import json
from collections import Counter

import pytest

from ..polling import need_torch
from .conftest import REPO, dag_run_results, load_dag_file, preempted_by_normal_work, run_and_collect, the_dag

pytestmark = pytest.mark.airflow
CHANCE = 0.1  # ten classes


@pytest.fixture(autouse=True)
def _torch():
    need_torch()


@pytest.fixture
def sweeps_root(tmp_path, monkeypatch):
    root = tmp_path / "sweeps"
    monkeypatch.setenv("AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT", str(root))
    return root


def records(root, sweep):
    return json.loads((root / sweep / "summary.json").read_text())["records"]


def test_optuna_tpe_search_with_median_pruning_trains_and_prunes(airflow_db, sweeps_root):
    state, xcoms, states = run_and_collect(the_dag(REPO / "dags" / "digits_hpo.py"))
    assert state == "success", states
    rows = records(sweeps_root, "digits_hpo")
    assert len(rows) == 9
    done = [r for r in rows if r["state"] == "succeeded"]
    pruned = [r for r in rows if r["state"] == "pruned"]
    assert done and pruned, [(r["state"], r["reports"]) for r in rows]
    # every epoch was reported; a complete trial reported all 10, a pruned one stopped early
    assert all(r["reports"]["last_step"] == 10 and r["result"]["epochs"] == 10 for r in done)
    assert all(2 <= r["reports"]["last_step"] < 10 for r in pruned)
    assert max(r["reports"]["last_step"] for r in pruned) < min(r["reports"]["last_step"] for r in done)
    best = xcoms["digits_hpo.leaderboard"]["return_value"]
    assert best["score"] > 0.9 > CHANCE  # digits: well above chance within 10 epochs
    assert best["score"] == max(r["result"]["accuracy"] for r in done)
    # the accuracy each trial returned is the one it reported last (a real curve, not a made-up score)
    for r in done:
        curve = [c["accuracy"] for c in r["result"]["curve"]]
        assert len(curve) == 10 and curve[-1] == r["result"]["accuracy"]
        assert r["reports"]["last"]["accuracy"] == pytest.approx(curve[-1], abs=1e-5)
    # TPE tuned what it was given: every trial's parameters are in the space
    for r in rows:
        p = r["params"]
        assert 1e-4 <= p["lr"] <= 1e-1 and p["width"] in (16, 32, 64, 128) and 0 <= p["dropout"] <= 0.5
        assert p["epochs"] == 10 and p["model"] == "mlp"


def test_bohb_example_searches_asynchronously_and_hyperband_prunes_in_the_shared_study(airflow_db, sweeps_root):
    """dags/digits_bohb.py through dag.test(): worker tasks ask the study for trials (dag.test runs tasks one at a
    time, so the first worker takes them all and the others find the budget spent); Optuna's HyperbandPruner stops
    trials at the rungs of their brackets; every trial is in the study once, with its whole curve."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    state, xcoms, states = run_and_collect(the_dag(REPO / "dags" / "digits_bohb.py"))
    assert state == "success", (
        states,
        {k: v for k, v in xcoms.get("digits_bohb.collect", {}).get("return_value", {}).items() if k != "text"},
        [(r["index"], r["state"], r.get("run"), r.get("error")) for r in records(sweeps_root, "digits_bohb")],
    )
    workers = sorted(k for k in states if isinstance(k, tuple) and k[0] == "digits_bohb.run_batch")
    assert len(workers) == 3 and all(states[k][0] == "success" for k in workers)
    rows = records(sweeps_root, "digits_bohb")
    assert len(rows) == 12
    pruned = [r for r in rows if r["state"] == "pruned"]
    done = [r for r in rows if r["state"] == "succeeded"]
    assert pruned and done and len(pruned) + len(done) == 12
    assert all("HyperbandPruner in the sweep's study" in r["error"] for r in pruned)
    # stopped at a rung of its bracket (1, 3 or 9 epochs: the last rung may stop a trial too, as Optuna's does)
    assert all(r["reports"]["last_step"] in (1, 3, 9) for r in pruned) and any(
        r["reports"]["last_step"] < 9 for r in pruned
    )
    assert all(r["result"]["epochs"] == 9 for r in done)
    journal = JournalFileBackend(str(sweeps_root / "digits_bohb" / "search" / "optuna.journal"))
    study = optuna.load_study(study_name="digits_bohb", storage=JournalStorage(journal))
    assert sorted(t.user_attrs["trial_id"] for t in study.trials) == sorted(r["trial_id"] for r in rows)
    assert {t.state.name for t in study.trials} == {"COMPLETE", "PRUNED"}
    best = xcoms["digits_bohb.leaderboard"]["return_value"]
    assert best["score"] == max(r["result"]["accuracy"] for r in done) > 0.9
    # the Sweeps page's rows: every trial, from the workers' published outcomes (no plan lists them)
    from airflow_provider_gpusched.core.sweep.results.view import trial_counts, trial_rows

    plan = xcoms["digits_bohb.plan"]["gpusched_sweep_plan"]
    outcomes = {o["trial_id"]: o for k in workers for o in xcoms[k].get("gpusched_trial_outcomes", [])}
    view = trial_rows([plan], outcomes, {})
    assert [r["index"] for r in view] == list(range(12))
    assert Counter(r["state"] for r in view) == Counter(r["state"] for r in rows)
    counts = trial_counts([plan], view)
    assert counts["defined"] == 12 and counts["succeeded"] + counts["pruned"] == 12


def test_pbt_example_trains_in_generations_and_the_worst_member_goes_on_from_the_best_ones_checkpoint(
    airflow_db, sweeps_root
):
    """dags/digits_pbt.py through dag.test(): 4 members, 2 generations of 3 epochs; in generation 1 the worst member
    starts from the best one's checkpoint (epoch 3) with perturbed values, every other from its own."""
    state, xcoms, states = run_and_collect(the_dag(REPO / "dags" / "digits_pbt.py"))
    assert state == "success", states
    rows = {r["trial_id"]: r for r in records(sweeps_root, "digits_pbt")}
    assert len(rows) == 8 and {r["state"] for r in rows.values()} == {"succeeded"}
    lineage = json.loads((sweeps_root / "digits_pbt" / "search" / "pbt.json").read_text())
    members, exploits = lineage["members"], lineage["exploits"]
    assert len(exploits) == 1 and exploits[0]["generation"] == 1 and exploits[0]["step"] == 3
    worst, best = exploits[0]["member"], exploits[0]["from_member"]
    first = [m[0]["score"] for m in members]
    assert first[worst] == min(first) and first[best] == max(first)
    for k, m in enumerate(members):
        later = rows[m[1]["trial_id"]]["result"]
        assert later["resumed_from"] == {"epoch": 3, "batch": 0} and later["epochs_run"] == 3
        source = members[best][0] if k == worst else m[0]
        # its curve goes on from its source's: the first 3 epochs are the source trial's own
        assert later["curve"][:3] == rows[source["trial_id"]]["result"]["curve"]
        assert m[1]["score"] == later["accuracy"]
    assert members[worst][1]["hyper"] != members[best][0]["hyper"]  # explored
    assert max(m[1]["score"] for m in members) > 0.9
    # the Sweeps tab's population, from the plans the rounds published and the lineage and reports as the
    # api-server reads them: each member's curve over both generations, the exploit where it happened
    from airflow_provider_gpusched.core.sweep.records.reports import read_reports
    from airflow_provider_gpusched.core.sweep.results.view import build_sweep_view, report_paths
    from airflow_provider_gpusched.core.sweep.searches.pbt import read_lineage

    plans = [xcoms[f"digits_pbt.round_{g}.plan"]["gpusched_sweep_plan"] for g in (0, 1)]
    paths = report_paths(plans)
    read, why = read_lineage(str(sweeps_root / "digits_pbt"))
    assert why == "", why
    view = build_sweep_view(plans, {}, {}, reports=lambda t: read_reports(paths[t])[0], lineage=read)
    population = view["population"]
    assert population["metric"] == "accuracy" and population["params"] == ["dropout", "lr"]
    assert [[p[0] for p in m["curve"]] for m in population["members"]] == [[1, 2, 3, 4, 5, 6]] * 4
    assert [(e["member"], e["from_member"], e["step"]) for e in population["exploits"]] == [(worst, best, 3)]
    assert [g["from_member"] for g in population["members"][worst]["generations"]] == [None, best]


def test_nas_evolution_keeps_every_candidate_within_its_flops_and_parameter_budget(airflow_db, sweeps_root):
    import torch

    from airflow_provider_gpusched.examples.digits import INPUT_SHAPE, build_model

    module = load_dag_file(REPO / "dags" / "digits_nas.py")
    state, xcoms, states = run_and_collect(module.digits_nas_dag)
    assert state == "success", states
    rows = records(sweeps_root, "digits_nas")
    assert len(rows) == 12 and all(r["state"] == "succeeded" for r in rows)
    budget = module.BUDGET
    for r in rows:
        # measured again here, from the model, with PyTorch's FLOP counter (not through the search's evaluator)
        model = build_model(r["params"])
        with torch.no_grad(), torch.utils.flop_counter.FlopCounterMode(display=False) as counter:
            model.eval()(torch.zeros(*INPUT_SHAPE))
        flops, params = counter.get_total_flops(), sum(p.numel() for p in model.parameters())
        assert flops <= budget["flops"] * 1000 and params <= budget["params"] * 1000, r["params"]
        # and the trial reports the same cost for the model it trained
        assert (r["result"]["flops"], r["result"]["params"]) == (flops, params)
    # the budget binds: the space holds candidates outside it, which the search never proposed
    too_big = {f"block{i}": {"channels": 48, "kernel": 5} for i in range(3)}
    assert module.DIGITS_NAS.evolution.measure({"model": "cnn", **too_big})["flops"] > budget["flops"]
    best = xcoms["digits_nas.leaderboard"]["return_value"]
    assert best["score"] > 0.9
    assert json.loads((sweeps_root / "digits_nas" / "best.json").read_text())["score"] == best["score"]


FAST_CLASSES = json.dumps(
    {"idle": {"local": {"idle_for": 0, "min_runtime": 0, "grace_period": 10, "backoff": 0.5, "max_backoff": 1}}}
)


def test_idle_training_is_preempted_by_normal_work_and_resumes_from_its_checkpoint(airflow_db, monkeypatch):
    """t_digits_preempt holds its first start after epoch 3 until SIGTERM arrives, so that the preemption always
    comes mid-training, however fast this machine trains."""
    import os

    from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager

    dagfile = REPO / "tests" / "airflow" / "dagfiles" / "t_digits_preempt.py"
    monkeypatch.setenv("AIRFLOW__GPUSCHED__JOB_CLASSES", FAST_CLASSES)
    manager = LeaseManager(SimulatedInventory("4x24GiB"), os.environ["AIRFLOW__GPUSCHED__GPU_STATE_DIR"])
    normal, state, xcoms, states = preempted_by_normal_work(
        load_dag_file(dagfile).idle_training, dagfile, "t_digits_urgent", manager, wait=180
    )
    assert normal.get("state") == "success", normal
    assert state == "success", states
    assert states["train"] == ("success", 1)  # relaunched within the same try
    result = xcoms["train"]["return_value"]
    gpu_time = xcoms["train"]["gpu_time"]
    assert gpu_time["preemptions"] == 1 and "preempted for t_digits_urgent.urgent" in gpu_time["events"][0]
    # stopped at the checkpoint it saved on SIGTERM (after epoch 3), resumed from that epoch, not from 0
    assert result["stops"] == [{"epoch": 3, "batch": 0}]
    assert result["resumed_from"] == {"epoch": 3, "batch": 0}
    assert result["starts"] == [{"epoch": 0, "batch": 0}, {"epoch": 3, "batch": 0}]
    assert result["epochs"] == 8 and result["epochs_run"] == 5  # 3 epochs not trained again
    assert [c["epoch"] for c in result["curve"]] == list(range(1, 9))
    assert result["accuracy"] > 0.9
    assert manager.leases() == []


def test_idle_training_example_runs_and_the_urgent_dag_trains(airflow_db):
    module = load_dag_file(REPO / "dags" / "digits_idle_training.py")
    from airflow.sdk import DAG

    dags = {v.dag_id: v for v in vars(module).values() if isinstance(v, DAG)}
    run = dags["gpusched_digits_idle_training"].test(run_conf={"epochs": 3})
    xcoms, states = dag_run_results(run)
    assert run.state == "success", states
    result = xcoms["train"]["return_value"]
    assert result["epochs"] == 3 and result["resumed_from"] is None and result["accuracy"] > 0.5
    assert dags["gpusched_digits_idle_training"].task_dict["train"].pool == "gpusched_idle"
    state, xcoms, states = run_and_collect(dags["gpusched_digits_urgent"])
    assert state == "success", states


def test_python_function_task_returns_the_trained_models_metrics(airflow_db):
    module = load_dag_file(REPO / "dags" / "digits_python_tasks.py")
    state, xcoms, states = run_and_collect(module.digits_local_task_dag)
    assert state == "success", states
    best = xcoms["compare"]["return_value"]
    assert best["accuracy"] > 0.9 and best["device"] == "cpu"
    gpus = [xcoms[("train", i)]["gpus_used"] for i in range(2)]
    assert all(g and g[0]["simulated"] for g in gpus)  # each ran on its own (simulated) GPU lease
    cnn = xcoms[("train", 1)]["return_value"]
    assert cnn["model"] == "cnn" and cnn["flops"] > 0 and len(cnn["curve"]) == cnn["epochs"] == 6


@pytest.mark.slurm
def test_python_function_task_on_slurm_returns_the_trained_models_metrics(run_dag):
    module = load_dag_file(REPO / "dags" / "digits_python_tasks.py")
    state, xcoms, states = run_dag(module.digits_slurm_task_dag)
    assert state == "success", states
    results = [xcoms[("train", i)]["return_value"] for i in range(2)]
    assert [r["model"] for r in results] == ["mlp", "cnn"]
    assert all(r["accuracy"] > 0.9 and len(r["curve"]) == r["epochs"] for r in results)
    assert all(xcoms[("train", i)]["slurm_job_id"] for i in range(2))


#: the chain example's training without a time limit, in a process of its own with one thread (as the job has)
UNINTERRUPTED = """
import json, sys
from airflow_provider_gpusched.examples.digits import train_digits
result = train_digits(json.loads(sys.argv[1]), checkpoints=sys.argv[2])
json.dump(result, open(sys.argv[3], "w"))
"""


@pytest.mark.slurm
def test_digits_training_crosses_time_limits_in_segments_and_ends_as_an_uninterrupted_run(run_dag, tmp_path):
    """Issue 57: the example's 2-minute job trains across at least 2 segments; its metrics, learning curve and
    weights equal, number for number, those of the same training run without a limit."""
    import os
    import subprocess
    import sys

    need_torch()
    from airflow_provider_gpusched.examples.checkpoints import Checkpoints
    from airflow_provider_gpusched.examples.digits import check_params

    module = load_dag_file(REPO / "dags" / "digits_slurm_chain.py")
    config = {**module.CNN, "epochs": 16}
    reference = subprocess.Popen(  # meanwhile, on this machine
        [sys.executable, "-c", UNINTERRUPTED, json.dumps(config), str(tmp_path / "ck"), str(tmp_path / "ref.json")],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    state, xcoms, states = run_dag(module.digits_slurm_chain_dag, run_conf={"epochs": 16, "epoch_pause": 6.0})
    assert reference.wait(timeout=300) == 0
    assert state == "success", states
    result = xcoms["train"]["return_value"]
    segments = xcoms["train"]["gpusched_slurm_job"]["segments"]
    # 16 epochs of 6 s or more (96 s): a segment trains at most the 80-110 s before its signal (its 2 minutes less
    # 10-40 s; issue 76: with 1 minute, a segment could be signalled before its first checkpoint)
    assert len(segments) >= 2, segments
    assert [s["outcome"] for s in segments] == ["requeued"] * (len(segments) - 1) + ["completed"]
    # each requeue follows a stop on the signal, but for one case: a segment whose training ended just as the signal
    # came exits 0 with a newer checkpoint, is requeued (docs/slurm.md), and its next segment has nothing left to do
    assert len(segments) - 2 <= len(result["stops"]) <= len(segments) - 1 and result["resumed_from"] is not None
    assert states["train"][1] == 1  # one try: the chain is one task's one job
    ref = json.loads((tmp_path / "ref.json").read_text())
    assert ref["stops"] == [] and ref["resumed_from"] is None
    for key in ("accuracy", "best_accuracy", "val_loss", "loss", "epochs", "curve", "params", "flops"):
        assert result[key] == ref[key], key
    chained = Checkpoints(os.path.dirname(result["checkpoint"]), fingerprint=check_params(config)).load()
    alone = Checkpoints(str(tmp_path / "ck"), fingerprint=check_params(config)).load()
    assert chained["model"].keys() == alone["model"].keys()
    for name, tensor in alone["model"].items():
        assert chained["model"][name].equal(tensor), name  # the same weights, bit for bit
