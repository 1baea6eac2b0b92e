"""The interface of a search type (core/sweep/search_kinds.py has the built-in ones and the registry, which also
reads the entry-point group ``airflow_provider_gpusched.search_kinds``).

A kind is told the whole spec once its shared fields are valid; it checks the settings only it reads, fills their
defaults, and answers what the spec means for its type. A one-shot kind (``in_rounds = False``) implements
``trials``; a round kind implements ``round_search`` (core/sweep/search.py's ``RoundSearch``).

The interface sits below the spec and the searches: it reads a spec through :class:`KindSpec` (a kind names the spec
class it reads, ``SearchKind["SweepSpec"]``) and answers a search through :class:`SearchInRounds`, and the registry
knows the built-in kinds as ``module:Class`` strings, so the spec finds its kind without importing any."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.registry import Registry
from airflow_provider_gpusched.core.sweep.expand import Trial, flatten

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.objective import Objective
    from airflow_provider_gpusched.core.sweep.store import TrialStore


class KindSpec(Protocol):
    """What the interface's own methods read of a spec (core/sweep/spec.py's ``SweepSpec`` has it all)."""

    @property
    def where(self) -> str: ...
    @property
    def search(self) -> str: ...
    @property
    def space(self) -> Mapping[Any, Any]: ...
    @property
    def rounds(self) -> int | None: ...
    @property
    def per_round(self) -> int | None: ...


class SearchInRounds(Protocol):
    """What a round kind's search answers the sweep (core/sweep/search.py's ``RoundSearch`` is the base of each)."""

    @property
    def per_round(self) -> int: ...
    @property
    def objective(self) -> Objective: ...
    def ask(self, round_no: int) -> list[dict[str, Any]]: ...
    def identities(self, round_no: int) -> list[str | None]: ...
    def prepare_trials(self, round_no: int, trials: Sequence[Trial], store: TrialStore) -> None: ...
    def tell_trials(self, round_no: int, outcomes: Sequence[tuple[Any, ...]]) -> int: ...


SpecT = TypeVar("SpecT", bound=KindSpec)


class SearchKind(Generic[SpecT]):
    """What one search type owns. Subclasses set ``name``; round kinds set ``in_rounds`` and implement
    ``round_search``; one-shot kinds implement ``trials``."""

    name: ClassVar[str]
    in_rounds: ClassVar[bool] = False
    #: the spec key an error names when one stage has more than ``max_trials`` trials
    size_key: ClassVar[str] = "per_round"
    #: whether a trial's checkpoints must be in its own folder (``checkpoint/``), whatever runs it: the search
    #: hands them on to later trials (PBT)
    hands_on_checkpoints: ClassVar[bool] = False
    #: whether the Sweeps page draws this kind's sweeps as a population (:meth:`read_population`: PBT's members
    #: across their generations); the page asks the kind, never compares its name
    draws_population: ClassVar[bool] = False

    def read_population(self, sweep_folder: str, root: str | None = None) -> tuple[dict[str, Any] | None, str]:
        """The population of a sweep of this kind, read checked from its folder (under ``root``), or None and why
        not: what the Sweeps page draws when :attr:`draws_population` is set."""
        return None, f"search {self.name!r} has no population to draw"

    def check(self, spec: SpecT) -> None:
        """Validate the settings this kind reads and fill its defaults (may set ``spec.rounds`` and
        ``spec.per_round``); raise InvalidArgumentError naming the key."""

    def varying(self, spec: SpecT) -> list[str]:
        """The parameters that differ between trials."""
        return list(flatten(spec.space))

    def stage_size(self, spec: SpecT) -> int:
        """Trials one stage maps over, known without expanding anything (a round kind's ``check`` sets
        ``per_round``)."""
        if spec.per_round is None:
            raise GpuschedError(
                f"{spec.where}: search {spec.search!r}: per_round is not set (the kind's check did not run)"
            )
        return spec.per_round

    def round_sizes(self, spec: SpecT, space_size: int | None) -> list[int]:
        """How many trials each round of a round kind has at most (``gpusched sweep preview``): ``per_round`` each,
        capped by what a finite space of ``space_size`` points still holds (no round proposes a point already
        evaluated)."""
        out, left, per_round = [], space_size, spec.per_round or 0
        for _ in range(spec.rounds or 0):
            n = per_round if left is None else min(per_round, left)
            out.append(n)
            left = None if left is None else left - n
        return out

    def trials(self, spec: SpecT) -> list[Trial]:
        raise InvalidArgumentError(
            f"{spec.where}: search",
            spec.search,
            "'grid' or 'random' here; optuna and evolution sweeps make trials round by round",
        )

    def round_search(self, spec: SpecT, state_dir: str) -> SearchInRounds:
        raise GpuschedError(f"search {spec.search!r} does not run in rounds")


#: the entry-point group other packages add search types under (``name = "package.module:KindClass"``)
ENTRY_POINT_GROUP = "airflow_provider_gpusched.search_kinds"
_HERE = "airflow_provider_gpusched.core.sweep"
#: every search type, by the name a spec's ``search`` gives (one
#: :class:`~airflow_provider_gpusched.core.registry.Registry`, as backends and pruning rules have); the built-in
#: ones are core/sweep/search_kinds.py's, pbt.py's and hyperband.py's, imported on first use
REGISTRY: Registry[SearchKind[Any]] = Registry(
    "search type",
    SearchKind,
    ENTRY_POINT_GROUP,
    {
        "grid": f"{_HERE}.search_kinds:GridKind",
        "random": f"{_HERE}.search_kinds:RandomKind",
        "optuna": f"{_HERE}.search_kinds:OptunaKind",
        "evolution": f"{_HERE}.search_kinds:EvolutionKind",
        "pbt": f"{_HERE}.pbt:PBTKind",
        "hyperband": f"{_HERE}.hyperband:HyperbandKind",
    },
    function="register_search_kind",
)
#: name -> the kind (``SEARCH_KINDS["ablation"] = AblationKind()`` registers one)
SEARCH_KINDS: MutableMapping[str, SearchKind[Any]] = REGISTRY.instances()
