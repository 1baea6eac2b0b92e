"""Several objectives: Pareto fronts, scalarisation, the leaderboard, Optuna's multi-objective studies and
evolution's non-dominated selection."""

import io
import json
import math
import random
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, uniform
from airflow_provider_gpusched.core.sweep.parts.objective import (
    crowding_distances,
    format_leaderboard,
    leaderboard,
    pareto_front,
    pareto_fronts,
)
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
from airflow_provider_gpusched.core.sweep.running.trial_run import run_trial
from airflow_provider_gpusched.core.sweep.searches.evolution import EvolutionSearch, EvolutionSettings

ACC_LAT = Objective(["acc", "lat"], ["maximize", "minimize"])


def dominates(a, b, modes):
    signs = [1 if m == "maximize" else -1 for m in modes]
    a = [s * v for s, v in zip(signs, a, strict=True)]
    b = [s * v for s, v in zip(signs, b, strict=True)]
    return all(x >= y for x, y in zip(a, b, strict=True)) and a != b


def brute_force_fronts(points, modes):
    left, fronts = list(range(len(points))), []
    while left:
        front = [i for i in left if not any(dominates(points[j], points[i], modes) for j in left)]
        fronts.append(front)
        left = [i for i in left if i not in front]
    return fronts


@pytest.mark.parametrize("metrics", [2, 3])
def test_pareto_fronts_match_the_definition_on_random_points_with_ties(metrics):
    rng = random.Random(metrics)
    modes = ["maximize", "minimize", "maximize"][:metrics]
    for case in range(60):
        points = [tuple(rng.randint(0, 6) for _ in range(metrics)) for _ in range(rng.randint(1, 40))]
        assert pareto_fronts(points, modes) == brute_force_fronts(points, modes), (case, points)
        # enough: fronts stop once they hold that many points, and are the same fronts
        some = pareto_fronts(points, modes, enough=5)
        assert some == brute_force_fronts(points, modes)[: len(some)]
        assert sum(map(len, some)) >= min(5, len(points)) and sum(map(len, some[:-1])) < 5


@pytest.mark.heavy  # 0.6 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_large_fronts_of_three_metrics_are_checked_with_numpy_and_match_the_definition():
    rng = random.Random(7)
    modes = ["maximize", "minimize", "maximize"]
    # points on a plane (a + c - b = 9: no point dominates another) with some repeated: one front of hundreds
    points = [(a, a + c - 9, c) for a, c in [(rng.randint(0, 60), rng.randint(0, 60)) for _ in range(300)]]
    points += [(rng.randint(0, 60), rng.randint(100, 200), rng.randint(0, 60)) for _ in range(100)]  # some behind
    fronts = pareto_fronts(points, modes)
    assert len(fronts[0]) > 64  # past NUMPY_FRONT
    assert fronts == brute_force_fronts(points, modes)


def test_crowding_distance_keeps_the_ends_and_prefers_the_sparse_middle():
    points = [(0, 10), (1, 9), (1.2, 8.8), (5, 5), (10, 0)]
    d = crowding_distances(points)
    assert d[0] == d[4] == math.inf
    assert d[3] > d[1] and d[3] > d[2]
    assert crowding_distances([(1, 2), (3, 4)]) == [math.inf, math.inf]


def records(pairs):
    return [
        {"state": "succeeded", "result": {"acc": a, "lat": lat}, "index": i, "label": f"t{i}", "trial_id": f"id{i}"}
        for i, (a, lat) in enumerate(pairs)
    ]


PAIRS = [(0.9, 10), (0.8, 5), (0.85, 12), (0.7, 4), (0.9, 11), (0.6, 20)]


def test_leaderboard_ranks_by_front_then_by_the_first_metric():
    board = leaderboard(
        records(PAIRS)
        + [
            {"state": "succeeded", "result": {"acc": 0.99}, "index": 9, "label": "x", "trial_id": "no-lat"},
            {"state": "failed", "result": None, "index": 10},
        ],
        ACC_LAT,
        top_n=10,
    )
    assert [(r["label"], r["front"]) for r in board] == [
        ("t0", 1),
        ("t1", 1),
        ("t3", 1),
        ("t4", 2),
        ("t2", 3),
        ("t5", 4),
    ]
    assert board[0]["values"] == {"acc": 0.9, "lat": 10.0}
    text = format_leaderboard(board, ACC_LAT)
    assert "front" in text and "acc (max)" in text and "lat (min)" in text
    assert [r["label"] for r in pareto_front(records(PAIRS), ACC_LAT)] == ["t0", "t1", "t3"]
    # the top 3 are the whole first front: later fronts are not numbered
    assert [r["label"] for r in leaderboard(records(PAIRS), ACC_LAT, top_n=3)] == ["t0", "t1", "t3"]


def test_weights_rank_by_the_signed_weighted_sum_and_still_show_the_front():
    weighted = Objective(["acc", "lat"], ["maximize", "minimize"], weights={"acc": 1, "lat": 0.01})
    board = leaderboard(records(PAIRS), weighted, top_n=10)
    assert [r["label"] for r in board] == ["t0", "t4", "t1", "t2", "t3", "t5"]
    assert board[0]["score"] == pytest.approx(0.9 - 0.1) and board[2]["front"] == 1 and board[1]["front"] == 2
    assert weighted.score_label == "weighted sum (+1*acc -0.01*lat)" and weighted.maximize
    assert "weighted sum" in format_leaderboard(board, weighted)


def test_objectives_are_checked_and_read_from_text_and_mappings(tmp_path):
    assert Objective.parse("maximize acc, minimize R['eval']['lat']") == Objective(
        ["acc", "eval.lat"], ["maximize", "minimize"]
    )
    assert Objective(**ACC_LAT.to_dict()) == ACC_LAT
    spec = SweepSpec(
        name="s",
        space={"x": [1, 2]},
        command=["true"],
        results_root=str(tmp_path),
        objective={"metric": ["acc", "lat"], "mode": ["maximize", "minimize"], "weights": [1, 0.5]},
    )
    assert spec.objective.weights == (1.0, 0.5)
    bad = [
        (dict(metric=["acc", "lat"], mode=["maximize"]), "objective.mode", "one mode per metric"),
        (dict(metric=["acc"]), "objective.metric", "two or more"),
        (dict(metric=["acc", "acc"]), "objective.metric", "distinct"),
        (dict(metric="acc", weights=[1]), "objective.weights", "only with several"),
        (dict(metric=["acc", "lat"], weights=[1, -1]), "objective.weights", ">= 0"),
        (dict(metric=["acc", "lat"], weights={"loss": 1}), "objective.weights.loss", "one of the metrics"),
        (dict(metric=["acc", "lat"], mode=["maximize", "best"]), "objective.mode", "'maximize' or 'minimize'"),
    ]
    for kwargs, argument, expected in bad:
        with pytest.raises(InvalidArgumentError) as err:
            Objective(**kwargs)
        assert err.value.argument == argument and expected in err.value.expected, kwargs
    with pytest.raises(InvalidArgumentError) as err:
        Objective.parse("maximize acc, lat")
    assert "several separated by commas" in str(err.value)
    # a missing second metric makes the result invalid, naming it
    assert ACC_LAT.problem({"acc": 1}) == "the result has no 'lat' (its keys: acc)"
    assert ACC_LAT.values(0.5) is None and ACC_LAT.problem(0.5).startswith("the result is float")


def test_pruning_judges_the_first_metric_unless_told_otherwise(tmp_path):
    def make(pruning):
        return SweepSpec(
            name="p",
            space={"x": [1, 2]},
            command=["true"],
            results_root=str(tmp_path),
            objective=Objective(["acc", "lat"], ["maximize", "minimize"]),
            pruning=pruning,
        )

    assert (make("median").pruning.metric, make("median").pruning.mode) == ("acc", "maximize")
    rule = make({"rule": "median", "metric": "lat"}).pruning
    assert (rule.metric, rule.mode) == ("lat", "minimize")


def run_rounds(session, rounds):
    for r in rounds:
        manifest = session.prepare(round_no=r)
        for t in manifest.pending:
            run_trial(manifest, t, out=io.StringIO())
        session.finish_round(r)
    return session.collect()


def nas(root, name="nas", objective="maximize acc, minimize flops", rounds=6, seed=2, constraints=None):
    # acc = sum of the choices, flops = sum of their squares: the front spreads the sum evenly
    def measure(p):
        return {"flops": sum(v * v for v in p.values())}

    return SweepSpec(
        name=name,
        search="evolution",
        space={f"op{i}": [0, 1, 2, 3] for i in range(5)},
        seed=seed,
        python_callable=lambda p: {"acc": sum(p.values()), "flops": sum(v * v for v in p.values())},
        objective=objective,
        results_root=str(root),
        evolution=EvolutionSettings(
            candidate_pool_size=8,
            candidate_top_k=6,
            num_mutation=4,
            num_crossover=4,
            mutate_prob=0.3,
            max_epoch=rounds,
            constraints=constraints or {},
            measure=measure,
        ),
    )


def test_evolution_with_two_objectives_keeps_the_front_as_parents_under_its_constraints(tmp_path):
    summary = run_rounds(SweepSession(nas(tmp_path, constraints={"flops": 30})), range(6))
    evaluated = [
        r
        for r in json.loads(Path(tmp_path / "nas" / "summary.json").read_text())["records"]
        if r["state"] == "succeeded"
    ]
    assert len(evaluated) == 48 and all(r["result"]["flops"] <= 30 for r in evaluated)  # never proposed beyond
    points = [(r["result"]["acc"], r["result"]["flops"]) for r in evaluated]
    expected = {evaluated[i]["trial_id"] for i in brute_force_fronts(points, ["maximize", "minimize"])[0]}
    assert {r["trial_id"] for r in summary["pareto_front"]} == expected
    front = json.loads(Path(tmp_path / "nas" / "pareto.json").read_text())["front"]
    assert {r["trial_id"] for r in front} == expected
    # the parents are the first front when it has k or more members, its ends kept by crowding distance
    search = EvolutionSearch(nas(tmp_path), str(tmp_path / "nas" / "search"))
    history = search.history()
    fronts = pareto_fronts([h["values"] for h in history], ["maximize", "minimize"])
    parents = search.top_k()
    assert len(parents) == 6
    keys = {json.dumps(h["params"], sort_keys=True) for h in parents}
    first = [history[i] for i in fronts[0]]
    assert len(first) >= 6 and keys <= {json.dumps(h["params"], sort_keys=True) for h in first}
    accs = [h["values"][0] for h in first]
    assert {max(accs), min(accs)} <= {h["values"][0] for h in parents}


def test_evolution_parents_fill_from_the_next_front_when_the_first_is_small(tmp_path):
    search = EvolutionSearch(nas(tmp_path), str(tmp_path / "search"))
    for params, values in [
        ({"op0": 0}, (5, 1)),
        ({"op0": 1}, (4, 1)),
        ({"op0": 2}, (3, 2)),
        ({"op0": 3}, (1, 9)),
        ({"op1": 0}, (2, 9)),
        ({"op1": 1}, (6, 3)),
        ({"op1": 2}, (0, 0)),
    ]:
        search._record({"origin": "test"}, params, values)
    # fronts: {5/1, 6/3, 0/0} then {4/1, 2/9?...}: 4/1 is dominated by 5/1 only, 3/2 by 5/1 and 4/1
    fronts = pareto_fronts([h["values"] for h in search.history()], ["maximize", "minimize"])
    assert [sorted(tuple(search.history()[i]["values"]) for i in f) for f in fronts][:2] == [
        [(0, 0), (5, 1), (6, 3)],
        [(4, 1)],
    ]
    assert [tuple(h["values"]) for h in search.top_k()][:4] == [(5, 1), (6, 3), (0, 0), (4, 1)]


def test_evolution_with_weights_ranks_parents_by_the_weighted_sum(tmp_path):
    objective = Objective(["acc", "flops"], ["maximize", "minimize"], weights=[1, 0.25])
    run_rounds(SweepSession(nas(tmp_path, objective=objective, rounds=3)), range(3))
    search = EvolutionSearch(nas(tmp_path, objective=objective), str(tmp_path / "nas" / "search"))
    history = [h for h in search.history() if h["score"] is not None]
    for h in history:
        assert h["score"] == pytest.approx(h["values"][0] - 0.25 * h["values"][1])
    assert [h["score"] for h in search.top_k()] == sorted((h["score"] for h in history), reverse=True)[:6]


@pytest.mark.parametrize("sampler", ["tpe", "nsga2"])
def test_optuna_runs_a_multi_objective_study_and_the_leaderboard_shows_its_front(tmp_path, sampler):
    optuna = pytest.importorskip("optuna")

    def spec(objective=None):
        objective = objective or Objective(["a", "b"], ["minimize", "minimize"])
        return SweepSpec(
            name="mo",
            search="optuna",
            sampler=sampler,
            space={"x": uniform(0, 1), "y": uniform(0, 1)},
            rounds=3,
            per_round=6,
            seed=1,
            results_root=str(tmp_path),
            objective=objective,
            python_callable=lambda p: {"a": p["x"], "b": (1 - p["x"]) ** 2 + 0.1 * p["y"]},
        )

    summary = run_rounds(SweepSession(spec()), range(3))
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    study = optuna.load_study(
        study_name="mo", storage=JournalStorage(JournalFileBackend(str(tmp_path / "mo" / "search" / "optuna.journal")))
    )
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert len(study.directions) == 2 and len(complete) == 18 and all(len(t.values) == 2 for t in complete)
    # the sweep's front is Optuna's own best_trials
    assert {round(r["values"]["a"], 12) for r in summary["pareto_front"]} == {
        round(t.values[0], 12) for t in study.best_trials
    }
    assert summary["leaderboard"][0]["front"] == 1
    # the same journal with one objective is refused, saying why
    with pytest.raises(GpuschedError) as err:
        _ = SweepSession(spec(Objective("a", "minimize"))).search
    assert "other directions" in str(err.value) or "does not match" in str(err.value)


def test_optuna_with_weights_optimises_the_weighted_sum_as_one_objective(tmp_path):
    optuna = pytest.importorskip("optuna")
    objective = Objective(["a", "b"], ["minimize", "minimize"], weights=[1, 1])
    spec = SweepSpec(
        name="w",
        search="optuna",
        space={"x": uniform(0, 1)},
        rounds=2,
        per_round=4,
        seed=1,
        results_root=str(tmp_path),
        objective=objective,
        python_callable=lambda p: {"a": p["x"], "b": (1 - p["x"]) ** 2},
    )
    summary = run_rounds(SweepSession(spec), range(2))
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    study = optuna.load_study(
        study_name="w", storage=JournalStorage(JournalFileBackend(str(tmp_path / "w" / "search" / "optuna.journal")))
    )
    assert [d.name for d in study.directions] == ["MAXIMIZE"]  # the signed weighted sum, higher is better
    best = summary["best"]
    assert study.best_value == pytest.approx(best["score"])
    assert best["score"] == pytest.approx(-(best["values"]["a"] + best["values"]["b"]))
