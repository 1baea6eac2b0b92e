"""Deprecated alias: this module was split (issue 78: core/sweep split by what changes together); its names
now live in core/sweep's records.journal, searches.evolution, searches.optuna, searches.rounds. Importing it warns."""

from airflow_provider_gpusched.core.deprecation import warn_moved_module
from airflow_provider_gpusched.core.sweep.records.journal import (  # noqa: F401
    JOURNAL_FILE,
    bad_journal,
    open_journal,
)
from airflow_provider_gpusched.core.sweep.searches.evolution import (  # noqa: F401
    ENUMERATE_UP_TO,
    EvolutionSearch,
)
from airflow_provider_gpusched.core.sweep.searches.optuna import (  # noqa: F401
    REBUILT_ATTR,
    TRIAL_ATTRS,
    OptunaSearch,
    _store_beside,
    _why,
    report_curve,
)
from airflow_provider_gpusched.core.sweep.searches.rounds import (  # noqa: F401
    RoundSearch,
    _key,
    make_search,
)

warn_moved_module(
    __name__,
    "airflow_provider_gpusched.core.sweep.records.journal, airflow_provider_gpusched.core.sweep.searches.evolution, airflow_provider_gpusched.core.sweep.searches.optuna, airflow_provider_gpusched.core.sweep.searches.rounds",
)
