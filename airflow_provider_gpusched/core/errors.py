"""Exception types shared by the core."""

from __future__ import annotations


class GpuschedError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidArgumentError(GpuschedError, ValueError):
    """A value given by the user is malformed; the message names the argument and what was expected."""

    def __init__(self, argument: str, value: object, expected: str):
        self.argument = argument
        self.value = value
        self.expected = expected
        super().__init__(f"{argument}: expected {expected}, got {value!r}")
