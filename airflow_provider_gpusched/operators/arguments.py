"""Checking the types of operator arguments when the DAG is parsed: a mistyped argument fails there, naming
the task and the argument, instead of deep inside the task later."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Mapping
from types import FrameType
from typing import Any

from airflow.sdk.exceptions import AirflowException

from airflow_provider_gpusched.core.deprecation import GpuschedDeprecationWarning
from airflow_provider_gpusched.core.errors import InvalidArgumentError, brief_repr

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
        not_positive = name in positive and isinstance(value, (int, float)) and not value > 0
        if not isinstance(value, types) or wrong_bool or not_positive:
            raise AirflowException(f"{task_id}: {name}: expected {expected}, got {brief_repr(value)}")


def renamed_argument(task_id: str, name: str, value: Any, old_name: str, old_value: Any) -> Any:
    """The value of ``name``, given under it or under ``old_name`` (its name before every surface spoke one
    vocabulary: a warning says to rename it). Both given: refused, naming the two."""
    if old_value is None:
        return value
    if value is not None:
        raise AirflowException(f"{task_id}: give {name} or {old_name} (its old name), not both")
    warnings.warn(
        f"{task_id}: {old_name} is now called {name} (the same on every surface); {old_name} still works "
        "but will go in a later release",
        GpuschedDeprecationWarning,
        stacklevel=_callers_level(),
    )
    return old_value


def _callers_level() -> int:
    """The ``stacklevel`` of the first frame outside this package and Airflow: the DAG file's line."""
    import os
    import sys

    import airflow

    package = os.path.dirname(os.path.dirname(__file__))  # this package's folder (operators/ is one level down)
    inside = (os.path.dirname(airflow.__file__ or "") + os.sep, package + os.sep)
    level = 2
    frame: FrameType | None = sys._getframe(2)  # 1: renamed_argument's caller's caller is where counting starts
    while frame is not None and frame.f_code.co_filename.startswith(inside):
        frame, level = frame.f_back, level + 1
    return level


def argument_error(task_id: str, exc: InvalidArgumentError, names: Mapping[str, str]) -> AirflowException:
    """``exc`` (from a core object the operator built: a GPU request, a Slurm job spec) as the task's error, the
    argument named as the operator calls it (``names``: the core object's name -> the operator's), so that
    ``mem=-1`` is not answered with ``host_memory: ...``."""
    match = re.match(r"[A-Za-z_]\w*", exc.argument)  # 'environment' of "environment['X']" or 'x' of 'x.y'
    head = match.group() if match else ""
    if head in names:
        exc = InvalidArgumentError(names[head] + exc.argument[len(head) :], exc.value, exc.expected)
    return AirflowException(f"{task_id}: {exc}")
