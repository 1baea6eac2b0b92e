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
