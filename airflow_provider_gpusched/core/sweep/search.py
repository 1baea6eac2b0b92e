"""Searches that run in rounds: ask a batch of trials, evaluate them, tell the scores, repeat.

* :class:`OptunaSearch` — Optuna's TPE (or random) sampler; the study lives in a journal file under the
  sweep's folder, so a re-run of the DAG resumes it instead of starting over (``pip install
  airflow-provider-gpusched[optuna]``). A study begun anew (its journal moved aside or lost) beside trials of the
  sweep that ended is first rebuilt from their records (:meth:`OptunaSearch.rebuild`): the sampler learns from
  them, they count towards the trials asked for, and those that succeeded or were pruned do not run again.
* :class:`EvolutionSearch` — NAS evolution as in seed 000's ``EvolutionModelSearcher``: a pool of
  candidate architectures (one choice per position), the top-k kept over all rounds, the next pool made by
  mutation (each position re-drawn with ``mutate_prob``) and crossover (each position from one of two
  parents), filled up at random; candidates that break a constraint (e.g. ``flops <= 600`` computed by a
  user function) are never proposed, nor are candidates already evaluated. In a small space (up to 100,000
  candidates) the pool is filled from what is left when random draws keep repeating; once every feasible
  candidate has been evaluated a round proposes nothing and the search ends (the best stays the best).

With several metrics Optuna runs a multi-objective study (TPE, or NSGA-II with ``sampler: nsga2``) unless
the objective has weights (then it optimises the weighted sum), and evolution keeps its top-k by Pareto
front and, within the last front that fits, by crowding distance (NSGA-II's selection).

``ask(round)`` is idempotent: a round's proposals are stored, so asking again (a retried task, a
re-run DAG) gives the same trials. ``tell(round, ...)`` ignores trials already told.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from airflow_provider_gpusched.core.checks import is_finite_number, is_json_number
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.sweep import spaces
from airflow_provider_gpusched.core.sweep.expand import (
    DEFAULT_LABELS,
    finite_space_size,
    flatten,
    make_trial,
    nested,
    trial_id,
)
from airflow_provider_gpusched.core.sweep.objective import crowding_distances, pareto_fronts
from airflow_provider_gpusched.core.sweep.reports import REPORTS_FILE, read_reports
from airflow_provider_gpusched.core.sweep.store import FINAL_STATES, read_json, write_json
from airflow_provider_gpusched.core.text import printable

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.expand import Trial
    from airflow_provider_gpusched.core.sweep.kind_settings import EvolutionSettings
    from airflow_provider_gpusched.core.sweep.objective import Objective
    from airflow_provider_gpusched.core.sweep.spec import SweepSpec
    from airflow_provider_gpusched.core.sweep.store import TrialStore


class RoundSearch:
    def __init__(self, spec: SweepSpec, state_dir: str) -> None:
        # the search kind gave an adaptive spec these (core/sweep/search_kinds.py); a spec that reached a search
        # without them is a bug here, said as one
        if spec.objective is None or spec.per_round is None:
            raise GpuschedError(f"sweep {spec.name}: search {spec.search!r} needs an objective and per_round")
        self.spec = spec
        self.objective: Objective = spec.objective
        self.per_round: int = spec.per_round
        self.state_dir = state_dir
        self.fixed = flatten(spec.global_config)
        self.space = flatten(spec.space)
        os.makedirs(state_dir, exist_ok=True)

    def _round_path(self, round_no: int) -> str:
        return os.path.join(self.state_dir, f"round-{round_no:03d}.json")

    def ask(self, round_no: int) -> list[dict[str, Any]]:
        """This round's trial parameters (flat, with the fixed values), the same on every call."""
        stored = read_json(self._round_path(round_no))
        if isinstance(stored, dict) and "proposals" in stored:
            return [p["params"] for p in stored["proposals"]]
        proposals = self._propose(round_no)
        write_json(self._round_path(round_no), {"round": round_no, "proposals": proposals, "told": []})
        return [p["params"] for p in proposals]

    def tell(self, round_no: int, outcomes: Sequence[tuple[Any, ...]]) -> int:
        """Record each trial's outcome: ``(params, values)`` with its metric values in the objective's order
        (None = failed or no score), or ``(params, None, curve)`` for a pruned trial with its reports of the
        pruning metric as ``[(step, value), ...]``. Returns how many were new."""
        stored = read_json(self._round_path(round_no))
        if not isinstance(stored, dict) or "proposals" not in stored:
            raise GpuschedError(f"round {round_no} was never asked ({self._round_path(round_no)} is missing)")
        told = set(stored.get("told", []))
        by_key = {_key(p["params"]): p for p in stored["proposals"]}
        new = 0
        for params, values, *pruned in outcomes:
            key = _key(params)
            if key in told or key not in by_key:
                continue
            self._record(
                by_key[key], dict(params), None if values is None else tuple(values), pruned[0] if pruned else None
            )
            told.add(key)
            new += 1
        stored["told"] = sorted(told)
        write_json(self._round_path(round_no), stored)
        return new

    def tell_trials(self, round_no: int, outcomes: Sequence[tuple[Any, ...]]) -> int:
        """:meth:`tell`, given each trial: ``(trial, values)`` or ``(trial, None, curve)``. A search whose trials
        are not told apart by their parameters alone (PBT's members) finds them by trial id."""
        return self.tell(round_no, [(trial.params, *rest) for trial, *rest in outcomes])

    def ask_proposals(self, round_no: int) -> list[dict[str, Any]]:
        """This round's stored proposals, each as :meth:`_propose` made it (``params`` and what the search noted)."""
        stored = read_json(self._round_path(round_no))
        proposals = stored.get("proposals", []) if isinstance(stored, dict) else []
        return [p for p in proposals if isinstance(p, dict)]

    def identities(self, round_no: int) -> list[str | None]:
        """What, besides its parameters, tells this round's trials apart (PBT's member): ``identity`` of each
        stored proposal, None for most searches."""
        return [p.get("identity") for p in self.ask_proposals(round_no)]

    def prepare_trials(self, round_no: int, trials: Sequence[Trial], store: TrialStore) -> None:
        """Called with a round's trials when it is planned (PBT copies the checkpoints they start from)."""

    # subclasses
    def _propose(self, round_no: int) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _record(
        self,
        proposal: dict[str, Any],
        params: dict[str, Any],
        values: tuple[float, ...] | None,
        pruned: Sequence[tuple[int, float]] | None = None,
    ) -> None:
        raise NotImplementedError

    def _score(self, values: Sequence[float]) -> float:
        """The objective's score (a single metric, or the weighted sum) of a trial's metric values."""
        score = self.objective.score(dict(zip(self.objective.metrics, values, strict=True)))
        if score is None:  # the values told are the objective's own, checked finite (Objective.values)
            raise GpuschedError(f"sweep {self.spec.name}: no score from the metric values {list(values)}")
        return score


def _key(params: Mapping[str, Any]) -> str:
    return trial_id(dict(params))


_log = logging.getLogger(__name__)

#: spaces of up to this many candidates are enumerated once random draws keep finding evaluated ones
ENUMERATE_UP_TO = 100_000


class EvolutionSearch(RoundSearch):
    def __init__(self, spec: SweepSpec, state_dir: str) -> None:
        super().__init__(spec, state_dir)
        if spec.evolution is None:
            raise GpuschedError(f"sweep {spec.name}: search 'evolution' needs its settings (evolution)")
        self.settings: EvolutionSettings = spec.evolution
        self.choices = {k: list(v.values if isinstance(v, spaces.Choice) else v) for k, v in self.space.items()}
        self.history_path = os.path.join(state_dir, "evolution.json")

    def history(self) -> list[dict[str, Any]]:
        data = read_json(self.history_path)
        return data.get("evaluated", []) if isinstance(data, dict) else []

    def top_k(self) -> list[dict[str, Any]]:
        """The parents: the best ``candidate_top_k`` evaluated so far, by score; with several metrics and no
        weights, by Pareto front, the last front that does not fit whole taken by crowding distance."""
        k = self.settings.candidate_top_k
        objective = self.objective
        if objective.several and not objective.weights:
            scored = [
                h
                for h in self.history()
                if isinstance(h.get("values"), list) and len(h["values"]) == len(objective.metrics)
            ]
            chosen: list[dict[str, Any]] = []
            for front in pareto_fronts([h["values"] for h in scored], objective.modes, enough=k):
                members = [scored[i] for i in front]
                if len(chosen) + len(members) > k:
                    distance = crowding_distances([h["values"] for h in members])
                    order = sorted(range(len(members)), key=lambda i: -distance[i])
                    members = [members[i] for i in order[: k - len(chosen)]]
                chosen.extend(members)
            return chosen
        scored = [h for h in self.history() if h.get("score") is not None]
        scored.sort(key=lambda h: objective.sort_key(h["score"]))
        return scored[:k]

    def feasible(self, params: Mapping[str, Any]) -> bool:
        constraints = self.settings.constraints
        if not constraints:
            return True
        measure = self.settings.measure
        if measure is None:
            raise GpuschedError(f"evolution: constraints {sorted(constraints)} need a measure")
        measured = measure(nested(params)) or {}
        for key, limit in constraints.items():
            if key not in measured:
                raise GpuschedError(
                    f"evolution.measure returned no {key!r} (it returned {sorted(measured)}); "
                    f"constraints name {sorted(constraints)}"
                )
            if measured[key] > limit:
                return False
        return True

    def _propose(self, round_no: int) -> list[dict[str, Any]]:
        s = self.settings
        rng = random.Random(f"{self.spec.seed}:{round_no}")
        seen = {_key(h["params"]) for h in self.history()}
        out: list[dict[str, Any]] = []

        def add(make: Callable[[], dict[str, Any]], origin: str) -> bool:
            for _ in range(100):
                params = {**self.fixed, **make()}
                key = _key(params)
                if key not in seen and self.feasible(params):
                    seen.add(key)
                    out.append({"params": params, "origin": origin})
                    return True
            return False

        def random_candidate() -> dict[str, Any]:
            return {k: rng.choice(v) for k, v in self.choices.items()}

        top = [h["params"] for h in self.top_k()] if round_no > 0 else []
        if top:
            budget = s.candidate_pool_size
            for _ in range(min(s.num_mutation, budget)):
                add(
                    lambda: {
                        k: rng.choice(self.choices[k]) if rng.random() < s.mutate_prob else p[k]
                        for p in [rng.choice(top)]
                        for k in self.choices
                    },
                    "mutation",
                )
            for _ in range(min(s.num_crossover, budget - len(out))):
                add(
                    lambda: {
                        k: rng.choice((a[k], b[k]))
                        for a, b in [(rng.choice(top), rng.choice(top))]
                        for k in self.choices
                    },
                    "crossover",
                )
        while len(out) < s.candidate_pool_size:
            if not add(random_candidate, "random"):
                break
        if len(out) < s.candidate_pool_size and self.space_size() <= ENUMERATE_UP_TO:
            # random draws keep hitting candidates already evaluated: in a small space, take what is left
            import itertools

            rest = [
                dict(zip(self.choices, values, strict=True)) for values in itertools.product(*self.choices.values())
            ]
            rng.shuffle(rest)
            for candidate in rest:
                if len(out) >= s.candidate_pool_size:
                    break
                params = {**self.fixed, **candidate}
                key = _key(params)
                if key not in seen and self.feasible(params):
                    seen.add(key)
                    out.append({"params": params, "origin": "remaining"})
        if not out:
            if self.space_size() > ENUMERATE_UP_TO:
                raise GpuschedError(
                    "evolution: none of 100 random draws gave a candidate not yet evaluated that "
                    f"satisfies the constraints {dict(s.constraints)}"
                )
            if not self.history():
                raise GpuschedError(
                    f"evolution: none of the {self.space_size():,} candidates of the space "
                    f"satisfies the constraints {dict(s.constraints)}"
                )
            return []  # every feasible candidate has been evaluated: the search is complete
        return out

    def space_size(self) -> int:
        return finite_space_size(self.space) or 0  # evolution spaces are lists of choices: always finite

    def _record(
        self,
        proposal: dict[str, Any],
        params: dict[str, Any],
        values: tuple[float, ...] | None,
        pruned: Sequence[tuple[int, float]] | None = None,
    ) -> None:
        data = read_json(self.history_path)
        data = data if isinstance(data, dict) else {"evaluated": []}
        data["evaluated"].append(
            {
                "params": params,
                "score": None if values is None else self._score(values),
                "values": None if values is None else list(values),
                "origin": proposal.get("origin"),
            }
        )
        write_json(self.history_path, data)


#: the Optuna study's file in a sweep's ``search/`` folder
JOURNAL_FILE = "optuna.journal"


def open_journal(path: str) -> Any:
    """Optuna's ``JournalStorage`` on the journal ``path``. A journal Optuna cannot replay (a line that is not JSON
    or not one of its records, other than a last line cut by a crash, which Optuna leaves out) is refused with a
    :class:`GpuschedError` that names the file, the line and what to do; never Optuna's raw error."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    try:
        return JournalStorage(JournalFileBackend(path))
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as exc:
        raise GpuschedError(bad_journal(path, exc)) from None


def bad_journal(path: str, exc: BaseException) -> str:
    """What to say of a journal Optuna could not read: the file, its first line that is not a record, and the
    way forward."""
    where = ""
    try:
        with open(path, "rb") as fh:
            for number, line in enumerate(fh, 1):
                try:
                    ok = line.endswith(b"\n") and isinstance(json.loads(line), dict)
                except (ValueError, RecursionError):
                    ok = False
                if not ok:
                    where = f" (line {number})"
                    break
    except OSError:
        pass
    why = str(exc)[:200] or type(exc).__name__
    return (
        f"{path}: the Optuna study of the sweep cannot be read{where}: {why}. To go on, move it aside "
        f"(mv {path} {path}.bad) and run the sweep again: the search rebuilds the study from the records of the "
        "trials that ended (their folders under trials/), so the sampler learns from them, they count towards the "
        "trials asked for, and those that succeeded or were pruned do not run again; the log says how many it "
        "rebuilt and names any whose records cannot be read"
    )


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
    from airflow_provider_gpusched.core.sweep.store import TrialStore

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
            _key({**self.fixed, **t.params})
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
            key = _key(params)
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
        elif _key(params) not in self._evaluated():
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


def make_search(spec: SweepSpec, state_dir: str) -> RoundSearch:
    """The search that proposes ``spec``'s rounds: its kind decides (core/sweep/search_kinds.py)."""
    # a kind answers the interface (search_kind.SearchInRounds); the built-in ones answer a RoundSearch
    return cast(RoundSearch, spec.kind.round_search(spec, state_dir))
