"""The tracking interface: what a sweep tells an experiment tracker, and when (docs/development.md "Adding a
tracking callback").

The sweep defines it (core/sweep/definition/tracking_callback.py: its spec's ``tracking`` list names classes of it, and the
sweep imports nothing of core/tracking); it is re-exported here, where trackers import it from::

    from airflow_provider_gpusched.core.tracking.callback import TrackingCallback
"""

from airflow_provider_gpusched.core.sweep.definition.tracking_callback import (
    SweepRun,
    TrackingCallback,
    TrialEnd,
    TrialReport,
    TrialRun,
)

__all__ = ["SweepRun", "TrackingCallback", "TrialEnd", "TrialReport", "TrialRun"]
