"""Deprecated alias: this module was split (issue 78: core/sweep split by what changes together); its names
now live in core/sweep's definition.search_kind, searches.evolution, searches.grid, searches.optuna, searches.random_search. Importing it warns."""

from airflow_provider_gpusched.core.deprecation import warn_moved_module
from airflow_provider_gpusched.core.sweep.definition.search_kind import (  # noqa: F401
    ENTRY_POINT_GROUP,
    REGISTRY,
    SEARCH_KINDS,
    AtLeastOne,
    AtLeastZero,
    register_search_kind,
    search_kind,
    unregister_search_kind,
)
from airflow_provider_gpusched.core.sweep.searches.evolution import (  # noqa: F401
    EvolutionKind,
    EvolutionSettings,
)
from airflow_provider_gpusched.core.sweep.searches.grid import (  # noqa: F401
    GridKind,
)
from airflow_provider_gpusched.core.sweep.searches.optuna import (  # noqa: F401
    OptunaKind,
)
from airflow_provider_gpusched.core.sweep.searches.random_search import (  # noqa: F401
    RandomKind,
)

warn_moved_module(
    __name__,
    "airflow_provider_gpusched.core.sweep.definition.search_kind, airflow_provider_gpusched.core.sweep.searches.evolution, airflow_provider_gpusched.core.sweep.searches.grid, airflow_provider_gpusched.core.sweep.searches.optuna, airflow_provider_gpusched.core.sweep.searches.random_search",
)
