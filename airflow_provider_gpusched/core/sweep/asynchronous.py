"""Deprecated alias: this module was split (issue 78: core/sweep split by what changes together); its names
now live in core/sweep's running.asynchronous, searches.optuna. Importing it warns."""

from airflow_provider_gpusched.core.deprecation import warn_moved_module
from airflow_provider_gpusched.core.sweep.running.asynchronous import (  # noqa: F401
    AsyncRun,
    StageSession,
    _handed_to,
)
from airflow_provider_gpusched.core.sweep.searches.optuna import (  # noqa: F401
    ASKS_PER_TRIAL,
    HANDED_FILE,
    SPEC_FILE,
    AsyncOptunaSearch,
)

warn_moved_module(
    __name__,
    "airflow_provider_gpusched.core.sweep.running.asynchronous, airflow_provider_gpusched.core.sweep.searches.optuna",
)
