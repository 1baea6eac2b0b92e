"""Deprecated alias: this module was split (issue 78: core/sweep split by what changes together); its names
now live in core/sweep's definition.search_kind, searches.evolution, searches.hyperband, searches.pbt. Importing it warns."""

from airflow_provider_gpusched.core.deprecation import warn_moved_module
from airflow_provider_gpusched.core.sweep.definition.search_kind import (  # noqa: F401
    AtLeastOne,
    AtLeastZero,
    Fraction,
)
from airflow_provider_gpusched.core.sweep.searches.evolution import (  # noqa: F401
    _EVOLUTION,
    EvolutionSettings,
)
from airflow_provider_gpusched.core.sweep.searches.hyperband import (  # noqa: F401
    _HYPERBAND,
    HyperbandSettings,
)
from airflow_provider_gpusched.core.sweep.searches.pbt import (  # noqa: F401
    _PBT,
    PBTSettings,
)

warn_moved_module(
    __name__,
    "airflow_provider_gpusched.core.sweep.definition.search_kind, airflow_provider_gpusched.core.sweep.searches.evolution, airflow_provider_gpusched.core.sweep.searches.hyperband, airflow_provider_gpusched.core.sweep.searches.pbt",
)
