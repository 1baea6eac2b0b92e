"""A sweep spec's ``tracking`` list, as core/tracking uses it: the spec's trackers plus the ``[gpusched] tracking``
option's (``merge_default``), and their callbacks made (``build_callbacks``).

The list's parse, its settings' checks and the registry of trackers a ``kind`` names are the spec's own
(core/sweep/definition/tracking_settings.py, where the ``tracking`` list is described); they are re-exported here, where they
were first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_provider_gpusched.core.sweep.definition.tracking_settings import (
    ENTRY_POINT_GROUP,
    SERVER_URL,
    SETTINGS,
    TRACKERS,
    TrackerConfig,
    parse_tracking,
    register_tracker,
    tracking_uri_problem,
    unregister_tracker,
)
from airflow_provider_gpusched.core.tracking.callback import TrackingCallback

__all__ = [
    "ENTRY_POINT_GROUP",
    "SERVER_URL",
    "SETTINGS",
    "TRACKERS",
    "TrackerConfig",
    "build_callbacks",
    "merge_default",
    "parse_tracking",
    "register_tracker",
    "score_of",
    "tracking_uri_problem",
    "unregister_tracker",
]


def merge_default(configs: Sequence[TrackerConfig], default: str) -> tuple[TrackerConfig, ...]:
    """The spec's trackers plus the ``[gpusched] tracking`` option's (comma-separated names) it does not list."""
    names = [n.strip() for n in default.split(",") if n.strip()]
    extra = parse_tracking(names, "[gpusched] tracking") if names else ()
    have = {c.kind for c in configs if c.kind}
    return (*configs, *(c for c in extra if c.kind not in have))


def build_callbacks(
    configs: Sequence[TrackerConfig],
    folder: str,
    say: Callable[[str], None],
    resolve: Callable[[TrackerConfig], Mapping[str, Any]] | None = None,
) -> list[TrackingCallback]:
    """The callbacks of ``configs`` (``resolve``: what the Airflow side looks up for one, such as an MLflow
    connection); one that cannot be made is said, and left out: a tracker never fails the trials."""
    out = []
    for config in configs:
        try:
            out.append(config.build(folder, resolve(config) if resolve else None))
        except Exception as exc:  # noqa: BLE001 - a tracker that cannot be set up never fails a trial
            say(f"tracking: {config.label}: not sent: {exc}")
    return out


def score_of(objective: Mapping[str, Any] | None) -> Callable[[Any], float | None] | None:
    """The score function of an objective as a manifest or SweepRun keeps it (``Objective.to_dict``)."""
    if not objective:
        return None
    from airflow_provider_gpusched.core.sweep.parts.objective import objective_from_mapping

    return objective_from_mapping(objective, "objective").score
