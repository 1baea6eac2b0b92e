"""Exception types shared by the core."""

from __future__ import annotations

import reprlib
from collections.abc import Iterable

_BRIEF = reprlib.Repr()
_BRIEF.maxlevel, _BRIEF.maxdict, _BRIEF.maxlist, _BRIEF.maxtuple, _BRIEF.maxset = 3, 6, 6, 6, 6
_BRIEF_CHARS = 300
_BRIEF.maxstring, _BRIEF.maxother, _BRIEF.maxlong = 120, 120, 60


def brief_repr(value: object) -> str:
    """``repr(value)`` cut to a few hundred characters, whatever its size or nesting (a YAML alias bomb expands to
    billions of items: a message never formats all of them)."""
    text = _BRIEF.repr(value)
    return text if len(text) <= _BRIEF_CHARS else text[: _BRIEF_CHARS - 3] + "..."


class GpuschedError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidArgumentError(GpuschedError, ValueError):
    """A value given by the user is malformed; the message names the argument and what was expected."""

    def __init__(self, argument: str, value: object, expected: str) -> None:
        self.argument = argument
        self.value = value
        self.expected = expected
        super().__init__(f"{argument}: expected {expected}, got {brief_repr(value)}")


class UnknownKeyError(InvalidArgumentError):
    """A mapping (a spec, a YAML file's section) has a key nobody reads: the message names the key, the closest
    known one ("did you mean ...?") and the keys that are known, never the value as if it were the problem."""

    def __init__(self, argument: str, key: str, known: Iterable[str], what: str = "key") -> None:
        import difflib

        self.key = key
        self.known = sorted(known)
        close = difflib.get_close_matches(str(key).lower(), [k.lower() for k in self.known], n=1, cutoff=0.6)
        self.suggestion = next((k for k in self.known if k.lower() == close[0]), None) if close else None
        expected = f"a known {what} (one of {self.known})"
        super().__init__(argument, key, expected)
        hint = f"; did you mean {self.suggestion}?" if self.suggestion else ""
        self.args = (f"{argument}: unknown {what} {key!r}{hint} (known: {', '.join(self.known)})",)

    def __str__(self) -> str:
        return str(self.args[0])
