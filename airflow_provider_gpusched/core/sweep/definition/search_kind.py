"""The interface of a search type and its registry (the built-in kinds are core/sweep/searches' modules, one per
kind; the registry also reads the entry-point group ``airflow_provider_gpusched.search_kinds``).

A kind is told the whole spec once its shared fields are valid; it checks the settings only it reads, fills their
defaults, and answers what the spec means for its type. A one-shot kind (``in_rounds = False``) implements
``trials``; a round kind implements ``round_search`` (core/sweep/searches/rounds.py's ``RoundSearch``).

The interface sits below the spec and the searches: it reads a spec through :class:`KindSpec` (a kind names the spec
class it reads, ``SearchKind["SweepSpec"]``) and answers a search through :class:`SearchInRounds`, and the registry
knows the built-in kinds as ``module:Class`` strings, so the spec finds its kind without importing any."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Generic, Optional, Protocol, TypeVar

from airflow_provider_gpusched.core.checks import record_from_mapping
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.records import says
from airflow_provider_gpusched.core.registry import Registry
from airflow_provider_gpusched.core.sweep.parts.expand import Trial, flatten

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.parts.objective import Objective
    from airflow_provider_gpusched.core.sweep.records.store import TrialStore


class KindSpec(Protocol):
    """What the interface's own methods read of a spec (core/sweep/definition/sweep_spec.py's ``SweepSpec`` has it all)."""

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
    @property
    def objective(self) -> Objective | None: ...


class SearchInRounds(Protocol):
    """What a round kind's search answers the sweep (core/sweep/searches/rounds.py's ``RoundSearch`` is the base of each)."""

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

    #: the spec key this kind's own settings are under (``pbt:``), None: it has none. The kind owns them: a typed
    #: record (:attr:`settings_class`, a dataclass with a ``check(where)``) parsed from that key's mapping by
    #: :meth:`parse_settings`, errors naming the key; the spec knows no kind's settings
    settings_key: ClassVar[str | None] = None
    settings_class: ClassVar[type[Any] | None] = None
    #: what an error says the key holds when it is neither a mapping nor the record
    settings_expected: ClassVar[str] = "a mapping of the search type's settings"
    #: whether the settings are refused in a spec of another search type
    settings_only_with_kind: ClassVar[bool] = True

    def raw_settings(self, spec: Any) -> Any:
        """This kind's settings as the spec holds them (a mapping, the record, or None): under the spec's field of
        that name (the built-in kinds') or in its ``search_settings`` (an installed kind's)."""
        key = self.settings_key
        if key is None:
            return None
        if key in _spec_fields(spec):
            return getattr(spec, key)
        return (getattr(spec, "search_settings", None) or {}).get(key)

    def parse_settings(self, spec: Any) -> Any:
        """This kind's settings as its typed record, defaults filled and checked, stored back on the spec; None for
        a kind without settings. Errors name ``<where>: <key>`` or ``<where>: <key>.<setting>``."""
        key, cls = self.settings_key, self.settings_class
        if key is None or cls is None:
            return None
        where = f"{spec.where}: {key}"
        raw = self.raw_settings(spec)
        if raw is None:
            raw = cls()
        self.check_settings_type(raw, where)
        if isinstance(raw, Mapping):
            raw = record_from_mapping(cls, raw, where)
        raw.check(where)
        if key in _spec_fields(spec):
            setattr(spec, key, raw)
        else:
            spec.search_settings = {**(spec.search_settings or {}), key: raw}
        return raw

    def check_settings_type(self, raw: Any, where: str) -> None:
        """Refuse settings that are neither a mapping nor this kind's record, naming ``where``."""
        cls = self.settings_class
        if not isinstance(raw, Mapping) and not (cls is not None and isinstance(raw, cls)):
            raise InvalidArgumentError(where, raw, self.settings_expected)

    def settings_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of this kind's settings key (``gpusched sweep schema``), from its record's fields; a
        kind whose settings name functions overrides it."""
        if self.settings_class is None:
            return None
        from pydantic import TypeAdapter

        adapter: TypeAdapter[Any] = TypeAdapter(Optional[self.settings_class])  # type: ignore[arg-type]  # noqa: UP045
        schema: dict[str, Any] = adapter.json_schema(ref_template="#/$defs/{model}")
        return schema

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


def _spec_fields(spec: Any) -> frozenset[str]:
    import dataclasses

    return frozenset(f.name for f in dataclasses.fields(spec)) if dataclasses.is_dataclass(spec) else frozenset()


#: the entry-point group other packages add search types under (``name = "package.module:KindClass"``)
ENTRY_POINT_GROUP = "airflow_provider_gpusched.search_kinds"
_HERE = "airflow_provider_gpusched.core.sweep.searches"
#: every search type, by the name a spec's ``search`` gives (one
#: :class:`~airflow_provider_gpusched.core.registry.Registry`, as backends and pruning rules have); the built-in
#: ones are core/sweep/searches' modules, one per kind, imported on first use
REGISTRY: Registry[SearchKind[Any]] = Registry(
    "search type",
    SearchKind,
    ENTRY_POINT_GROUP,
    {
        "grid": f"{_HERE}.grid:GridKind",
        "random": f"{_HERE}.random_search:RandomKind",
        "optuna": f"{_HERE}.optuna:OptunaKind",
        "evolution": f"{_HERE}.evolution:EvolutionKind",
        "pbt": f"{_HERE}.pbt:PBTKind",
        "hyperband": f"{_HERE}.hyperband:HyperbandKind",
    },
    function="register_search_kind",
)
#: name -> the kind (``SEARCH_KINDS["ablation"] = AblationKind()`` registers one)
SEARCH_KINDS: MutableMapping[str, SearchKind[Any]] = REGISTRY.instances()


AtLeastOne = Annotated[int, says("an integer >= 1", ge=1)]
AtLeastZero = Annotated[int, says("an integer >= 0", ge=0)]


Fraction = Annotated[float, says("a fraction above 0 and at most 0.5", gt=0, le=0.5)]


def objective_needed(spec: KindSpec, what: str) -> None:
    """Refuse a spec without an objective for a kind that ranks its trials (``what`` says what for)."""
    if spec.objective is None:
        raise InvalidArgumentError(f"{spec.where}: objective", None, f"{what} (search: {spec.search})")


def loaded_kind(name: str) -> SearchKind[Any] | None:
    """The search type called ``name``, or None when none has the name or it cannot be loaded (an installed
    package's kind that fails to import must not break a spec that does not use it)."""
    try:
        return REGISTRY.instance(name, "search")
    except (GpuschedError, TypeError):
        return None


def settings_owner(key: str, first: Sequence[str] = ()) -> tuple[str, SearchKind[Any]] | None:
    """(name, kind) of the search type whose settings are under spec key ``key``, or None. The kinds named in
    ``first`` and the one named as the key are asked before the others, so that a spec loads no other kind; a
    kind that cannot be loaded is skipped."""
    for name in dict.fromkeys((*first, key, *REGISTRY.names())):
        kind = loaded_kind(name)
        if kind is not None and kind.settings_key == key:
            return name, kind
    return None


def settings_keys() -> list[str]:
    """The settings keys of every search type that loads, sorted."""
    kinds = (loaded_kind(name) for name in REGISTRY.names())
    return sorted({kind.settings_key for kind in kinds if kind is not None and kind.settings_key})


def register_search_kind(kind: type[SearchKind[Any]] | SearchKind[Any]) -> Any:
    """Make a search type known by its ``name`` (usable as a class decorator); a name again replaces it."""
    return REGISTRY.register(kind)


def unregister_search_kind(name: str) -> None:
    REGISTRY.unregister(name)


def search_kind(name: object, where: str = "search") -> SearchKind[Any]:
    """The search type called ``name``; an unknown one is refused naming ``where`` and the known types."""
    return REGISTRY.instance(name, where)
