"""``package.module:attr`` targets, the way specs and the CLI name user code (a sweep's ``callable``, a
``required_env`` function, a model builder, an evaluator): imported in one place, with errors that say which
half failed."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from airflow_provider_gpusched.core.errors import InvalidArgumentError


class TargetImportError(Exception):
    """``target`` could not be imported: ``module_failed`` says whether the module did not import (any error its
    code raised) or the attribute was missing; ``cause`` is the original exception."""

    def __init__(self, target: str, module: str, attr: str, cause: BaseException, module_failed: bool) -> None:
        self.target, self.module, self.attr, self.cause, self.module_failed = target, module, attr, cause, module_failed
        super().__init__(f"{type(cause).__name__}: {cause}")


def import_attribute(target: str) -> Any:
    """The object ``package.module:attr.path`` names."""
    module_name, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - the user's module: any error while importing it
        raise TargetImportError(target, module_name, attr, exc, True) from None
    try:
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError as exc:
        raise TargetImportError(target, module_name, attr, exc, False) from None
    return obj


def import_callable(target: Any, where: str) -> Callable[..., Any]:
    """The function ``'package.module:function'`` names; an InvalidArgumentError naming ``where`` otherwise."""
    if not isinstance(target, str) or ":" not in target:
        raise InvalidArgumentError(where, target, "'package.module:function'")
    try:
        obj = import_attribute(target)
    except TargetImportError as exc:
        raise InvalidArgumentError(where, target, f"an importable function ({exc})") from None
    if not callable(obj):
        raise InvalidArgumentError(where, target, "a callable")
    function: Callable[..., Any] = obj
    return function
