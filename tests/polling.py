"""Waiting in tests for something another process does."""

from __future__ import annotations

import time


def wait_until(predicate, timeout: float = 60.0, what: str = "condition", interval: float = 0.5):
    """``predicate()``'s first true value, polled every ``interval`` s; AssertionError naming ``what`` after
    ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def need_torch():
    """PyTorch, which scripts/bootstrap.sh installs (the examples extra): a failure in CI without it, a skip
    elsewhere (a user's environment without the extra)."""
    import os

    import pytest

    try:
        import torch  # noqa: F401
    except ImportError:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("PyTorch is not installed (scripts/bootstrap.sh installs the examples extra)")
        pytest.skip("needs PyTorch (pip install 'airflow-provider-gpusched[examples]')")
