"""Optuna's Gaussian-process sampler in an asynchronous search: it imports PyTorch in the test process, so this module
shares a worker with the other tests that do (tests/conftest.py SHARED_START_UNITS)."""

import pytest

from .test_async_search import drive, study


def test_the_gaussian_process_sampler_runs_asynchronously(tmp_path):
    pytest.importorskip("torch")
    summary = drive(tmp_path, "r1", count=5, per_round=2, sampler="gp")
    assert summary["counts"]["succeeded"] == 5
    trials = study(tmp_path).trials
    assert len({tuple(t.params.items()) for t in trials}) == 5
    assert all(t.value == pytest.approx(-((t.params["x"] - 1) ** 2)) for t in trials)
