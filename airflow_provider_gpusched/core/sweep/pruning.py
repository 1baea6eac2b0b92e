"""Early stopping of running trials from their intermediate reports (core/sweep/reports.py): a sweep's pruning
rule (``pruning: {rule: median, ...}``), its settings (:class:`PruningRule`) and the reports it judges
(:class:`SweepReports`). Each rule is a small class (core/sweep/pruner.py: the interface and registry;
core/sweep/pruners.py: the built-in ``median``, ``asha`` and ``optuna``), as Optuna's pruners and Ray Tune's
trial schedulers are.

The metric is the sweep objective's (or ``metric``), in its direction. A stopped trial ends ``pruned``: its
own state, never retried and never ``failed``; its GPU is given back when it ends.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Annotated, Any

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.records import Settings, one_of, says
from airflow_provider_gpusched.core.sweep.pruner import OPTIONAL_SETTINGS, Peer, Pruner, pruner_class, pruner_names
from airflow_provider_gpusched.core.sweep.reports import REPORTS_FILE, read_reports
from airflow_provider_gpusched.core.sweep.store import read_json

PRUNING_ENV = "GPUSCHED_PRUNING"  # the rule (JSON) a trial's report() applies; set by the trial runner
SHARED_STUDY_ENV = "GPUSCHED_SHARED_STUDY"  # "1": the sweep is an asynchronous search (its study judges)


class TrialPruned(Exception):
    """Raised by ``report()`` in a callable trial that the sweep's pruning rule stops; the runner records the
    trial as ``pruned`` (a command trial is stopped by its runner instead)."""


@dataclass
class PruningRule:
    #: the rule's name (core/sweep/pruner.py's registry: median, asha, optuna, and those registered)
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
    except InvalidArgumentError:  # an installed rule that cannot be imported reads nothing here
        return ()


def judge(
    rule: PruningRule,
    own: Sequence[Mapping[str, Any]],
    peers: Sequence[Sequence[Mapping[str, Any]]],
    judged_up_to: int | None = None,
) -> str:
    """One judgement by ``rule`` (checked, its metric and mode filled in), ``peers`` as each peer's reports: ''
    when the trial whose reports are ``own`` goes on, else why it stops."""
    peers_seen = [Peer(str(i), reports) for i, reports in enumerate(peers)]
    return rule.make_judge().decide("", own, peers_seen, judged_up_to)


class SweepReports:
    """The reports of all trials of a sweep folder, re-read only when a file changed (a report decision
    reads every peer's file)."""

    def __init__(self, sweep_dir: str, shared_study: bool = False) -> None:
        """``shared_study``: the sweep is an asynchronous search, whose trials a rule that can judges in its study."""
        self.sweep_dir, self.shared_study = sweep_dir, shared_study
        self.trials_dir = os.path.join(sweep_dir, "trials")
        self._cache: dict[str, tuple[tuple[int, int], list[dict[str, Any]]]] = {}
        self._states: dict[str, tuple[tuple[int, int], str]] = {}
        self._pruner: Pruner | None = None  # the rule's judge, kept between judgements

    def all(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        try:
            names = os.listdir(self.trials_dir)
        except FileNotFoundError:
            return out
        for name in names:
            path = os.path.join(self.trials_dir, name, REPORTS_FILE)
            try:
                st = os.stat(path)
            except OSError:
                continue
            key = (st.st_size, st.st_mtime_ns)
            cached = self._cache.get(path)
            if cached is None or cached[0] != key:
                cached = (key, read_reports(path)[0])
                self._cache[path] = cached
            out[name] = cached[1]
        return out

    def judge(self, rule: PruningRule, folder_name: str, judged_up_to: int | None = None) -> str:
        """Trial ``folder_name`` judged by ``rule`` against every other trial of the folder as last written."""
        if self._pruner is None or self._pruner.rule != rule:
            self._pruner = rule.make_judge()
        if self.shared_study and self._pruner.judges_in_study:
            path = os.path.join(self.trials_dir, folder_name, REPORTS_FILE)
            return self._pruner.judge_in_study(self.sweep_dir, folder_name, read_reports(path)[0])
        everything = self.all()
        own = everything.pop(folder_name, [])
        # the peers' states: for a rule that reads them, and to learn the budget from the trials that succeeded
        states = type(self._pruner).needs_states or self._pruner.final_step_setting() is None
        peers = [
            Peer(name, reports, self._state(name) if states else "", self._cache_key(name))
            for name, reports in sorted(everything.items())
        ]
        return self._pruner.decide(folder_name, own, peers, judged_up_to)

    def _cache_key(self, folder_name: str) -> Any:
        cached = self._cache.get(os.path.join(self.trials_dir, folder_name, REPORTS_FILE))
        return cached[0] if cached else None

    def _state(self, folder_name: str) -> str:
        """A peer's state from its status.json (re-read only when it changed); '' when unreadable."""
        path = os.path.join(self.trials_dir, folder_name, "status.json")
        try:
            st = os.stat(path)
        except OSError:
            return ""
        key = (st.st_size, st.st_mtime_ns)
        cached = self._states.get(path)
        if cached is None or cached[0] != key:
            data = read_json(path)
            state = data.get("state") if isinstance(data, dict) else None
            cached = (key, state if isinstance(state, str) else "")
            self._states[path] = cached
        return cached[1]

    def last_step(self, folder_name: str) -> int:
        """The last step in this trial's reports as last read (by :meth:`judge`): no second read."""
        cached = self._cache.get(os.path.join(self.trials_dir, folder_name, REPORTS_FILE))
        return cached[1][-1]["step"] if cached and cached[1] else -1


def rule_from_env() -> tuple[PruningRule, str, str] | None:
    """In a trial process: (the rule, the sweep folder, this trial's folder name) when the sweep prunes."""
    raw = os.environ.get(PRUNING_ENV)  # (with $GPUSCHED_SHARED_STUDY=1 its sweep is an asynchronous search)
    trial_dir = os.environ.get("GPUSCHED_TRIAL_DIR")
    if not raw or not trial_dir:
        return None
    try:
        rule = PruningRule(**json.loads(raw))
        rule.check(PRUNING_ENV)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"${PRUNING_ENV}", raw[:200], f"a pruning rule as JSON ({exc})") from None
    trial_dir = os.path.abspath(trial_dir)
    return rule, os.path.dirname(os.path.dirname(trial_dir)), os.path.basename(trial_dir)
