"""The fuzz harness (tests/fuzzing.py) fails where it should: an error that does not name what was wrong, an
exception of another type, too few inputs, one outcome never reached. Its counts are its own."""

import pytest
from hypothesis import strategies as st

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from tests.fuzzing import EXAMPLES, assert_both_outcomes, fuzz


def _check(n):
    if n < 0:
        raise InvalidArgumentError("n", n, "a number >= 0")


def test_counts_are_the_calls_own():
    counts = fuzz(
        st.integers(-5, 5),
        _check,
        error=InvalidArgumentError,
        names=lambda exc, n: exc.argument == "n",
        what="argument",
    )
    assert counts["inputs"] == counts["valid"] + counts["clear errors"] > 0
    assert counts["clear errors"] > 0 and counts["valid"] > 0
    assert_both_outcomes(counts, least=5)
    again = fuzz(st.integers(0, 5), _check, error=InvalidArgumentError, names=lambda exc, n: True, what="argument")
    assert again["clear errors"] == 0 and again["inputs"] == again["valid"]  # not added to the first run's


def test_an_error_that_names_nothing_fails():
    with pytest.raises(AssertionError, match="does not name the argument"):
        fuzz(
            st.integers(-5, 5),
            _check,
            error=InvalidArgumentError,
            names=lambda exc, n: exc.argument == "m",
            what="argument",
        )


def test_another_exception_fails():
    def broken(n):
        raise KeyError(n)

    with pytest.raises(KeyError):
        fuzz(st.integers(), broken, error=InvalidArgumentError, names=lambda exc, n: True, what="argument")


def test_one_outcome_or_few_inputs_fail_the_outcome_check():
    only_valid = fuzz(st.integers(0, 5), _check, error=InvalidArgumentError, names=lambda exc, n: True, what="argument")
    with pytest.raises(AssertionError, match="never reached"):
        assert_both_outcomes(only_valid, least=1)
    with pytest.raises(AssertionError, match="inputs were tried"):
        assert_both_outcomes(only_valid, least=EXAMPLES + 10_000)
