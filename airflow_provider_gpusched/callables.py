"""Arguments for a Python callable that runs in another process (a Slurm job, a GPU child)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any


def callable_arguments(
    func: Callable[..., Any],
    op_args: Collection[Any],
    op_kwargs: Mapping[str, Any],
    context: Mapping[str, Any],
    log: logging.Logger | Any,
) -> tuple[list[Any], dict[str, Any]]:
    """``op_args`` and ``op_kwargs``, plus the context values ``func`` names as parameters (``ds``,
    ``run_id``, ``params``...) when they can be pickled; live objects (``ti``, ``dag_run``) become None."""
    import cloudpickle
    from airflow.sdk.bases.decorator import determine_kwargs

    kwargs = dict(determine_kwargs(func, op_args, {**context, **op_kwargs}))
    for name in list(kwargs):
        if name in op_kwargs:
            continue
        try:
            cloudpickle.dumps(kwargs[name])
        except Exception:  # noqa: BLE001
            log.warning("context value %r cannot be sent to the child process; passing None", name)
            kwargs[name] = None
    return list(op_args), kwargs
