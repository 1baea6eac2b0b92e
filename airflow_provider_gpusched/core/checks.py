"""The small type checks every validator shares: Python's ``bool`` is an ``int``, so ``True`` would pass for a
count of 1 and ``False`` for a port; every check here refuses it. One place, so "an integer" means the same in
a sweep spec, a lease record and a partition problem."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeGuard

from airflow_provider_gpusched.core.errors import InvalidArgumentError, UnknownKeyError


def is_int(value: Any) -> TypeGuard[int]:
    """An ``int`` that is not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> TypeGuard[int | float]:
    """An ``int`` or ``float`` that is not a ``bool`` (NaN and infinities included)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_json_number(value: Any) -> bool:
    """A number that is not NaN: what a record read back from disk may hold (JSON has no NaN)."""
    return is_number(value) and value == value


def is_finite_number(value: Any) -> TypeGuard[int | float]:
    """A number that is neither NaN nor infinite: a finite float64 (a whole number too large for one, which JSON
    allows and ``math.isfinite`` raises OverflowError on, is not)."""
    if isinstance(value, float):
        return math.isfinite(value)
    return is_int(value) and -sys.float_info.max <= value <= sys.float_info.max


def check_int(
    value: Any, where: str, minimum: int | None = None, *, optional: bool = False, expected: str | None = None
) -> Any:
    """``value`` if it is an integer of at least ``minimum`` (or None when ``optional``); else an
    InvalidArgumentError naming ``where``."""
    if value is None and optional:
        return value
    if not is_int(value) or (minimum is not None and value < minimum):
        raise InvalidArgumentError(
            where, value, expected or ("an integer" if minimum is None else f"an integer >= {minimum}")
        )
    return value


def record_from_mapping(kind: type, data: Mapping[str, Any], where: str) -> Any:
    """A dataclass ``kind`` built from ``data``; a key it does not have is an InvalidArgumentError naming it and
    the known keys (not a TypeError from deep inside)."""
    names = {f.name for f in fields(kind)}
    unknown = [k for k in data if k not in names]
    if unknown:
        raise UnknownKeyError(f"{where}.{unknown[0]}", unknown[0], names)
    return kind(**data)


def check_finite(value: Any, where: str, depth: int = 0) -> None:
    """NaN and infinities are refused wherever a parameter value can be written (they break ids, JSON and
    comparisons)."""
    if depth > 50:
        raise InvalidArgumentError(where, "...", "values nested less than 50 levels deep")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgumentError(where, value, "a finite number (not NaN or infinity)")
    if isinstance(value, Mapping):
        for k, v in value.items():
            check_finite(v, f"{where}.{k}", depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_finite(v, f"{where}[{i}]", depth + 1)
