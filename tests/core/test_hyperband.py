"""Synchronous Hyperband (core/sweep/searches/hyperband.py): brackets of successive halving as rounds, real trial runner
processes on simulated GPUs (no GPU here), the checkpointing toy trainer of tests/core/test_pbt.py."""

import json

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
from airflow_provider_gpusched.core.sweep.running.terminal import run_sweep
from airflow_provider_gpusched.core.sweep.searches.hyperband import HyperbandSettings

from .test_pbt import manager
from .test_pbt import spec as pbt_spec


def spec(root, **kw):
    settings = {"search": "hyperband", "name": "hb", "pbt": None, "hyperband": {"max_t": 4, "reduction_factor": 2}}
    settings.update(kw)
    return pbt_spec(root, **settings)


def test_the_brackets_are_hyperbands():
    """Li et al.'s table for max_t = 81, eta = 3: (configurations, steps) of each rung of each bracket."""
    assert HyperbandSettings(max_t=81, reduction_factor=3).brackets() == {
        4: [(81, 1), (27, 3), (9, 9), (3, 27), (1, 81)],
        3: [(34, 3), (11, 9), (3, 27), (1, 81)],
        2: [(15, 9), (5, 27), (1, 81)],
        1: [(8, 27), (2, 81)],
        0: [(5, 81)],
    }
    assert HyperbandSettings(max_t=16, min_t=4, reduction_factor=2).brackets() == {
        2: [(4, 4), (2, 8), (1, 16)],
        1: [(3, 8), (1, 16)],
        0: [(3, 16)],
    }


@pytest.mark.heavy  # a trial process per rung member: 2.8 s of CPU
def test_each_rung_keeps_the_best_and_they_go_on_from_their_checkpoints(tmp_path):
    """max_t 4, eta 2: round 0 runs 4 configurations at 1 step, 3 at 2 and 3 at 4; round 1 the best 2 of the first
    bracket at 2 steps and the best of the second at 4; round 2 the better of those 2 at 4. 14 trials in all."""
    summary = run_sweep(spec(tmp_path), manager=manager(tmp_path), progress=False, run="r1")
    assert summary["counts"]["succeeded"] == 14
    record = SweepSession(spec(tmp_path), str(tmp_path)).search.record()["brackets"]
    assert {s: [len(rung) for rung in rungs] for s, rungs in record.items()} == {"2": [4, 2, 1], "1": [3, 1], "0": [3]}
    results = {}
    for rungs in record.values():
        for rung in rungs:
            for e in rung:
                folder = tmp_path / "hb" / "trials" / e["folder"].rsplit("/", 1)[-1]
                results[e["trial_id"]] = json.loads((folder / "result.json").read_text())
                assert results[e["trial_id"]]["end"]["step"] == e["steps"]
                assert e["score"] == pytest.approx(results[e["trial_id"]]["score"])
    for rungs in record.values():
        for before, after in zip(rungs, rungs[1:], strict=False):
            best = sorted(before, key=lambda e: -e["score"])[: len(after)]
            assert sorted(e["config"] for e in after) == sorted(e["config"] for e in best)  # the best went on
            assert {e["config"] for e in before if e.get("went_on")} == {e["config"] for e in after}
            for e in after:  # ... from the checkpoint its last trial left: only the added steps trained
                last = next(b for b in before if b["config"] == e["config"])
                assert results[e["trial_id"]]["start"] == results[last["trial_id"]]["end"]
                assert e["hyper"] == last["hyper"]
    again = run_sweep(spec(tmp_path), manager=manager(tmp_path), progress=False, run="r2")
    assert again["counts"]["skipped"] == 14


@pytest.mark.parametrize(
    ("settings", "argument", "expected"),
    [
        ({"hyperband": {"min_t": 10, "max_t": 9}}, "hyperband.min_t", "at most max_t (9)"),
        ({"hyperband": {"reduction_factor": 1}}, "hyperband.reduction_factor", "a whole number >= 2"),
        ({"hyperband": {"max_t": 0}}, "hyperband.max_t", "a whole number of steps >= 1"),
        ({"hyperband": {"step_param": "lr"}}, "hyperband.step_param", "a parameter Hyperband sets itself"),
        ({"pruning": "median"}, "pruning", "none with search: hyperband"),
        ({"objective": None}, "objective", "a metric to rank each rung by"),
        ({"search": "random", "count": 2}, "hyperband", "hyperband settings only with search: hyperband"),
    ],
)
def test_bad_hyperband_settings_are_refused_when_the_spec_is_made(tmp_path, settings, argument, expected):
    with pytest.raises(InvalidArgumentError) as err:
        spec(tmp_path, **settings)
    assert err.value.argument.endswith(argument), err.value
    assert expected in str(err.value), err.value


def test_the_preview_counts_each_rung_of_every_bracket(tmp_path):
    preview = SweepSession(spec(tmp_path, hyperband={"max_t": 9, "reduction_factor": 3}), str(tmp_path)).preview()
    assert [r["trials"] for r in preview["rounds"]] == [17, 4, 1] and preview["trials"] == 22
