"""Optuna (``search: optuna``): its kind, the search in rounds (:class:`OptunaSearch`, TPE or another sampler on a
study in the sweep's journal, rebuilt from the trial records when the journal was lost) and the asynchronous one
(:class:`AsyncOptunaSearch`, asked one trial at a time by the workers of core/sweep/running/asynchronous.py).
With several metrics Optuna runs a multi-objective study (TPE, or NSGA-II with ``sampler: nsga2``) unless the
objective has weights (then it optimises the weighted sum)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

from airflow_provider_gpusched.core.checks import is_finite_number, is_json_number
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.sweep.definition.search_kind import SearchKind, objective_needed
from airflow_provider_gpusched.core.sweep.parts import spaces
from airflow_provider_gpusched.core.sweep.parts.expand import (
    DEFAULT_LABELS,
    Trial,
    check_space,
    finite_space_size,
    flatten,
    make_trial,
)
from airflow_provider_gpusched.core.sweep.records.journal import JOURNAL_FILE, open_journal
from airflow_provider_gpusched.core.sweep.records.reports import REPORTS_FILE, read_reports
from airflow_provider_gpusched.core.sweep.records.store import FINAL_STATES, read_json
from airflow_provider_gpusched.core.sweep.searches.rounds import RoundSearch, trial_key
from airflow_provider_gpusched.core.text import printable

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
    from airflow_provider_gpusched.core.sweep.records.store import TrialStore


class OptunaKind(SearchKind["SweepSpec"]):
    """Optuna's samplers (TPE, GP, CMA-ES, random, NSGA-II) on one study in the sweep folder: asked for
    ``per_round`` trials per round (DI-toolkit's HPO), or, with ``asynchronous: true``, by a pool of workers that
    each ask for the next trial the moment its slot frees (core/sweep/running/asynchronous.py)."""

    name = "optuna"
    in_rounds = True
    SAMPLERS: ClassVar[tuple[str, ...]] = ("tpe", "gp", "cmaes", "random", "nsga2")
    #: samplers that optimise one value (several metrics need weights, or tpe/nsga2/random/gp)
    SINGLE_OBJECTIVE: ClassVar[tuple[str, ...]] = ("cmaes",)
    DEFAULT_ROUNDS: ClassVar[int] = 3
    DEFAULT_PER_ROUND: ClassVar[int] = 4

    def check(self, spec: SweepSpec) -> None:
        check_space(spec.space, f"{spec.where}: space", spec.global_config)
        objective_needed(spec, "a metric to optimise")
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
        from airflow_provider_gpusched.core.sweep.searches.optuna import OptunaSearch

        return OptunaSearch(spec, state_dir)


_log = logging.getLogger(__name__)

#: the study trials' user attributes that name their gpusched trial: an asynchronous search sets them as it hands a
#: trial out, a rebuild from the records (:meth:`OptunaSearch.rebuild`) as it adds one
TRIAL_ATTRS = ("trial_id", "index", "folder", "run")
#: the user attribute that marks a study trial added from its trial's records, not told by the run that ran it
REBUILT_ATTR = "rebuilt_from_records"


def report_curve(folder: str, metric: str | None) -> list[tuple[int, float]]:
    """A trial's reports of ``metric`` (its ``reports.jsonl`` in ``folder``), as (step, value)."""
    if not metric:
        return []
    found, _ = read_reports(os.path.join(folder, REPORTS_FILE), folder)
    return [(r["step"], float(r["metrics"][metric])) for r in found if is_json_number(r["metrics"].get(metric))]


def _store_beside(state_dir: str, sweep: str) -> TrialStore | None:
    """The trial store of the sweep whose search folder is ``state_dir`` (``<root>/<sweep>/search``), when that
    sweep has a trials folder; else None."""
    from airflow_provider_gpusched.core.sweep.records.store import TrialStore

    sweep_dir = os.path.dirname(os.path.abspath(state_dir))
    if os.path.basename(sweep_dir) != sweep or not os.path.isdir(os.path.join(sweep_dir, "trials")):
        return None
    return TrialStore(os.path.dirname(sweep_dir), sweep)


class OptunaSearch(RoundSearch):
    def __init__(self, spec: SweepSpec, state_dir: str, pruner: Any = None, store: TrialStore | None = None) -> None:
        """``pruner``: the study's Optuna pruner (an asynchronous search judges its trials in the study itself;
        TPE then samples within Hyperband's brackets, which is BOHB). ``store``: the sweep's trials, which a study
        holding no trials is rebuilt from (:meth:`rebuild`); by default the store of the sweep folder that
        ``state_dir`` is the ``search`` folder of. The caller holds what keeps another process from opening the study
        at the same time (an asynchronous search's lock; a search in rounds is asked by its plan alone)."""
        super().__init__(spec, state_dir)
        try:
            import optuna
        except ImportError:
            raise GpuschedError(
                "search: optuna needs Optuna: pip install 'airflow-provider-gpusched[optuna]'"
            ) from None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        storage = self.storage = open_journal(os.path.join(state_dir, JOURNAL_FILE))
        objective = self.objective
        #: several metrics without weights: a multi-objective study; else one value (the metric, or the weighted sum)
        self.multi = objective.several and not objective.weights
        modes = objective.modes if self.multi else ("maximize" if objective.maximize else "minimize",)
        directions = cast("list[Literal['minimize', 'maximize']]", list(modes))  # Objective checked each mode
        try:
            self.study = optuna.create_study(
                study_name=spec.name,
                storage=storage,
                sampler=self._sampler(0),
                pruner=pruner,
                load_if_exists=True,
                directions=directions,
            )
        except ValueError as exc:  # the journal holds a study with other directions
            raise GpuschedError(
                f"sweep {spec.name}: the Optuna study in {state_dir} does not match the objective "
                f"({objective.describe()}): {exc}; use a new sweep name or delete the folder"
            ) from None
        if list(self.study.directions) != [getattr(optuna.study.StudyDirection, d.upper()) for d in directions]:
            raise GpuschedError(
                f"sweep {spec.name}: the Optuna study in {state_dir} was made for other directions "
                f"({[d.name.lower() for d in self.study.directions]}) than the objective "
                f"({objective.describe()}); use a new sweep name or delete the folder"
            )
        if not self.study.get_trials(deepcopy=False):
            store = store or _store_beside(state_dir, spec.name)
            if store is not None:
                self.rebuild(store)

    def _sampler(self, round_no: int) -> Any:
        """A sampler seeded for this round (from the sweep's seed): a round's proposals depend on the
        history and the seed only, not on whether earlier rounds were asked in this process."""
        seed = None if self.spec.seed is None else self.spec.seed * 1_000_003 + round_no
        samplers, sampler = self.optuna.samplers, self.spec.sampler
        import warnings

        with warnings.catch_warnings():  # Optuna marks constant_liar and GPSampler experimental
            warnings.simplefilter("ignore", self.optuna.exceptions.ExperimentalWarning)
            if sampler == "nsga2":
                return samplers.NSGAIISampler(seed=seed, population_size=max(2, self.per_round))
            if sampler == "tpe":
                # constant liar: the trials asked before and still running count as bad, so the trials that run
                # at once (a round, or an asynchronous search's workers) do not pile onto one point
                return samplers.TPESampler(seed=seed, n_startup_trials=self.per_round, constant_liar=True)
            if sampler == "gp":
                return samplers.GPSampler(seed=seed, n_startup_trials=self.per_round)
            if sampler == "cmaes":
                # categorical parameters are drawn at random (CMA-ES searches continuous ones)
                return samplers.CmaEsSampler(
                    seed=seed, n_startup_trials=self.per_round, warn_independent_sampling=False
                )
        return self.optuna.samplers.RandomSampler(seed=seed)

    def _walk(self, value: Callable[[str, Any], Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The space in order: each searched parameter that applies (a conditional one when its condition holds on
        the values before it) takes ``value(key, its Optuna distribution)``; a fixed value stays. Returns the
        parameters (with the fixed values) and the searched ones' distributions."""
        dists = self.optuna.distributions
        params = dict(self.fixed)
        distributions: dict[str, Any] = {}
        for key, dim in self.space.items():
            if isinstance(dim, spaces.Conditional):
                if not dim.holds(params):
                    continue
                dim = dim.dim
            if isinstance(dim, (list, tuple)):
                dim = spaces.Choice(tuple(dim))
            if isinstance(dim, spaces.Choice):
                distribution: Any = dists.CategoricalDistribution(list(dim.values))
            elif isinstance(dim, spaces.Uniform):
                distribution = dists.FloatDistribution(dim.low, dim.high)
            elif isinstance(dim, spaces.LogUniform):
                distribution = dists.FloatDistribution(dim.low, dim.high, log=True)
            elif isinstance(dim, spaces.RandInt):
                distribution = dists.IntDistribution(dim.low, dim.high)
            elif isinstance(dim, spaces.QUniform):
                distribution = dists.FloatDistribution(dim.low, dim.high, step=dim.q)
            else:
                params[key] = dim
                continue
            distributions[key] = distribution
            params[key] = value(key, distribution)
        return params, distributions

    def _suggest(self, trial: Any) -> dict[str, Any]:
        dists = self.optuna.distributions

        def suggest(key: str, distribution: Any) -> Any:
            if isinstance(distribution, dists.CategoricalDistribution):
                return trial.suggest_categorical(key, list(distribution.choices))
            if isinstance(distribution, dists.IntDistribution):
                return trial.suggest_int(key, distribution.low, distribution.high)
            return trial.suggest_float(
                key, distribution.low, distribution.high, step=distribution.step, log=distribution.log
            )

        return self._walk(suggest)[0]

    def _evaluated(self) -> set[str]:
        """The points (params keys) of the study's finished trials, repeats told as such left out."""
        states = self.optuna.trial.TrialState
        return {
            trial_key({**self.fixed, **t.params})
            for t in self.study.get_trials(deepcopy=False, states=(states.COMPLETE, states.FAIL, states.PRUNED))
            if "duplicate" not in t.user_attrs
        }

    def _propose(self, round_no: int) -> list[dict[str, Any]]:
        """``per_round`` distinct points not evaluated before. A repeat is not left running in the study (the
        constant liar would count it for good): it is told as pruned with a ``duplicate`` mark, which TPE
        takes as a poor result there and moves away from, and the sampler is asked again (at most 10 asks
        per trial wanted). A finite space may run out: then the round has fewer trials, or none."""
        self.study.sampler = self._sampler(round_no)
        evaluated = self._evaluated()
        size = finite_space_size(self.space)
        out: list[dict[str, Any]] = []
        taken: set[str] = set()
        for _ in range(10 * self.per_round):
            if len(out) == self.per_round or (size is not None and len(evaluated | taken) >= size):
                break
            trial = self.study.ask()
            trial.set_user_attr("round", round_no)
            params = self._suggest(trial)
            key = trial_key(params)
            if key in evaluated or key in taken:
                trial.set_user_attr("duplicate", True)
                self.study.tell(trial.number, state=self.optuna.trial.TrialState.PRUNED)
            else:
                taken.add(key)
                out.append({"params": params, "number": trial.number})
        return out

    def tell(self, round_no: int, outcomes: Sequence[tuple[Mapping[str, Any], float | None]]) -> int:
        running = self.optuna.trial.TrialState.RUNNING
        self._running = {t.number for t in self.study.get_trials(deepcopy=False, states=(running,))}
        self._round_no = round_no
        return super().tell(round_no, outcomes)

    def _record(
        self,
        proposal: dict[str, Any],
        params: dict[str, Any],
        values: tuple[float, ...] | None,
        pruned: Sequence[tuple[int, float]] | None = None,
    ) -> None:
        if proposal["number"] in self._running:
            self._running.discard(proposal["number"])
            self.tell_number(proposal["number"], values, pruned)
        elif trial_key(params) not in self._evaluated():
            # a proposal of a study since moved aside (its number is that study's), which ended after this one was
            # rebuilt from the records: added as it ended. (Told already, by a retried task: nothing to add. A point
            # of the space as it was, which the spec has changed since: one the study cannot hold.)
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self.study.add_trial(self._finished(params, values, pruned, {"round": self._round_no}))

    def tell_number(
        self, number: int, values: tuple[float, ...] | None, pruned: Sequence[tuple[int, float]] | None = None
    ) -> None:
        """Tell study trial ``number`` (RUNNING) how it ended: its metric values, or None (failed; pruned when its
        curve of the pruning metric, ``pruned``, is given: reported first, the steps the study has not heard)."""
        if pruned and self._curve_in_study():
            # a pruned trial's curve as intermediate values (TPE ranks a pruned trial by its last one); an
            # asynchronous search's finished trial's too, the steps its judge had not reported yet
            trial_id = self.storage.get_trial_id_from_study_id_trial_number(
                self.storage.get_study_id_from_name(self.spec.name), number
            )
            heard = self.storage.get_trial(trial_id).intermediate_values
            trial = self.optuna.trial.Trial(self.study, trial_id)
            for step, value in pruned:
                if step not in heard:
                    trial.report(value, step)
        state, told = self._outcome(values, pruned)
        self.study.tell(number, told, state=state)

    def _curve_in_study(self) -> bool:
        """Whether a trial's curve is in the study's terms: its metric (the pruning rule's, or the objective's) is
        the study's one objective."""
        objective = self.objective
        return not objective.several and self.spec.report_metric == objective.metric

    def _outcome(
        self, values: tuple[float, ...] | None, pruned: Sequence[tuple[int, float]] | None
    ) -> tuple[Any, float | list[float] | None]:
        """The study's state and value(s) of a trial that ended with metric ``values`` (None: failed; pruned when
        its curve ``pruned`` is given)."""
        states = self.optuna.trial.TrialState
        if values is None:
            return (states.PRUNED if pruned is not None else states.FAIL), None
        return states.COMPLETE, list(values) if self.multi else self._score(values)

    def _finished(
        self,
        params: Mapping[str, Any],
        values: tuple[float, ...] | None,
        curve: Sequence[tuple[int, float]] | None,
        attrs: Mapping[str, Any],
    ) -> Any:
        """A finished study trial (``optuna.trial.FrozenTrial``) to add for a trial that ended as :meth:`tell_number`
        is told, with the distributions the search asks its parameters with. ``ValueError`` when ``params`` is not a
        point of the space."""
        flat = {**self.fixed, **params}
        walked, distributions = self._walk(lambda key, _: flat[key])  # (KeyError: a parameter it lacks)
        if walked != flat:
            raise ValueError(f"the parameters {sorted(flat)} are not a point of the space {sorted(walked)}")
        state, told = self._outcome(values, curve)
        return self.optuna.trial.create_trial(
            state=state,
            **({"values": told} if isinstance(told, list) else {"value": told}),
            params={key: flat[key] for key in distributions},
            distributions=distributions,
            intermediate_values=dict(curve) if curve and self._curve_in_study() else None,
            user_attrs={**attrs, REBUILT_ATTR: True},
        )

    def rebuild(self, store: TrialStore) -> int:
        """Add to the study (which holds no trials) every trial of the sweep that ended (succeeded, pruned, failed,
        invalid, timed out), from its records in ``store`` (``status.json``, ``params.json``, the result and the
        reports of the judged metric), as the run that ran it told it; with the user attributes an asynchronous search
        labels its trials with (:data:`TRIAL_ATTRS`, indexed in the order they started) and :data:`REBUILT_ATTR`.
        A folder whose trial is not one of this sweep as specified now (other parameters, space, code version or
        labels) is left out; one whose records cannot be read is left out and named. Says in the log how many trials
        it rebuilt; returns that number."""
        trials_dir = store.path("trials")
        try:
            names = sorted(os.listdir(trials_dir))
        except OSError:
            return 0
        varying, labels = self.spec.varying(), self.spec.label_format or DEFAULT_LABELS
        # (a stopped trial has no outcome: it is left out, and a new trial takes its place)
        ended = [state for state in FINAL_STATES if state != "stopped"]
        found: list[tuple[float, str, Trial, dict[str, Any]]] = []
        unreadable: list[str] = []
        for name in names:
            folder = os.path.join(trials_dir, name)
            if os.path.islink(folder) or not os.path.isdir(folder):
                continue
            status = read_json(os.path.join(folder, "status.json"))
            if status is None:
                continue  # never begun
            if not isinstance(status, dict) or "_unreadable" in status:
                unreadable.append(f"{printable(name)} (status.json: {_why(status)})")
                continue
            if status.get("state") not in ended:
                continue
            params = read_json(os.path.join(folder, "params.json"))
            if not isinstance(params, dict) or "_unreadable" in params:
                unreadable.append(f"{printable(name)} (params.json: {_why(params)})")
                continue
            try:
                trial = make_trial(flatten(params), varying, self.spec.code_version, 0, labels)
            except GpuschedError as exc:
                unreadable.append(f"{printable(name)} (params.json: {printable(str(exc))[:300]})")
                continue
            if trial.folder == name and status.get("trial_id") == trial.trial_id:  # else another spec's trial
                started = status.get("started", status.get("ended"))
                found.append((float(started) if is_finite_number(started) else 0.0, name, trial, status))
        added: list[Any] = []
        for _, name, trial, status in sorted(found, key=lambda f: (f[0], f[1])):
            values = curve = None
            if status["state"] == "succeeded":
                try:
                    result = store.result(trial)
                except (GpuschedError, OSError) as exc:
                    result = {"_unreadable": str(exc)}
                if isinstance(result, dict) and "_unreadable" in result:
                    unreadable.append(f"{name} (its result: {_why(result)})")
                    continue
                values = self.objective.values(result)
            if status["state"] == "pruned" or values is not None:
                curve = report_curve(store.trial_dir(trial), self.spec.report_metric)
            run = status.get("run") if isinstance(status.get("run"), str) else ""
            attrs = dict(zip(TRIAL_ATTRS, (trial.trial_id, len(added), name, run), strict=True))
            try:
                added.append(self._finished(trial.params, values, curve, attrs))
            except (ValueError, KeyError, TypeError):
                continue  # a point outside the space as it is now
        self.study.add_trials(added)
        if added or unreadable:
            states = self.optuna.trial.TrialState
            counted = {state: sum(1 for t in added if t.state == state) for state in states}
            _log.warning(
                "sweep %s: its Optuna study (%s) held no trials: rebuilt %d trial(s) from their records in %s "
                "(%d complete, %d pruned, %d failed): the sampler learns from them, they count towards the trials "
                "asked for, and those that succeeded or were pruned do not run again%s",
                self.spec.name,
                os.path.join(self.state_dir, JOURNAL_FILE),
                len(added),
                trials_dir,
                counted[states.COMPLETE],
                counted[states.PRUNED],
                counted[states.FAIL],
                f"; left out, their records cannot be read: {'; '.join(unreadable[:20])}"
                + (f" and {len(unreadable) - 20} more" if len(unreadable) > 20 else "")
                if unreadable
                else "",
            )
        return len(added)


def _why(record: Any) -> str:
    """Why a record read with :func:`read_json` (or a trial's result) is not one."""
    if isinstance(record, dict) and "_unreadable" in record:
        return printable(str(record["_unreadable"]))[:300]
    return f"not a JSON object ({type(record).__name__})"


#: the file, next to a run's manifest, of the trials handed out in that run: trial id -> study trial number
HANDED_FILE = "handed.json"
#: a sampler is asked at most this many times per new trial before the search says the space is used up
ASKS_PER_TRIAL = 10
#: the spec a worker in another process or on another host asks with (``search/spec.pkl``, private to the user:
#: written by the plan, read only by a worker, core/sweep/running/worker.py), its callables left out (a worker runs the
#: trials through the manifest's target)
SPEC_FILE = "spec.pkl"


class AsyncOptunaSearch(OptunaSearch):
    """The shared study, asked one trial at a time (the caller holds the search lock)."""

    def __init__(self, spec: SweepSpec, state_dir: str, store: TrialStore | None = None) -> None:
        pruner = None
        if spec.pruning is not None and spec.pruning.rule == "optuna":
            from airflow_provider_gpusched.core.sweep.pruning_rules.optuna import make_optuna_pruner

            pruner = make_optuna_pruner(spec.pruning)
        super().__init__(spec, state_dir, pruner=pruner, store=store)

    def known(self) -> dict[str, Any]:
        """trial id -> its latest study trial (FrozenTrial), for every gpusched trial the study asked for."""
        out: dict[str, Any] = {}
        for t in self.study.get_trials(deepcopy=False):
            tid = t.user_attrs.get("trial_id")
            if not isinstance(tid, str) or t.user_attrs.get("duplicate"):
                continue
            if tid not in out or t.number > out[tid].number:
                out[tid] = t
        return out

    def ask_new(self, evaluated: set[str]) -> tuple[dict[str, Any], int] | None:
        """A new point (params with the fixed values, study trial number) not among ``evaluated`` (params keys);
        None when the sampler keeps proposing points already tried (a finite space used up). A repeat is told as
        pruned with a ``duplicate`` mark, as in rounds."""
        size = finite_space_size(self.space)
        for _ in range(ASKS_PER_TRIAL):
            if size is not None and len(evaluated) >= size:
                return None
            # a sampler seeded from the sweep's seed and the study's size: a worker in another process (or a run
            # after a killed one) asks as this one would, never repeating what an equal sampler proposed before;
            # which trials come first depends on which slot frees first, so the search is reproducible given the
            # order of its asks
            self.study.sampler = self._sampler(len(self.study.get_trials(deepcopy=False)))
            trial = self.study.ask()
            params = self._suggest(trial)
            if trial_key(params) in evaluated:
                trial.set_user_attr("duplicate", True)
                self.study.tell(trial.number, state=self.optuna.trial.TrialState.PRUNED)
                continue
            return params, trial.number
        return None

    def ask_again(self, earlier: Any) -> int:
        """A new RUNNING study trial with the parameters of ``earlier`` (a trial run again: the study's record of
        the earlier run stays as it ended)."""
        self.study.enqueue_trial(dict(earlier.params), skip_if_exists=False)
        trial = self.study.ask()
        self._suggest(trial)  # the enqueued values: the same distributions, the same parameters
        return int(trial.number)

    def label(self, number: int, trial: Trial, run: str | None) -> None:
        trial_id = self._storage_id(number)
        for key, value in zip(TRIAL_ATTRS, (trial.trial_id, trial.index, trial.folder, run or ""), strict=True):
            self.storage.set_trial_user_attr(trial_id, key, value)

    def state_of(self, number: int) -> Any:
        return self.storage.get_trial(self._storage_id(number)).state

    def _storage_id(self, number: int) -> int:
        return int(
            self.storage.get_trial_id_from_study_id_trial_number(
                self.storage.get_study_id_from_name(self.spec.name), number
            )
        )
