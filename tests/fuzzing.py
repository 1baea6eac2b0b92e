"""The fuzz tests' harness: each fuzz test runs its own inputs through :func:`fuzz` and gets its own counts back,
so it asserts on what it did whether it runs alone or with the others (no shared counter, no test that depends on
another having run first)."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis.strategies import SearchStrategy

#: inputs per fuzz test ($GPUSCHED_FUZZ_EXAMPLES: scripts/test-fast.sh sets 100; derandomized unless
#: $GPUSCHED_FUZZ_RANDOM is set, so those are the suite's first 100)
EXAMPLES = int(os.environ.get("GPUSCHED_FUZZ_EXAMPLES", "300"))
SECONDS = 5.0  # the most one input may take
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=not os.environ.get("GPUSCHED_FUZZ_RANDOM"),
    database=None,
)


def fuzz(
    strategy: SearchStrategy,
    call: Callable[[Any], Any],
    *,
    error: type[BaseException] | tuple,
    names: Callable[[BaseException, Any], bool],
    what: str,
) -> Counter:
    """Run ``call(example)`` for the examples ``strategy`` draws. Each must return, or raise ``error`` whose
    message is one line-free of tracebacks and which ``names(exc, example)`` accepts (it names the argument, key
    or file that was wrong: ``what`` says which, for the failure message); anything else fails the test, as does
    an input taking more than SECONDS. Returns ``{"inputs", "valid", "clear errors"}`` counts."""
    counts: Counter = Counter()

    @SETTINGS
    @given(strategy)
    def one(example):
        started = time.monotonic()
        try:
            call(example)
        except error as exc:
            message = str(exc)
            assert message and "Traceback" not in message, f"an empty or traceback error: {message!r}"
            assert names(exc, example), f"the error does not name the {what}: {message!r} (input {example!r})"
            counts["clear errors"] += 1
        else:
            counts["valid"] += 1
        counts["inputs"] += 1
        assert time.monotonic() - started < SECONDS, f"took {time.monotonic() - started:.1f}s: {example!r}"

    one()
    return counts


def assert_both_outcomes(counts: Counter, least: int | None = None) -> None:
    """The fuzzer reached valid inputs and clear errors both, over enough inputs to mean something."""
    least = min(EXAMPLES, 50) if least is None else least
    print(f"fuzz counts: {dict(counts)}")  # pytest -s shows them (the issue notes record them)
    assert counts["inputs"] >= least, f"only {counts['inputs']} inputs were tried ({dict(counts)})"
    assert counts["valid"] > 0 and counts["clear errors"] > 0, f"one outcome was never reached ({dict(counts)})"
