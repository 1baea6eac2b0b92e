"""Early stopping of running trials from their intermediate reports (core/sweep/records/reports.py): a sweep's pruning
rule (``pruning: {rule: median, ...}``), its settings (:class:`PruningRule`, defined with the rules' interface in
core/sweep/pruning_rules/base.py and importable here) and the reports it judges (:class:`SweepReports`). Each rule is a small
class (core/sweep/pruning_rules/base.py: the interface and registry; median.py, asha.py and optuna.py beside it: the
built-in ``median``, ``asha`` and ``optuna``, each with its settings), as Optuna's pruners and Ray Tune's trial
schedulers are.

The metric is the sweep objective's (or ``metric``), in its direction. A stopped trial ends ``pruned``: its
own state, never retried and never ``failed``; its GPU is given back when it ends.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.sweep.pruning_rules.base import (  # noqa: F401 - their old home
    OPTIONAL_SETTINGS,
    Peer,
    Pruner,
    pruner_class,
    pruner_names,
)
from airflow_provider_gpusched.core.sweep.pruning_rules.base import PruningRule as PruningRule  # still importable here
from airflow_provider_gpusched.core.sweep.records.reports import REPORTS_FILE, read_reports
from airflow_provider_gpusched.core.sweep.records.store import read_json

PRUNING_ENV = "GPUSCHED_PRUNING"  # the rule (JSON) a trial's report() applies; set by the trial runner
SHARED_STUDY_ENV = "GPUSCHED_SHARED_STUDY"  # "1": the sweep is an asynchronous search (its study judges)


class TrialPruned(Exception):
    """Raised by ``report()`` in a callable trial that the sweep's pruning rule stops; the runner records the
    trial as ``pruned`` (a command trial is stopped by its runner instead)."""


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
        # a caller passes its one rule object each time: compared by identity first (equality makes two dicts)
        if self._pruner is None or (self._pruner.rule is not rule and self._pruner.rule != rule):
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
