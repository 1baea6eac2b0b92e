"""What a pruning rule is: one small class per rule (``pruning: {rule: NAME, ...}`` in a spec), found in a registry
by its name, as search types and backends are (docs/development.md "Adding a pruning rule"). The anchors are
Optuna's ``BasePruner`` (a pruner judges one trial from the intermediate values of the study's trials) and Ray
Tune's ``TrialScheduler`` (a class per scheduler, chosen by the tuner's configuration).

A rule is handed the trial's own reports and its peers' (each peer's folder name, reports and, for a rule that asks,
its state) and answers ``''`` (go on) or why the trial stops. It judges wherever a trial reports: in the trial's own
process (a callable's ``report()``) or in the trial runner that watches a command trial. So a rule of another
package is found there through the entry-point group ``airflow_provider_gpusched.pruners`` (name = ``module:Class``),
or registered with :func:`register_pruner` in a module both processes import.

A spec's ``pruning:`` mapping is one :class:`PruningRule` (also importable from core/sweep/pruning_rules/judging.py):
the settings every rule shares (``rule``, ``metric``, ``mode``, ``max_steps``) and the rule's own, each rule owning
them as a typed record (its class's ``settings_class``: ``MedianSettings`` in median.py), so a new rule with
settings touches only its own module.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Annotated, Any, ClassVar, TypeVar

from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError, UnknownKeyError
from airflow_provider_gpusched.core.records import Settings, one_of, says
from airflow_provider_gpusched.core.registry import Registry

ENTRY_POINT_GROUP = "airflow_provider_gpusched.pruners"
#: the built-in settings without a default (optuna's): refused with a rule that does not read them (as any rule's
#: setting whose default is None is; kept for code that imported it)
OPTIONAL_SETTINGS = ("pruner", "options")

Reports = Sequence[Mapping[str, Any]]
T = TypeVar("T")


@dataclass(frozen=True)
class Peer:
    """Another trial of the sweep, as a rule sees it."""

    name: str  # its trial folder's name
    reports: Reports  # its reports so far, in step order
    state: str = ""  # its state (status.json), read only for a rule that ``needs_states``
    version: Any = None  # changes whenever its reports changed (a rule that keeps state may rebuild on it)


class Pruner:
    """One pruning rule: made once per sweep folder and rule by whoever judges (a trial, a trial runner), then asked
    about each report. Subclasses set ``name`` and their ``settings_class``, check what relates their settings in
    :meth:`check`, and answer in :meth:`judge`."""

    name: ClassVar[str] = ""
    #: this rule's own settings: a dataclass whose fields (each with a default, annotated with its type and bounds:
    #: core/records.py ``says``) are keys of a spec's ``pruning:`` mapping, checked by their annotations; the rule
    #: reads them as ``self.rule.settings_as(ItsSettings)``. None: the rule has no settings of its own
    settings_class: ClassVar[type[Any] | None] = None
    #: the settings this rule reads besides ``metric`` and ``mode``: its ``settings_class``'s fields (filled in),
    #: and another rule's it names (a rule reading the untyped ``options``); a setting without a default (None)
    #: given to a rule that does not read it is refused
    reads: ClassVar[tuple[str, ...]] = ()
    #: whether :meth:`judge` needs each peer's state (one status.json read per peer and change)
    needs_states: ClassVar[bool] = False

    #: whether it judges an asynchronous search's trials in the sweep's shared Optuna study (:meth:`judge_in_study`)
    #: rather than from the peers' reports
    judges_in_study: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = tuple(f.name for f in fields(cls.settings_class)) if cls.settings_class is not None else ()
        cls.reads = tuple(dict.fromkeys((*own, *cls.reads)))

    def __init__(self, rule: PruningRule) -> None:
        self.rule = rule

    @classmethod
    def needs_shared_study(cls, rule: PruningRule) -> bool:
        """Whether ``rule`` judges only in an asynchronous search's shared study (a spec in rounds is refused)."""
        return False

    def judge_in_study(self, sweep_dir: str, trial: str, own: Reports) -> str:
        """'' or why trial folder ``trial`` stops, judged in the study of the asynchronous search in ``sweep_dir``."""
        raise NotImplementedError

    @classmethod
    def check(cls, rule: PruningRule, where: str) -> None:
        """Refuse this rule's own settings when the spec is made (the shared ones, their types and bounds, are
        checked before)."""

    def judge(self, trial: str, own: Reports, peers: Sequence[Peer], judged_up_to: int | None = None) -> str:
        """``''`` when trial ``trial`` (its folder name), whose reports are ``own``, goes on; else why it stops.
        ``judged_up_to``: the last step already judged (None: the step before the latest report). Called by
        :meth:`decide` only for a trial that has not reached its budget."""
        raise NotImplementedError

    def final_step_setting(self) -> int | None:
        """The budget in steps the rule's settings give (``max_steps``; a rule with a budget setting of its own,
        such as Optuna's Hyperband ``max_resource``, overrides this), or None: learned from the peers."""
        return self.rule.max_steps

    def final_step(self, peers: Sequence[Peer]) -> int | None:
        """The step at which a trial has trained its whole budget: :meth:`final_step_setting`, else the last step
        of the peers that succeeded (Optuna's ``max_resource='auto'``: the steps of a finished trial); None while
        no peer has."""
        setting = self.final_step_setting()
        if setting is not None:
            return setting
        finished = [p.reports[-1]["step"] for p in peers if p.state == "succeeded" and p.reports]
        return max(finished) if finished else None

    def decide(self, trial: str, own: Reports, peers: Sequence[Peer], judged_up_to: int | None = None) -> str:
        """What every judgement goes through: a trial whose latest report is its last (``final``, said by the
        trial) or reached its budget (:meth:`final_step`) is complete (there is nothing left to save by stopping it, and it must be ranked: Optuna's Hyperband
        brackets end at ``max_resource``, Ray Tune's ASHA at ``max_t``); any other is :meth:`judge`'d."""
        if own:
            if own[-1].get("final"):  # the trial says so: its last report (core/sweep/records/reports.py)
                return ""
            final = self.final_step(peers)
            if final is not None and own[-1]["step"] >= final:
                return ""
        return self.judge(trial, own, peers, judged_up_to)


_HERE = "airflow_provider_gpusched.core.sweep.pruning_rules"
#: the rules a spec may name (one :class:`~airflow_provider_gpusched.core.registry.Registry`, as backends have)
REGISTRY: Registry[Pruner] = Registry(
    "pruning rule",
    Pruner,
    ENTRY_POINT_GROUP,
    {
        "median": f"{_HERE}.median:MedianRule",
        "asha": f"{_HERE}.asha:ASHARule",
        "optuna": f"{_HERE}.optuna:OptunaRule",
    },
    function="register_pruner",
)


def register_pruner(cls: type[Pruner]) -> type[Pruner]:
    """Make a rule known by its ``name`` (usable as a class decorator). Registering a name again replaces it."""
    REGISTRY.register(cls)
    return cls


def unregister_pruner(name: str) -> None:
    REGISTRY.unregister(name)


def pruner_names() -> list[str]:
    """The rules a spec may name: the built-in ones, the registered ones and those of installed packages."""
    return REGISTRY.names()


def pruner_class(name: str, where: str = "pruning.rule") -> type[Pruner]:
    """The class of rule ``name`` (a ``module:Class`` entry loaded on first use); an unknown name is refused
    naming ``where`` and the known rules."""
    return REGISTRY.get(name, where)


# A sweep's pruning rule as its spec gives it (``pruning: {rule: NAME, ...}``): defined here, beside the interface
# every rule's module (median.py, asha.py, optuna.py) implements, so that they need nothing of judging.py (which
# imports it).


@dataclass
class SharedSettings:
    """The settings of ``pruning:`` that every rule shares."""

    #: the rule's name (this module's registry: median, asha, optuna, and those registered)
    rule: Annotated[str, says("the name of a pruning rule")] = "median"
    #: default: the objective's metric
    metric: Annotated[str, says("a metric name the trials report", min_length=1)] | None = None
    #: default: the objective's mode
    mode: Annotated[str, says("'maximize' or 'minimize'"), one_of(("maximize", "minimize"))] | None = None
    #: the step at which a trial has trained its whole budget (Optuna's ``max_resource``, Ray Tune's ``max_t``): a
    #: report there or past it is complete, never pruned (every rule). Default: the rule's own (Optuna's Hyperband:
    #: its ``max_resource``), else the last step of the trials that succeeded (as Optuna's ``max_resource='auto'``
    #: learns it from the first finished trial)
    max_steps: Annotated[int, says("a whole number of steps >= 1", ge=1)] | None = None


SHARED = tuple(f.name for f in fields(SharedSettings))


class PruningRule:
    """A sweep's pruning rule: the shared settings (``SharedSettings``) as attributes, and the rule's own settings as the record
    of its class's ``settings_class`` (``settings``, read typed with ``settings_as()``). Made as the spec's
    mapping reads, ``PruningRule("asha", min_steps=2)``; ``rule.min_steps`` reads a setting by its name (the rule's
    own, else one given, else its default), and ``to_dict()`` gives the keywords back (a trial gets them as
    JSON). A setting of another rule is kept aside, checked by that rule's annotations."""

    rule: str
    metric: str | None
    mode: str | None
    max_steps: int | None
    settings: Any  # the rule's own settings record; None: an unknown rule, or one without settings

    def __init__(
        self,
        rule: str = "median",
        metric: str | None = None,
        mode: str | None = None,
        max_steps: int | None = None,
        **settings: Any,
    ) -> None:
        for name, value in zip(SHARED, (rule, metric, mode, max_steps), strict=True):
            object.__setattr__(self, name, value)
        unknown = _unknown(rule, settings)
        if unknown:  # as the dataclass it was refused them
            raise TypeError(f"PruningRule.__init__() got an unexpected keyword argument {unknown[0]!r}")
        self._sort(settings)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str) -> PruningRule:
        """A spec's ``pruning:`` mapping; a key no rule reads is refused naming it and the known keys."""
        unknown = _unknown(data.get("rule", "median"), data)
        if unknown:
            raise UnknownKeyError(f"{where}.{unknown[0]}", unknown[0], known_keys())
        return cls(**data)

    def _sort(self, values: dict[str, Any]) -> None:
        """Put the settings given where they belong: the rule's own into its record, the others aside."""
        found = _rule_class(self.rule)
        record_class = found.settings_class if found is not None else None
        record = None
        if record_class is not None:
            own = {f.name: values.pop(f.name) for f in fields(record_class) if f.name in values}
            try:
                record = record_class(**own)
            except TypeError:  # a setting without a default is missing: check() names it
                values = {**own, **values}
        object.__setattr__(self, "settings", record)
        object.__setattr__(self, "_others", values)

    def _values(self) -> dict[str, Any]:
        """Every setting but the shared ones: the rule's own (defaults filled in), then the others given."""
        own = asdict(self.settings) if self.settings is not None else {}
        return {**own, **copy.deepcopy(self._others)}

    def settings_as(self, cls: type[T]) -> T:
        """The rule's own settings record, typed as its ``settings_class`` ``cls``."""
        if not isinstance(self.settings, cls):
            self._sort(self._values())  # the rule was registered, or changed, after this was made
        if not isinstance(self.settings, cls):
            raise GpuschedError(f"pruning rule {self.rule!r}: its settings are not {cls.__name__}")
        return self.settings

    def __getattr__(self, name: str) -> Any:
        """A setting by its name (called only for what is not an attribute): the rule's own, else one given, else
        its default (the first rule's that has it)."""
        if name.startswith("_") or name == "settings":
            raise AttributeError(name)
        record = self.__dict__.get("settings")
        if record is not None and name in _names(type(record)):
            return getattr(record, name)
        others = self.__dict__.get("_others", {})
        if name in others:
            return others[name]
        owner = _owner(name)
        if owner is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return _default(owner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in SHARED or name == "settings" or name.startswith("_"):
            values = self._values() if name == "rule" else None
            object.__setattr__(self, name, value)
            if values is not None:
                self._sort(values)  # another rule: its own settings record
        elif self.settings is not None and name in _names(type(self.settings)):
            setattr(self.settings, name, value)
        else:
            self._others[name] = value

    def check(self, where: str) -> None:
        """The settings' types and bounds (their annotations), then what the rule itself asks of them (its class's
        ``check``). Errors name ``<where>.<key>``."""
        _checker(SharedSettings).check(self, where)
        found = _rule_class(self.rule)
        if found is not None and found.settings_class is not None:
            self._sort(self._values())  # the rule may have been registered after this was made
            _check_complete(found.settings_class, self.settings, self._others, where)
        if self.settings is not None:
            _checker(type(self.settings)).check(self.settings, where)
        for key, value in self._others.items():
            owner = _owner(key)
            if owner is None:
                raise UnknownKeyError(f"{where}.{key}", key, known_keys())
            _checker(owner).check({key: value}, where)
        rule = pruner_class(self.rule, f"{where}.rule")
        for key, value in self._others.items():
            if value is not None and key not in rule.reads and _default(_owner(key), key) is None:
                readers = [n for n in pruner_names() if key in _reads(n)]
                raise InvalidArgumentError(f"{where}.{key}", value, f"{key} only with rule: {', '.join(readers)}")
        rule.check(self, where)

    def make_judge(self) -> Pruner:
        """This rule's judge (one per sweep folder that judges: it may keep state between judgements)."""
        return pruner_class(self.rule)(self)

    def to_dict(self) -> dict[str, Any]:
        """The keywords that make this rule again (``PruningRule(**rule.to_dict())``)."""
        return {name: getattr(self, name) for name in SHARED} | self._values()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PruningRule):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it was

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickling: this class's state as it is, or an old pickle's (the dataclass's flat fields: every rule's
        settings) made again, keeping of another rule's settings only those not at their default."""
        if "settings" in state:
            self.__dict__.update(state)
            return
        found = _rule_class(state.get("rule", "median"))
        reads = found.reads if found is not None else ()
        kept = {
            k: v for k, v in state.items() if k in SHARED or k in reads or (_owner(k) and v != _default(_owner(k), k))
        }
        PruningRule.__init__(self, **kept)

    def __repr__(self) -> str:
        return f"PruningRule({', '.join(f'{k}={v!r}' for k, v in self.to_dict().items())})"

    @property
    def judged_metric(self) -> str:
        """The metric the rule judges by: its own, or the objective's (which the sweep spec fills in)."""
        if self.metric is None:
            raise InvalidArgumentError("pruning.metric", None, "a metric (the sweep spec gives the objective's)")
        return self.metric


def _rule_class(name: Any) -> type[Pruner] | None:
    """The class of rule ``name``, or None when no rule has the name (or it cannot be imported)."""
    try:
        return pruner_class(name)
    except (GpuschedError, TypeError):
        return None


def _unknown(rule: Any, settings: Mapping[Any, Any]) -> list[Any]:
    """The keys of ``settings`` that neither rule ``rule`` nor any other known rule reads."""
    found = _rule_class(rule)
    mine = {*SHARED, *(found.reads if found is not None else ())}
    return [k for k in settings if k not in mine and _owner(k) is None]


def _settings_classes() -> list[type[Any]]:
    """The settings classes of the rules known now, in the registry's order (one that cannot be imported: none)."""
    found = [c.settings_class for n in pruner_names() if (c := _rule_class(n)) is not None]
    return list(dict.fromkeys(c for c in found if c is not None))


def _owner(key: Any) -> type[Any] | None:
    """The settings class of the first known rule that has setting ``key`` (it says its type and default)."""
    return next((c for c in _settings_classes() if key in _names(c)), None)


def known_keys() -> list[str]:
    """Every key a ``pruning:`` mapping may have, with the rules known now."""
    return list(dict.fromkeys([*SHARED, *(n for c in _settings_classes() for n in _names(c))]))


def _names(cls: type[Any]) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _default(cls: type[Any] | None, name: str) -> Any:
    """Setting ``name``'s default in settings class ``cls`` (None: it has none)."""
    field = next((f for f in fields(cls) if f.name == name), None) if cls is not None else None
    if field is not None and field.default is not MISSING:
        return field.default
    if field is not None and field.default_factory is not MISSING:
        return field.default_factory()
    return None


def _check_complete(cls: type[Any], record: Any, given: Mapping[str, Any], where: str) -> None:
    """Refuse a rule whose settings record could not be made: a setting without a default was not given."""
    if record is None:
        unset = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        missing = next((n for n in unset if n not in given), None)
        if missing is None:
            raise InvalidArgumentError(where, dict(given), f"the settings of {cls.__name__}")
        raise InvalidArgumentError(f"{where}.{missing}", None, "a value (it has no default)")


_CHECKERS: dict[type[Any], Settings[Any]] = {}


def _checker(cls: type[Any]) -> Settings[Any]:
    """One settings class's annotated settings, checked as one record (core/records.py); made once per class."""
    found = _CHECKERS.get(cls)
    if found is None:
        found = _CHECKERS[cls] = Settings(cls)
    return found


def rule_schema_defs() -> dict[str, Any]:
    """The JSON Schema of a spec's ``pruning:`` mapping (``gpusched sweep schema``'s ``PruningRule``, with any
    ``$defs`` its settings need): the shared settings, then each known rule's own, in the registry's order (a key
    two rules have is described by the first)."""
    from pydantic import TypeAdapter

    properties: dict[str, Any] = {}
    defs: dict[str, Any] = {}
    records: list[type[Any]] = [SharedSettings, *_settings_classes()]
    for record in records:
        found = TypeAdapter(record).json_schema(ref_template="#/$defs/{model}")
        defs.update(found.get("$defs", {}))
        for key, value in found["properties"].items():
            properties.setdefault(key, value)
    return {**defs, "PruningRule": {"properties": properties, "title": "PruningRule", "type": "object"}}


def _reads(name: str) -> tuple[str, ...]:
    found = _rule_class(name)  # an installed rule that cannot be imported reads nothing here
    return found.reads if found is not None else ()
