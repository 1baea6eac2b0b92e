"""How ``gpusched queue`` reaches a backend from its command line: the record a backend's
``Backend.command_handle`` answers (:class:`CommandHandle`). A module of its own, below the backends, so that
core/backends.py and each wing name it without importing the CLI."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CommandHandle:
    """The handle a command reaches a backend through, and how (``gpusched queue`` list, stop and health)."""

    #: what lists and stops its work (its ``Backend.handle`` keyword's value), None when there is none
    handle: Any = None
    #: how the handle reaches the backend ("connection 'x' (ssh to login1)"), said in the listing and the checks
    reached: str = ""
    #: why there is no handle, said as a note or a skip
    unavailable: str = ""
    #: what a job class means through the handle's connection (its extras on top of the mapping); None: the mapping
    class_settings: Callable[[str], Mapping[str, Any]] | None = None
    #: the Airflow connection the command line named for it (``gpusched queue health`` counts pools through it)
    conn_id: str | None = None

    def health_fields(self) -> dict[str, Any]:
        """Its fields as ``HealthContext`` takes them (core/health_check.py)."""
        return {
            "handle": self.handle,
            "reached": self.reached,
            "unavailable": self.unavailable,
            "class_settings": self.class_settings,
        }
