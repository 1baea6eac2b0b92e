"""Optuna's Gaussian-process sampler in an asynchronous search (it imports PyTorch in the test process: a module of its
own, so that cost is not added to another test's)."""

import pytest

from .test_async_search import drive, study


@pytest.mark.heavy  # 2.9 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_the_gaussian_process_sampler_runs_asynchronously(tmp_path):
    pytest.importorskip("torch")
    summary = drive(tmp_path, "r1", count=3, per_round=2, sampler="gp")  # 2 at random, then the GP's
    assert summary["counts"]["succeeded"] == 3
    trials = study(tmp_path).trials
    assert len({tuple(t.params.items()) for t in trials}) == 3
    assert all(t.value == pytest.approx(-((t.params["x"] - 1) ** 2)) for t in trials)
