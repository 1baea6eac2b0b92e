"""Experiment tracking: a sweep's trials sent to MLflow, TensorBoard, W&B or a callback of your own.

``callback.py`` is the interface (trial started, reported, ended; sweep ended), ``sync.py`` the one engine that turns
what the sweep folder records into those calls, once each, resuming where it stopped; ``config.py`` reads a spec's
``tracking`` list and keeps the registry of trackers a ``kind`` names (entry-point group
``airflow_provider_gpusched.tracking``); ``mlflow.py``, ``tensorboard.py`` and ``wandb.py`` are the built-in callbacks (docs/tracking.md).
"""

from airflow_provider_gpusched.core.tracking.callback import (
    SweepRun,
    TrackingCallback,
    TrialEnd,
    TrialReport,
    TrialRun,
)
from airflow_provider_gpusched.core.tracking.config import (
    TRACKERS,
    TrackerConfig,
    parse_tracking,
    register_tracker,
    unregister_tracker,
)
from airflow_provider_gpusched.core.tracking.sync import SyncOutcome, TrackingSync

__all__ = [
    "TRACKERS",
    "SweepRun",
    "SyncOutcome",
    "TrackerConfig",
    "TrackingCallback",
    "TrackingSync",
    "TrialEnd",
    "TrialReport",
    "TrialRun",
    "parse_tracking",
    "register_tracker",
    "unregister_tracker",
]
