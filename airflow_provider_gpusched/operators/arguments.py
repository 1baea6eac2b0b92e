"""Checking the types of operator arguments when the DAG is parsed: a mistyped argument fails there, naming
the task and the argument, instead of deep inside the task later."""

from __future__ import annotations

from typing import Any, Iterable

from airflow.sdk.exceptions import AirflowException

#: (argument, value, accepted types, what is expected); ``seconds`` arguments must also be > 0
Check = tuple[str, Any, tuple[type, ...], str]


def check_argument_types(task_id: str, checks: Iterable[Check], *, positive: Iterable[str] = ()) -> None:
    """Raise ``AirflowException("<task>: <argument>: expected ..., got ...")`` for the first argument that is
    not None and not of its types (booleans are not numbers), or not > 0 where listed in ``positive``."""
    positive = set(positive)
    for name, value, types, expected in checks:
        if value is None:
            continue
        wrong_bool = isinstance(value, bool) and bool not in types
        if not isinstance(value, types) or wrong_bool or (name in positive and not value > 0):
            raise AirflowException(f"{task_id}: {name}: expected {expected}, got {value!r:.80}")
