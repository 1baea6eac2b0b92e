"""Parsing of memory sizes and durations written by people ("2.5GB", "1200MiB", "01:30:00")."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import overload

from airflow_provider_gpusched.core.errors import InvalidArgumentError

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([a-zA-Z]*)\s*$")
_SIZE_EXPECTED = "a byte count (int) or a size such as '2.5GB', '1200MiB', '24G' (units B, K/KiB, KB, M/MiB, MB, G/GiB, GB, T/TiB, TB)"


def parse_bytes(value: int | float | str, *, argument: str = "size") -> int:
    """Return a size in bytes.

    Integers are bytes. Strings take a decimal number and a unit: ``KB/MB/GB/TB`` are powers
    of 1000, ``KiB/MiB/GiB/TiB`` and the single letters ``K/M/G/T`` (as Slurm and nvidia-smi
    write them) are powers of 1024. Raises :class:`InvalidArgumentError` naming ``argument``.
    """
    if isinstance(value, bool):
        raise InvalidArgumentError(argument, value, _SIZE_EXPECTED)
    if isinstance(value, (int, float)):
        if value < 0 or value != value or value == float("inf"):  # negative, NaN or infinite
            raise InvalidArgumentError(argument, value, "a non-negative, finite size")
        return int(value)
    if not isinstance(value, str):
        raise InvalidArgumentError(argument, value, _SIZE_EXPECTED)
    match = _SIZE_RE.match(value)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise InvalidArgumentError(argument, value, _SIZE_EXPECTED)
    size = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    if size == float("inf"):
        raise InvalidArgumentError(argument, value, "a finite size")
    return int(size)


def format_bytes(n: int) -> str:
    """Human-readable size in binary units, e.g. ``24.0GiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{size:.1f}TiB"


_SLURM_TIME_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_TIME_EXPECTED = "minutes (int), a timedelta, or a Slurm time such as '90', '01:30:00', '2-00:00:00'"


def time_limit_seconds(value: int | timedelta | str, *, argument: str = "time_limit") -> int | None:
    """A time limit as written for Slurm (``90`` minutes, ``'01:30:00'``, ``'2-00:00:00'``, a timedelta) in
    seconds; None for ``UNLIMITED``."""
    if isinstance(value, bool):
        raise InvalidArgumentError(argument, value, _TIME_EXPECTED)
    if isinstance(value, int):
        seconds = value * 60
    elif isinstance(value, timedelta):
        seconds = int(value.total_seconds())
    elif isinstance(value, str):
        text = value.strip()
        if text.upper() in ("UNLIMITED", "INFINITE"):
            return None
        m = _SLURM_TIME_RE.match(text)
        if not m:
            raise InvalidArgumentError(argument, value, _TIME_EXPECTED)
        days_text, a_text, b_text, c_text = m.groups()
        days, a = int(days_text or 0), int(a_text)
        b, c = (None if t is None else int(t) for t in (b_text, c_text))
        if b is None:  # "MM" or "D-HH" (the pattern fills b before c)
            seconds = days * 86400 + (a * 3600 if m.group(1) else a * 60)
        elif c is None:  # "MM:SS" or "D-HH:MM"
            seconds = days * 86400 + (a * 3600 + b * 60 if m.group(1) else a * 60 + b)
        else:  # "HH:MM:SS" / "D-HH:MM:SS"
            seconds = days * 86400 + a * 3600 + b * 60 + c
    else:
        raise InvalidArgumentError(argument, value, _TIME_EXPECTED)
    if seconds <= 0:
        raise InvalidArgumentError(argument, value, "a positive duration")
    return seconds


def format_time_limit(seconds: int) -> str:
    """Slurm's ``[D-]HH:MM:SS``."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    body = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{body}" if days else body


def slurm_time_limit(value: int | timedelta | str, *, argument: str = "time_limit") -> str:
    """Normalise a time limit to Slurm's ``[D-]HH:MM:SS`` form (Slurm rounds up to whole minutes)."""
    seconds = time_limit_seconds(value, argument=argument)
    return "UNLIMITED" if seconds is None else format_time_limit(seconds)


class _SizeField:
    """A dataclass field holding a size in bytes: set from bytes or text such as ``"10GiB"`` (parsed and checked as
    it is set, the error naming the field), read as an ``int``. Typed for checkers as a descriptor-typed dataclass
    field: the constructor takes what ``__set__`` takes, a read gives what ``__get__`` returns."""

    def __init__(self, *, positive: bool = False, example: str = "10GiB") -> None:
        self.positive, self.example = positive, example
        self.name = self.attribute = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.attribute = name, f"_{name}_bytes"

    def parse(self, value: int | float | str) -> int:
        size = parse_bytes(value, argument=self.name)
        if self.positive and size <= 0:
            raise InvalidArgumentError(self.name, size, f"a positive size such as '{self.example}'")
        return size


class OptionalSize(_SizeField):
    """A size in bytes, or None (its default)."""

    @overload
    def __get__(self, instance: None, owner: type) -> None: ...
    @overload
    def __get__(self, instance: object, owner: type | None = None) -> int | None: ...
    def __get__(self, instance: object, owner: type | None = None) -> int | None:
        if instance is None:
            return None  # the dataclass's default
        value: int | None = instance.__dict__.get(self.attribute)
        return value

    def __set__(self, instance: object, value: int | float | str | None) -> None:
        instance.__dict__[self.attribute] = None if value is None else self.parse(value)


class Size(_SizeField):
    """A size in bytes, ``default`` until set."""

    def __init__(self, default: int = 0, *, positive: bool = False, example: str = "10GiB") -> None:
        super().__init__(positive=positive, example=example)
        self.default = default

    def __get__(self, instance: object, owner: type | None = None) -> int:
        if instance is None:
            return self.default  # the dataclass's default
        value: int = instance.__dict__.get(self.attribute, self.default)
        return value

    def __set__(self, instance: object, value: int | float | str) -> None:
        instance.__dict__[self.attribute] = self.parse(value)
