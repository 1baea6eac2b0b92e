"""Sweep analysis without Airflow: parameter importance (Optuna's PED-ANOVA, and the fallback without Optuna) over
every scored trial, and two runs of one sweep compared trial by trial."""

import random
import sys

import pytest

from airflow_provider_gpusched.core.sweep import Objective
from airflow_provider_gpusched.core.sweep.results.analysis import MIN_TRIALS, compare_runs, param_importance
from airflow_provider_gpusched.core.sweep.results.view import (
    param_axes,
    read_plan_record,
    scored_points,
    sweep_objective,
    trial_rows,
)


def published(n, score, seed=0, mode="maximize", run="manual__a", ids=None):
    """The plan and outcomes a sweep of ``n`` trials publishes (lr log-uniform, wd uniform, opt categorical),
    ``score(params, rnd)`` its objective."""
    rnd = random.Random(seed)
    trials = []
    for i in range(n):
        params = {"lr": 10 ** rnd.uniform(-5, -1), "wd": rnd.uniform(0, 0.1), "opt": rnd.choice(["sgd", "adam"])}
        trials.append({"index": i, "trial_id": (ids or (lambda k: f"{k:012x}"))(i), "label": f"t{i}", "params": params})
    plan = read_plan_record(
        {
            "sweep": "s",
            "search": "random",
            "round": None,
            "backend": "local",
            "trial_task": "s.trial",
            "chunk_size": None,
            "run": run,
            "objective": {"metric": "acc", "mode": mode},
            "defined": n,
            "trials": trials,
            "pending": [t["trial_id"] for t in trials],
            "skipped": [],
            "log_params": ["lr"],
        },
        "plan",
    )
    outcomes = {
        t["trial_id"]: {
            "trial_id": t["trial_id"],
            "state": "succeeded",
            "seconds": 1.0,
            "error": None,
            "result": {"acc": score(t["params"], rnd)},
        }
        for t in trials
    }
    return [plan], outcomes


def importance_of(n, score, **kw):
    plans, outcomes = published(n, score)
    objective = sweep_objective(plans)
    points, values, categories = scored_points(trial_rows(plans, outcomes, {}), objective)
    return param_importance(points, param_axes(plans, values, categories), objective, **kw)


def lr_matters(p, rnd):  # the score peaks at lr = 1e-3; adam adds a little; wd is noise
    import math

    return -abs(math.log10(p["lr"]) + 3) + (0.3 if p["opt"] == "adam" else 0) + rnd.gauss(0, 0.05)


@pytest.mark.heavy  # 0.7 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
@pytest.mark.parametrize("use_optuna", [True, False])
def test_the_parameter_that_drives_the_score_ranks_first(use_optuna):
    found = importance_of(400, lr_matters, use_optuna=use_optuna)
    names = [x["name"] for x in found["importances"]]
    assert names[0] == "lr" and names[-1] == "wd", found
    assert sum(x["importance"] for x in found["importances"]) == pytest.approx(1.0, abs=1e-3)
    assert found["trials"] == 400 and found["metric"] == "acc"
    assert found["method"] == ("optuna-ped-anova" if use_optuna else "variance-explained")
    assert found["method_label"]


def test_without_optuna_the_fallback_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna raises ImportError
    found = importance_of(100, lr_matters)
    assert found["method"] == "variance-explained"
    assert "Optuna is not installed" in found["note"]
    assert found["importances"][0]["name"] == "lr"


def test_too_few_trials_or_no_varying_parameter_gives_no_ranking():
    few = importance_of(MIN_TRIALS - 1, lr_matters)
    assert few["importances"] == [] and f"at least {MIN_TRIALS}" in few["note"] and "pruned" not in few["note"]
    # issue 52: a 12-trial sweep whose pruning stopped 7 never showed importance, and did not say why
    pruned = importance_of(5, lr_matters, pruned=7)
    assert pruned["importances"] == [] and pruned["note"].startswith(
        f"5 scored trial(s): importance needs at least {MIN_TRIALS}; the 7 pruned trial(s) have no final score"
    )
    assert "prune later (warmup_steps, min_trials)" in pruned["note"]
    objective = Objective("acc")
    none = param_importance(
        [{"score": 1.0, "params": {}, "categories": {}}] * 20,
        {"numeric_params": [], "param_scales": {}, "categorical_params": {}},
        objective,
    )
    assert none["importances"] == [] and "no parameter varies" in none["note"]


def test_two_runs_of_a_sweep_are_compared_trial_by_trial():
    objective = Objective("loss", "minimize")
    a = [{"trial_id": f"t{k}", "index": k, "label": f"x={k}", "score": float(k)} for k in range(5)]
    b = [
        {
            "trial_id": f"t{k}",
            "index": k,
            "label": f"x={k}",
            "score": float(k) + (0.5 if k == 1 else 0) - (4.0 if k == 4 else 0),
        }
        for k in range(1, 7)
    ]
    out = compare_runs(
        {"run": "r1", "points": a, "counts": {"succeeded": 5}},
        {"run": "r2", "points": b, "counts": {"succeeded": 6}},
        objective,
    )
    assert (out["both"], out["only_a"], out["only_b"]) == (4, 1, 2)
    assert [(p["trial_id"], p["diff"]) for p in out["pairs"][:2]] == [("t4", -4.0), ("t1", 0.5)]
    assert (out["changed"], out["better_in_b"], out["worse_in_b"]) == (2, 1, 1)  # lower loss is better
    assert out["a"]["best"]["trial_id"] == "t0" and out["b"]["best"]["trial_id"] == "t4"
    assert out["a"]["best_so_far"][0] == [0, 0.0] and out["b"]["scored"] == 6
