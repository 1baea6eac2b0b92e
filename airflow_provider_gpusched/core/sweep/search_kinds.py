"""The built-in one-shot and round search types (grid, random, optuna, evolution; pbt.py and hyperband.py hold two
more), and the functions of their registry, ``SEARCH_KINDS`` (defined with the interface in core/sweep/search_kind.py,
which names the built-in kinds by ``module:Class``): each type is one class owning its settings, their defaults and
validation, and what a spec of that type means (its parameters, the trials of one stage, the search that proposes a
round's trials).

``SweepSpec`` validates what every sweep shares, then hands itself to its kind (``SEARCH_KINDS[spec.search]``).
Adding a search type is one new module (a ``SearchKind`` subclass) and either a built-in entry in search_kind.py's
``REGISTRY``, an entry point in the group ``airflow_provider_gpusched.search_kinds``, or a registration in code
(``SEARCH_KINDS[name] = Kind()``, :func:`register_search_kind`) in a module every process that reads the spec imports:
see docs/development.md for a worked example.

One-shot kinds (grid, random) know every trial before anything runs; round kinds (optuna, evolution) propose
``per_round`` trials in each of ``rounds`` rounds from what earlier rounds scored."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_gpusched.core.checks import record_from_mapping
from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.sweep import spaces
from airflow_provider_gpusched.core.sweep.expand import (
    DEFAULT_LABELS,
    GridSweep,
    Trial,
    check_space,
    finite_space_size,
    flatten,
    random_trials,
)
from airflow_provider_gpusched.core.sweep.kind_settings import AtLeastOne, AtLeastZero  # noqa: F401 - their old home
from airflow_provider_gpusched.core.sweep.kind_settings import EvolutionSettings as EvolutionSettings
from airflow_provider_gpusched.core.sweep.search_kind import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from airflow_provider_gpusched.core.sweep.search_kind import REGISTRY as REGISTRY
from airflow_provider_gpusched.core.sweep.search_kind import SEARCH_KINDS as SEARCH_KINDS
from airflow_provider_gpusched.core.sweep.search_kind import SearchKind

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.search import RoundSearch
    from airflow_provider_gpusched.core.sweep.spec import SweepSpec


def _objective_needed(spec: SweepSpec, what: str) -> None:
    if spec.objective is None:
        raise InvalidArgumentError(f"{spec.where}: objective", None, f"{what} (search: {spec.search})")


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


class OptunaKind(SearchKind["SweepSpec"]):
    """Optuna's samplers (TPE, GP, CMA-ES, random, NSGA-II) on one study in the sweep folder: asked for
    ``per_round`` trials per round (DI-toolkit's HPO), or, with ``asynchronous: true``, by a pool of workers that
    each ask for the next trial the moment its slot frees (core/sweep/asynchronous.py)."""

    name = "optuna"
    in_rounds = True
    SAMPLERS: ClassVar[tuple[str, ...]] = ("tpe", "gp", "cmaes", "random", "nsga2")
    #: samplers that optimise one value (several metrics need weights, or tpe/nsga2/random/gp)
    SINGLE_OBJECTIVE: ClassVar[tuple[str, ...]] = ("cmaes",)
    DEFAULT_ROUNDS: ClassVar[int] = 3
    DEFAULT_PER_ROUND: ClassVar[int] = 4

    def check(self, spec: SweepSpec) -> None:
        check_space(spec.space, f"{spec.where}: space", spec.global_config)
        _objective_needed(spec, "a metric to optimise")
        if spec.sampler not in self.SAMPLERS:
            raise InvalidArgumentError(
                f"{spec.where}: sampler", spec.sampler, "one of " + ", ".join(repr(s) for s in self.SAMPLERS)
            )
        objective = spec.objective
        if (
            spec.sampler in self.SINGLE_OBJECTIVE
            and objective is not None
            and objective.several
            and not objective.weights
        ):
            raise InvalidArgumentError(
                f"{spec.where}: sampler",
                spec.sampler,
                "a multi-objective sampler for several metrics without weights ('tpe', 'nsga2', 'gp' or 'random'); "
                "or give the objective weights",
            )
        if spec.count is not None and not spec.asynchronous:
            raise InvalidArgumentError(
                f"{spec.where}: count",
                spec.count,
                "count only with asynchronous: true (a search in rounds runs rounds x per_round trials)",
            )
        spec.rounds = spec.rounds or self.DEFAULT_ROUNDS
        spec.per_round = spec.per_round or self.DEFAULT_PER_ROUND
        if spec.asynchronous:
            # the budget: the trials a search in rounds would run, unless count says
            spec.count = spec.count or spec.rounds * spec.per_round

    def stage_size(self, spec: SweepSpec) -> int:
        if spec.asynchronous and spec.count is not None:
            return spec.count
        return super().stage_size(spec)

    def round_search(self, spec: SweepSpec, state_dir: str) -> RoundSearch:
        from airflow_provider_gpusched.core.sweep.search import OptunaSearch

        return OptunaSearch(spec, state_dir)


class EvolutionKind(SearchKind["SweepSpec"]):
    """pavi's NAS evolution: a pool of candidates mutated and crossed over each round (``evolution`` settings);
    ``rounds`` and ``per_round`` come from ``max_epoch`` and ``candidate_pool_size``."""

    name = "evolution"
    in_rounds = True

    def check(self, spec: SweepSpec) -> None:
        check_space(spec.space, f"{spec.where}: space", spec.global_config)
        _objective_needed(spec, "a score to optimise")
        if isinstance(spec.evolution, Mapping):  # (its type was checked with the fields every sweep shares)
            spec.evolution = record_from_mapping(EvolutionSettings, spec.evolution, f"{spec.where}: evolution")
        spec.evolution = spec.evolution or EvolutionSettings()
        spec.evolution.check(f"{spec.where}: evolution")
        for key, dim in flatten(spec.space).items():
            if not isinstance(dim, (list, tuple, spaces.Choice)):
                raise InvalidArgumentError(
                    f"{spec.where}: space.{key}",
                    dim,
                    "a list of choices (evolution searches over discrete choices per position)",
                )
        if spec.asynchronous:
            raise InvalidArgumentError(
                f"{spec.where}: asynchronous",
                True,
                "false for search: evolution (each generation is bred from the scores of the last: it runs in "
                "rounds; use search: optuna for an asynchronous search)",
            )
        spec.rounds = spec.evolution.max_epoch
        spec.per_round = spec.evolution.candidate_pool_size

    def round_search(self, spec: SweepSpec, state_dir: str) -> RoundSearch:
        from airflow_provider_gpusched.core.sweep.search import EvolutionSearch

        return EvolutionSearch(spec, state_dir)


def register_search_kind(kind: type[SearchKind[Any]] | SearchKind[Any]) -> Any:
    """Make a search type known by its ``name`` (usable as a class decorator); a name again replaces it."""
    return REGISTRY.register(kind)


def unregister_search_kind(name: str) -> None:
    REGISTRY.unregister(name)


def search_kind(name: object, where: str = "search") -> SearchKind[Any]:
    """The search type called ``name``; an unknown one is refused naming ``where`` and the known types."""
    return REGISTRY.instance(name, where)
