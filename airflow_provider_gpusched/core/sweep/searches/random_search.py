"""Random search (``search: random``): ``count`` points drawn from the space with the spec's seed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.sweep.definition.search_kind import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from airflow_provider_gpusched.core.sweep.definition.search_kind import REGISTRY as REGISTRY
from airflow_provider_gpusched.core.sweep.definition.search_kind import SEARCH_KINDS as SEARCH_KINDS
from airflow_provider_gpusched.core.sweep.definition.search_kind import AtLeastOne, AtLeastZero, SearchKind  # noqa: F401 - their old home
from airflow_provider_gpusched.core.sweep.parts.expand import (
    DEFAULT_LABELS,
    Trial,
    check_space,
    finite_space_size,
    flatten,
    random_trials,
)
from airflow_provider_gpusched.core.sweep.searches.evolution import EvolutionSettings as EvolutionSettings

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec


class RandomKind(SearchKind["SweepSpec"]):
    """``count`` points drawn from ``space`` with ``seed``, duplicates redrawn."""

    name = "random"
    size_key = "count"

    def check(self, spec: SweepSpec) -> None:
        check_space(spec.space, f"{spec.where}: space", spec.global_config)
        count = self._count(spec)
        size = finite_space_size(flatten(spec.space))
        if size is not None and count > size:
            raise InvalidArgumentError(
                f"{spec.where}: count",
                count,
                f"at most the {size:,} distinct points of this space (use search: grid to try them all)",
            )

    @staticmethod
    def _count(spec: SweepSpec) -> int:
        if spec.count is None:
            raise InvalidArgumentError(f"{spec.where}: count", None, "the number of random trials (search: random)")
        return spec.count

    def stage_size(self, spec: SweepSpec) -> int:
        return self._count(spec)

    def trials(self, spec: SweepSpec) -> list[Trial]:
        return random_trials(
            spec.space,
            self._count(spec),
            spec.seed,
            fixed=spec.global_config,
            code_version=spec.code_version,
            where=f"{spec.where}: space",
            label_format=spec.label_format or DEFAULT_LABELS,
        )
