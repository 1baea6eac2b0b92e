"""What a pruning rule is: one small class per rule (``pruning: {rule: NAME, ...}`` in a spec), found in a registry
by its name, as search types and backends are (docs/development.md "Adding a pruning rule"). The anchors are
Optuna's ``BasePruner`` (a pruner judges one trial from the intermediate values of the study's trials) and Ray
Tune's ``TrialScheduler`` (a class per scheduler, chosen by the tuner's configuration).

A rule is handed the trial's own reports and its peers' (each peer's folder name, reports and, for a rule that asks,
its state) and answers ``''`` (go on) or why the trial stops. It judges wherever a trial reports: in the trial's own
process (a callable's ``report()``) or in the trial runner that watches a command trial. So a rule of another
package is found there through the entry-point group ``airflow_provider_gpusched.pruners`` (name = ``module:Class``),
or registered with :func:`register_pruner` in a module both processes import. A rule's settings are one
:class:`PruningRule` (also importable from core/sweep/pruning_rules/judging.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Annotated, Any, ClassVar

from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.records import Settings, one_of, says
from airflow_provider_gpusched.core.registry import Registry

ENTRY_POINT_GROUP = "airflow_provider_gpusched.pruners"
#: the settings of a rule given as a mapping that only some rules read: refused with any other rule
OPTIONAL_SETTINGS = ("pruner", "options")

Reports = Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Peer:
    """Another trial of the sweep, as a rule sees it."""

    name: str  # its trial folder's name
    reports: Reports  # its reports so far, in step order
    state: str = ""  # its state (status.json), read only for a rule that ``needs_states``
    version: Any = None  # changes whenever its reports changed (a rule that keeps state may rebuild on it)


class Pruner:
    """One pruning rule: made once per sweep folder and rule by whoever judges (a trial, a trial runner), then asked
    about each report. Subclasses set ``name``, list the settings only they read in ``reads``, check those in
    :meth:`check`, and answer in :meth:`judge`."""

    name: ClassVar[str] = ""
    #: the settings of :class:`PruningRule` this rule reads besides ``metric`` and ``mode``
    #: (``pruner``/``options`` given to a rule that does not read them are refused)
    reads: ClassVar[tuple[str, ...]] = ()
    #: whether :meth:`judge` needs each peer's state (one status.json read per peer and change)
    needs_states: ClassVar[bool] = False

    #: whether it judges an asynchronous search's trials in the sweep's shared Optuna study (:meth:`judge_in_study`)
    #: rather than from the peers' reports
    judges_in_study: ClassVar[bool] = False

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


#: the rules a spec may name (one :class:`~airflow_provider_gpusched.core.registry.Registry`, as backends have)
REGISTRY: Registry[Pruner] = Registry(
    "pruning rule",
    Pruner,
    ENTRY_POINT_GROUP,
    {
        "median": "airflow_provider_gpusched.core.sweep.pruning_rules.builtin:MedianRule",
        "asha": "airflow_provider_gpusched.core.sweep.pruning_rules.builtin:ASHARule",
        "optuna": "airflow_provider_gpusched.core.sweep.pruning_rules.builtin:OptunaRule",
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


# A sweep's pruning rule as its spec gives it (``pruning: {rule: NAME, ...}``): defined here, with the rules that
# read it, so that the interface needs nothing of core/sweep/pruning_rules/judging.py (which imports it). No docstring: the spec's
# JSON Schema describes it as it always has.
@dataclass
class PruningRule:
    #: the rule's name (core/sweep/pruning_rules/base.py's registry: median, asha, optuna, and those registered)
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
    # the settings of one rule (each rule's class lists those it ``reads``)
    warmup_steps: Annotated[int, says("a whole number >= 0", ge=0)] = 0  # median: judge no step before this
    min_trials: Annotated[int, says("a whole number >= 1", ge=1)] = 3  # median: peers that must have reached the step
    min_steps: Annotated[int, says("a whole number >= 1", ge=1)] = 1  # asha: the first rung
    #: asha: keep the top 1/reduction_factor at each rung
    reduction_factor: Annotated[int, says("a whole number >= 2", ge=2)] = 3
    pruner: str | None = None  # optuna: which of Optuna's pruners
    #: optuna: keyword arguments of its constructor (patient: also "wrapped")
    options: (
        Annotated[dict[Annotated[str, says("an argument name")], Any], says("a mapping of the pruner's arguments")]
        | None
    ) = None

    def check(self, where: str) -> None:
        """The settings' types and bounds, then what the rule itself asks of them (its class's ``check``)."""
        _RULE.check(self, where)  # each setting's type and bounds (their annotations)
        rule = pruner_class(self.rule, f"{where}.rule")
        for name in OPTIONAL_SETTINGS:
            if getattr(self, name) is not None and name not in rule.reads:
                readers = [n for n in pruner_names() if name in _reads(n)]
                raise InvalidArgumentError(
                    f"{where}.{name}", getattr(self, name), f"{name} only with rule: {', '.join(readers)}"
                )
        rule.check(self, where)

    def make_judge(self) -> Pruner:
        """This rule's judge (one per sweep folder that judges: it may keep state between judgements)."""
        return pruner_class(self.rule)(self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def judged_metric(self) -> str:
        """The metric the rule judges by: its own, or the objective's (which the sweep spec fills in)."""
        if self.metric is None:
            raise InvalidArgumentError("pruning.metric", None, "a metric (the sweep spec gives the objective's)")
        return self.metric


_RULE = Settings(PruningRule)


def _reads(name: str) -> tuple[str, ...]:
    try:
        return pruner_class(name).reads
    except GpuschedError:  # an installed rule that cannot be imported reads nothing here
        return ()
