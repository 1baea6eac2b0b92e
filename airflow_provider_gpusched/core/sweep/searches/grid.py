"""Grid search (``search: grid``, the default): every point of the space, or ``grid_steps`` points per range."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_gpusched.core.sweep.definition.search_kind import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from airflow_provider_gpusched.core.sweep.definition.search_kind import REGISTRY as REGISTRY
from airflow_provider_gpusched.core.sweep.definition.search_kind import SEARCH_KINDS as SEARCH_KINDS
from airflow_provider_gpusched.core.sweep.definition.search_kind import AtLeastOne, AtLeastZero, SearchKind  # noqa: F401 - their old home
from airflow_provider_gpusched.core.sweep.parts.expand import (
    DEFAULT_LABELS,
    GridSweep,
    Trial,
)
from airflow_provider_gpusched.core.sweep.searches.evolution import EvolutionSettings as EvolutionSettings

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec


class GridKind(SearchKind["SweepSpec"]):
    """Every combination of ``test_config`` blocks (GPU Task Scheduler's grid), expanded lazily."""

    name = "grid"
    size_key = "test_config"

    def _grid(self, spec: SweepSpec, *, full: bool = False) -> GridSweep:
        if full:
            return GridSweep(
                spec.global_config,
                spec.test_config,
                spec.grid_steps,
                spec.code_version,
                spec.where,
                spec.label_format or DEFAULT_LABELS,
            )
        return GridSweep(spec.global_config, spec.test_config, spec.grid_steps, where=spec.where)

    def check(self, spec: SweepSpec) -> None:
        GridSweep(spec.global_config, spec.test_config, spec.grid_steps, spec.code_version, spec.where).blocks()

    def varying(self, spec: SweepSpec) -> list[str]:
        return GridSweep(spec.global_config, spec.test_config, where=spec.where).varying()

    def stage_size(self, spec: SweepSpec) -> int:
        # an upper bound: conditions and duplicates can only remove trials
        return self._grid(spec).size_upper_bound()

    def trials(self, spec: SweepSpec) -> list[Trial]:
        return self._grid(spec, full=True).trials()
