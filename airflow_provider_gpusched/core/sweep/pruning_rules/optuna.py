"""The ``optuna`` rule: Optuna's own pruners (``pruner``: ``median``, ``percentile``, ``successive_halving``,
``threshold`` or ``patient``, with ``options`` passed to its constructor), which judge the trial in an in-memory study
rebuilt from the sweep's reports: each other trial with reports is COMPLETE (it succeeded), PRUNED, or RUNNING, with
its reports as intermediate values. Any search can use them, Optuna's or not. In an asynchronous Optuna search they,
and ``hyperband`` and ``wilcoxon``, judge in the sweep's shared study itself (:class:`StudyJudge`)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from airflow_provider_gpusched.core.checks import is_int
from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.records import says
from airflow_provider_gpusched.core.sweep.pruning_rules.base import Peer, Pruner, PruningRule, Reports
from airflow_provider_gpusched.core.sweep.pruning_rules.curves import _value

#: Optuna's pruners that judge from intermediate values alone (Hyperband's brackets hang on a study's trial
#: numbers, which a study rebuilt from the reports cannot keep stable; Wilcoxon needs scipy)
OPTUNA_PRUNERS = {
    "median": "MedianPruner",
    "percentile": "PercentilePruner",
    "successive_halving": "SuccessiveHalvingPruner",
    "threshold": "ThresholdPruner",
    "patient": "PatientPruner",
    "hyperband": "HyperbandPruner",
    "wilcoxon": "WilcoxonPruner",
}
#: Optuna's pruners that keep state per study trial (Hyperband's brackets are chosen by trial number; Wilcoxon
#: compares a trial with the study's best, step by step): only in an asynchronous search's shared study
IN_STUDY_ONLY = ("hyperband", "wilcoxon")


@dataclass
class OptunaSettings:
    """``pruning: {rule: optuna, pruner: median, options: {n_startup_trials: 5}}``."""

    pruner: str | None = None  # which of Optuna's pruners (OPTUNA_PRUNERS)
    #: keyword arguments of its constructor (patient: also "wrapped")
    options: (
        Annotated[dict[Annotated[str, says("an argument name")], Any], says("a mapping of the pruner's arguments")]
        | None
    ) = None


def _settings(rule: PruningRule) -> OptunaSettings:
    return rule.settings_as(OptunaSettings)


class OptunaRule(Pruner):
    """Optuna's pruners, judging on an in-memory study of the sweep's reports (:class:`OptunaJudge`): each trial
    a rule judges keeps its own study (a batch process runs trials one by one)."""

    name = "optuna"
    settings_class = OptunaSettings
    needs_states = True
    judges_in_study = True

    def __init__(self, rule: PruningRule) -> None:
        super().__init__(rule)
        self._judges: dict[str, OptunaJudge] = {}
        self._in_study: StudyJudge | None = None

    @classmethod
    def check(cls, rule: PruningRule, where: str) -> None:
        settings = _settings(rule)
        if settings.pruner not in OPTUNA_PRUNERS:
            raise InvalidArgumentError(f"{where}.pruner", settings.pruner, f"one of {list(OPTUNA_PRUNERS)}")
        settings.options = dict(settings.options or {})
        if settings.pruner == "successive_halving" and (not is_int(settings.options.get("min_resource"))):
            raise InvalidArgumentError(
                f"{where}.options.min_resource",
                settings.options.get("min_resource"),
                "a whole number of steps (the rungs are rebuilt from the reports; 'auto' is not supported)",
            )
        make_optuna_pruner(rule, where)  # its arguments are checked now, not in the middle of a trial

    @classmethod
    def needs_shared_study(cls, rule: PruningRule) -> bool:
        return _settings(rule).pruner in IN_STUDY_ONLY

    def final_step_setting(self) -> int | None:
        """``max_steps``, else Hyperband's ``max_resource`` when it is a number (``auto``: learned)."""
        if self.rule.max_steps is not None:
            return self.rule.max_steps
        settings = _settings(self.rule)
        budget = (settings.options or {}).get("max_resource") if settings.pruner == "hyperband" else None
        return budget if is_int(budget) else None

    def judge_in_study(self, sweep_dir: str, trial: str, own: Reports) -> str:
        """An asynchronous search's trial, judged in the sweep's own study (core/sweep/running/asynchronous.py): its new
        reports go to its RUNNING study trial, and the study's pruner decides, as in Optuna's own distributed
        optimisation (Hyperband's brackets, the median of the study's COMPLETE trials...)."""
        if self._in_study is None:
            self._in_study = StudyJudge(self.rule, sweep_dir, self.final_step_setting())
        return self._in_study.judge(trial, own)

    def judge(self, trial: str, own: Reports, peers: Sequence[Peer], judged_up_to: int | None = None) -> str:
        judge_of = self._judges.get(trial)
        if judge_of is None:
            judge_of = self._judges[trial] = OptunaJudge(self.rule)
        key = tuple((p.name, p.version, p.state) for p in peers)
        return judge_of.judge(own, [(p.state, p.reports) for p in peers], key)


def make_optuna_pruner(rule: PruningRule, where: str = "pruning") -> Any:
    try:
        import optuna
    except ImportError:
        raise InvalidArgumentError(
            f"{where}.rule",
            "optuna",
            "Optuna installed for Optuna's pruners: pip install 'airflow-provider-gpusched[optuna]'",
        ) from None
    settings = _settings(rule)
    options = dict(settings.options or {})
    class_name = OPTUNA_PRUNERS.get(settings.pruner or "")
    if class_name is None:
        raise InvalidArgumentError(f"{where}.pruner", settings.pruner, f"one of {list(OPTUNA_PRUNERS)}")
    import warnings

    try:
        if settings.pruner == "patient":
            warnings.filterwarnings("ignore", "PatientPruner is experimental", optuna.exceptions.ExperimentalWarning)
            wrapped = options.pop("wrapped", None)
            inner = None
            if wrapped is not None:
                if (
                    not isinstance(wrapped, Mapping)
                    or wrapped.get("pruner") not in OPTUNA_PRUNERS
                    or wrapped.get("pruner") == "patient"
                ):
                    raise InvalidArgumentError(f"{where}.options.wrapped", wrapped, "{pruner: median, options: {...}}")
                inner = getattr(optuna.pruners, OPTUNA_PRUNERS[wrapped["pruner"]])(**dict(wrapped.get("options") or {}))
            return optuna.pruners.PatientPruner(inner, **options)
        with warnings.catch_warnings():  # Optuna marks WilcoxonPruner experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return getattr(optuna.pruners, class_name)(**options)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(
            f"{where}.options", settings.options, f"arguments of optuna.pruners.{class_name} ({exc})"
        ) from None


class OptunaJudge:
    """Optuna's pruner on an in-memory study: the other trials (state, reports) as COMPLETE, PRUNED or RUNNING
    trials with their reports as intermediate values, and this trial as a RUNNING trial it reports to and asks
    ``should_prune()`` (Optuna's public API). The study is kept while the peers are unchanged; only this
    trial's new reports are added to it, so a judgement costs what Optuna's own pruning call costs. While
    other trials keep reporting, the study is rebuilt at most once per ``REBUILD_SECONDS`` (a rebuild copies
    every peer's curve into Optuna's storage: ~25 ms for 30 peers of 27 steps on a slow 2-core VM)."""

    REBUILD_SECONDS = 1.0

    def __init__(self, rule: PruningRule, pruner: Any = None) -> None:
        import optuna

        self.optuna, self.rule = optuna, rule
        self.pruner = pruner or make_optuna_pruner(rule)
        self._peers_key: Any = None
        self._study: Any = None
        self._trial: Any = None
        self._reported: set[int] = set()
        self._built_at = 0.0

    def _curve(self, reports: Sequence[Mapping[str, Any]]) -> dict[int, float]:
        return {r["step"]: v for r in reports if (v := _value(r, self.rule.judged_metric)) is not None}

    def _build(self, peers: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]) -> None:
        optuna = self.optuna
        states = optuna.trial.TrialState
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(
            direction=self.rule.mode, pruner=self.pruner, sampler=optuna.samplers.RandomSampler(seed=0)
        )
        rungs = _halving_rungs(self.rule) if _settings(self.rule).pruner == "successive_halving" else None
        made = []
        for state, reports in peers:
            values = self._curve(reports)
            if not values or state not in ("succeeded", "pruned", "running", "waiting"):
                continue
            # successive halving compares values recorded at each rung (system attributes Optuna's pruner writes
            # as it judges): rebuilt here from each peer's curve, its value when it first reached the rung
            attrs = (
                {}
                if rungs is None
                else {
                    f"completed_rung_{k}": values[min(s for s in values if s >= step)]
                    for k, step in enumerate(rungs(max(values)))
                }
            )
            kind = {"succeeded": states.COMPLETE, "pruned": states.PRUNED}.get(state, states.RUNNING)
            made.append(
                optuna.trial.create_trial(
                    state=kind,
                    value=values[max(values)] if kind == states.COMPLETE else None,
                    intermediate_values=values,
                    system_attrs=attrs,
                )
            )
        study.add_trials(made)
        self._study, self._trial, self._reported = study, study.ask(), set()

    def judge(
        self,
        own: Sequence[Mapping[str, Any]],
        peers: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
        peers_key: Any = None,
    ) -> str:
        """'' or why this trial stops. ``peers_key``: changes whenever a peer's reports or state changed
        (None: rebuild every time)."""
        now = time.monotonic()
        if (
            self._study is None
            or peers_key is None
            or (peers_key != self._peers_key and now - self._built_at >= self.REBUILD_SECONDS)
        ):
            self._build(peers)
            self._peers_key, self._built_at = peers_key, now
        values = self._curve(own)
        if not values:
            return ""
        for step in sorted(values):
            if step not in self._reported:
                self._trial.report(values[step], step)
                self._reported.add(step)
        if not self._trial.should_prune():
            return ""
        step = max(values)
        return (
            f"Optuna's {type(self.pruner).__name__} at step {step}: {self.rule.metric} {values[step]:.6g} "
            f"({len(self._study.trials) - 1} other trials with reports)"
        )


class StudyJudge:
    """Optuna's pruner on the shared study of an asynchronous search (``<sweep>/search/optuna.journal``, the study
    named as the sweep): a trial's RUNNING study trial is the one labelled with its folder."""

    def __init__(self, rule: PruningRule, sweep_dir: str, final_step: int | None = None) -> None:
        """``final_step``: the budget in steps (None: the last step of the study's first COMPLETE trials)."""
        import optuna

        from airflow_provider_gpusched.core.sweep.records.journal import open_journal

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna, self.rule = optuna, rule
        journal = os.path.join(sweep_dir, "search", "optuna.journal")
        if not os.path.isfile(journal):
            raise InvalidArgumentError("pruning", rule.rule, f"the sweep's study in {journal} (it is missing)")
        self.pruner = make_optuna_pruner(rule)
        storage = open_journal(journal)
        self.study = optuna.load_study(study_name=os.path.basename(sweep_dir), storage=storage, pruner=self.pruner)
        self._trials: dict[str, Any] = {}  # trial folder -> its study trial (optuna.trial.Trial)
        self._final_step = final_step

    def final_step(self) -> int | None:
        """The budget in steps: the setting, else the last step of the study's COMPLETE trials (Optuna's
        ``max_resource='auto'`` takes it from the first one), once there is one."""
        if self._final_step is not None:
            return self._final_step
        # learned anew each time (it may grow: a longer trial completes after one that stopped early)
        complete = self.study.get_trials(deepcopy=False, states=(self.optuna.trial.TrialState.COMPLETE,))
        steps = [t.last_step for t in complete if t.last_step is not None]
        return max(steps) if steps else None

    def _study_trial(self, folder: str) -> Any:
        found = self._trials.get(folder)
        if found is None:
            running = self.optuna.trial.TrialState.RUNNING
            mine = [
                t
                for t in self.study.get_trials(deepcopy=False, states=(running,))
                if t.user_attrs.get("folder") == folder
            ]
            if not mine:
                return None
            latest = max(mine, key=lambda t: t.number)
            found = self._trials[folder] = self.optuna.trial.Trial(self.study, latest._trial_id)
        return found

    def judge(self, folder: str, own: Reports) -> str:
        trial = self._study_trial(folder)
        if trial is None:
            return ""
        heard = trial.storage.get_trial(trial._trial_id).intermediate_values
        values = {r["step"]: v for r in own if (v := _value(r, self.rule.judged_metric)) is not None}
        for step in sorted(values):
            if step not in heard:
                trial.report(values[step], step)
        if not values:
            return ""
        step, final = max(values), self.final_step()
        if (own and own[-1].get("final")) or (final is not None and step >= final):
            return ""  # it trained its whole budget: complete, ranked (Pruner.decide), whatever the rung says
        if not trial.should_prune():
            return ""
        return (
            f"Optuna's {type(self.pruner).__name__} in the sweep's study at step {step}: "
            f"{self.rule.judged_metric} {values[step]:.6g}"
        )


def judge_with_optuna(
    rule: PruningRule,
    own: Sequence[Mapping[str, Any]],
    peers: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
    pruner: Any = None,
) -> str:
    """Optuna's pruner on an in-memory study of the peers (state, reports) and this trial (RUNNING), built
    for this one judgement (:class:`OptunaJudge` keeps it between judgements)."""
    return OptunaJudge(rule, pruner).judge(own, peers)


def _halving_rungs(rule: PruningRule) -> Callable[[int], list[int]]:
    """Optuna's successive halving rungs: step ``min_resource * reduction_factor**(min_early_stopping_rate + k)``."""
    options = _settings(rule).options or {}
    first, factor = options["min_resource"], options.get("reduction_factor", 4)
    rate = options.get("min_early_stopping_rate", 0)

    def up_to(last_step: int) -> list[int]:
        out, k = [], 0
        while first * factor ** (rate + k) <= last_step:
            out.append(first * factor ** (rate + k))
            k += 1
        return out

    return up_to
