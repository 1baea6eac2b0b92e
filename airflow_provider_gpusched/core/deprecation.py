"""Old names that still work, with a warning: the warning class every surface uses, and the alias of a module
that moved (the old module imports the new one's names and says where they went)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

from airflow_provider_gpusched.core.import_target import TargetImportError, import_attribute


class GpuschedDeprecationWarning(FutureWarning):
    """An argument or a module that still works under its old name (shown to DAG authors: a FutureWarning)."""


def warn_moved_module(old: str, new: str) -> None:
    """Called at the top level of module ``old``, an alias kept for ``new``: warn the code that imported it,
    whether through an ``import`` statement or :func:`importlib.import_module` (the warning names its line). An
    alias run as a script (``python -m old``, whose ``__name__`` is ``__main__``) is named as its module, and the
    warning names the alias itself (nothing imported it)."""
    if old == "__main__":
        spec = sys._getframe(1).f_globals.get("__spec__")
        old = spec.name if spec is not None else old
        warnings.warn(_moved(old, new), GpuschedDeprecationWarning, stacklevel=2)
        return
    level = 3  # 1: here, 2: the alias module, 3: the first frame after it that `warnings` counts
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and "importlib" in frame.f_code.co_filename:
        if "_bootstrap" not in frame.f_code.co_filename:  # `warnings` skips the bootstrap's frames, not these
            level += 1
        frame = frame.f_back
    warnings.warn(_moved(old, new), GpuschedDeprecationWarning, stacklevel=level)


def _moved(old: str, new: str) -> str:
    return f"{old} is now {new}; the old module still imports but will go in a later release"


def moved_names(module: str, moved: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for names that moved out of ``module`` (name -> ``package.module:attr``): the old
    name still answers, with a warning naming the new home. The target is imported by its string on first use,
    so the old module does not depend on the one its names moved to (a wing's module above it)."""

    def __getattr__(name: str) -> Any:
        target = moved.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} is now {target.replace(':', '.')}; the old name still imports but will go in a "
            f"later release",
            GpuschedDeprecationWarning,
            stacklevel=2,
        )
        try:
            return import_attribute(target)
        except TargetImportError as exc:  # an ImportError, as `from old import name` expects
            raise ImportError(f"{module}.{name}: {exc}") from exc

    return __getattr__
