"""Hyperband (``search: hyperband``; Li et al., 2018, as Ray Tune's ``HyperBandScheduler`` runs it): synchronous
brackets of successive halving, the budget in reported steps.

With ``max_t`` steps at most, ``min_t`` at least and ``reduction_factor`` eta, there are ``s_max + 1`` brackets,
``s_max = floor(log_eta(max_t / min_t))``. Bracket ``s`` starts ``n = ceil((s_max + 1) / (s + 1) * eta**s)``
configurations (drawn at random from ``space``) at ``max_t * eta**-s`` steps; after each rung the best ``1/eta`` of
them (by the objective: each trial's result) go on with ``eta`` times the steps, up to ``max_t``. The brackets hedge:
the first stops poor configurations after a few steps, the last trains a few to the end.

Rung ``k`` of every bracket runs in round ``k`` of the sweep (the brackets run side by side), so the sweep has
``s_max + 1`` rounds. A configuration that goes on starts from the checkpoint its last trial left (copied into the new
trial's checkpoint folder, as population-based training hands them on: core/sweep/searches/pbt.py), so it trains only the
steps it adds. The brackets and rungs (each trial's configuration, steps, score and whether it went on) are
``search/hyperband.json``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.records import Settings, says
from airflow_provider_gpusched.core.sweep.definition.search_kind import SearchKind
from airflow_provider_gpusched.core.sweep.parts.expand import check_space, flatten, sample_params
from airflow_provider_gpusched.core.sweep.records.store import read_json, write_json
from airflow_provider_gpusched.core.sweep.searches.handover import hand_over
from airflow_provider_gpusched.core.sweep.searches.rounds import RoundSearch

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
    from airflow_provider_gpusched.core.sweep.parts.expand import Trial
    from airflow_provider_gpusched.core.sweep.records.store import TrialStore


@dataclass
class HyperbandSettings:
    """The settings of ``search: hyperband`` (Ray Tune's ``HyperBandScheduler`` names; Optuna's ``HyperbandPruner``
    calls them ``max_resource``, ``min_resource`` and ``reduction_factor``)."""

    #: the most steps a configuration trains (Ray Tune's ``max_t``)
    max_t: Annotated[int, says("a whole number of steps >= 1", ge=1)] = 81
    #: the fewest steps a configuration trains before it may be stopped (Optuna's ``min_resource``)
    min_t: Annotated[int, says("a whole number of steps >= 1", ge=1)] = 1
    reduction_factor: Annotated[int, says("a whole number >= 2", ge=2)] = 3
    #: the trial parameter that says up to which step a trial trains (the digits example's ``epochs``)
    step_param: Annotated[str, says("a parameter name", min_length=1)] = "epochs"

    def check(self, where: str) -> None:
        _HYPERBAND.check(self, where)
        if self.min_t > self.max_t:
            raise InvalidArgumentError(f"{where}.min_t", self.min_t, f"at most max_t ({self.max_t})")

    @property
    def s_max(self) -> int:
        eta, ratio = self.reduction_factor, self.max_t / self.min_t
        s = 0
        while eta ** (s + 1) <= ratio * (1 + 1e-9):
            s += 1
        return s

    def bracket(self, s: int) -> list[tuple[int, int]]:
        """Bracket ``s``'s rungs: (configurations, steps) of each, first to last."""
        eta = self.reduction_factor
        n = math.ceil((self.s_max + 1) / (s + 1) * eta**s)
        rungs = []
        for i in range(s + 1):
            steps = min(self.max_t, max(self.min_t, round(self.max_t * eta ** (i - s))))
            rungs.append((max(1, n // eta**i), steps))
        return rungs

    def brackets(self) -> dict[int, list[tuple[int, int]]]:
        return {s: self.bracket(s) for s in range(self.s_max, -1, -1)}


_HYPERBAND = Settings(HyperbandSettings)


BRACKETS_FILE = "hyperband.json"


class HyperbandKind(SearchKind["SweepSpec"]):
    """Synchronous Hyperband (see the module's docstring)."""

    settings_key = "hyperband"
    settings_class = HyperbandSettings
    settings_expected = "a mapping such as {max_t: 27, reduction_factor: 3}"

    name = "hyperband"
    in_rounds = True
    size_key = "hyperband.max_t"
    hands_on_checkpoints = True

    def check(self, spec: SweepSpec) -> None:
        where = spec.where
        check_space(spec.space, f"{where}: space", spec.global_config)
        if spec.objective is None:
            raise InvalidArgumentError(f"{where}: objective", None, "a metric to rank each rung by (search: hyperband)")
        if spec.objective.several and not spec.objective.weights:
            raise InvalidArgumentError(
                f"{where}: objective", spec.objective.describe(), "one metric, or weights (a rung ranks one score)"
            )
        for key, why in (("asynchronous", "its rungs wait for each other"), ("pruning", "its rungs stop trials")):
            if getattr(spec, key):
                raise InvalidArgumentError(
                    f"{where}: {key}", getattr(spec, key), f"none with search: hyperband ({why})"
                )
        raw = self.parse_settings(spec)
        flat = flatten(spec.space)
        if raw.step_param in flat:
            raise InvalidArgumentError(
                f"{where}: hyperband.step_param",
                raw.step_param,
                f"a parameter Hyperband sets itself (up to which step a trial trains), not one of {sorted(flat)}",
            )
        if not flat:
            raise InvalidArgumentError(
                f"{where}: space", {}, "the hyper-parameters Hyperband draws (search: hyperband)"
            )
        brackets = raw.brackets()
        spec.rounds = raw.s_max + 1
        spec.per_round = sum(rungs[0][0] for rungs in brackets.values())

    def round_sizes(self, spec: SweepSpec, space_size: int | None) -> list[int]:
        """Rung ``k`` of every bracket that has one (a configuration that goes on is a trial again)."""
        settings = spec.hyperband if isinstance(spec.hyperband, HyperbandSettings) else HyperbandSettings()
        rungs = settings.brackets().values()
        return [sum(r[k][0] for r in rungs if len(r) > k) for k in range(settings.s_max + 1)]

    def varying(self, spec: SweepSpec) -> list[str]:
        settings = spec.hyperband if isinstance(spec.hyperband, HyperbandSettings) else HyperbandSettings()
        return [*flatten(spec.space), settings.step_param]

    def round_search(self, spec: SweepSpec, state_dir: str) -> RoundSearch:
        return HyperbandSearch(spec, state_dir)


class HyperbandSearch(RoundSearch):
    """The brackets' rungs, one round per rung."""

    def __init__(self, spec: SweepSpec, state_dir: str) -> None:
        super().__init__(spec, state_dir)
        if not isinstance(spec.hyperband, HyperbandSettings):
            raise GpuschedError(f"sweep {spec.name}: search 'hyperband' needs its settings (hyperband)")
        self.settings: HyperbandSettings = spec.hyperband
        self.path = f"{state_dir}/{BRACKETS_FILE}"

    def record(self) -> dict[str, Any]:
        """``{"brackets": {s: [[entry per configuration] per rung]}}``: each entry its configuration, steps, trial,
        score, and whether it went on."""
        data = read_json(self.path)
        return data if isinstance(data, dict) and isinstance(data.get("brackets"), dict) else {"brackets": {}}

    def _propose(self, round_no: int) -> list[dict[str, Any]]:
        data = self.record()
        out = []
        for s, rungs in self.settings.brackets().items():
            if round_no >= len(rungs):
                continue
            count, steps = rungs[round_no]
            kept = data["brackets"].setdefault(str(s), [])
            chosen: list[dict[str, Any]]
            if round_no == 0:
                rng = random.Random(f"{self.spec.seed}:hyperband:{s}")
                chosen = [
                    {"config": j, "hyper": sample_params(self.space, rng, {}), "from": None} for j in range(count)
                ]
            else:
                before = kept[round_no - 1]
                ranked = sorted(before, key=self._rank_key)[:count]
                for entry in before:
                    entry["went_on"] = entry in ranked
                chosen = [{"config": e["config"], "hyper": e["hyper"], "from": e["folder"]} for e in ranked]
            kept[round_no:] = [[{**c, "steps": steps, "score": None, "trial_id": None} for c in chosen]]
            for c in chosen:
                out.append(
                    {
                        "params": {**self.fixed, **c["hyper"], self.settings.step_param: steps},
                        "bracket": s,
                        "config": c["config"],
                        "from": c["from"],
                        # two brackets may draw equal values: their trials stay apart
                        "identity": f"hyperband bracket {s} config {c['config']}",
                    }
                )
        write_json(self.path, data)
        return out

    def _rank_key(self, entry: Mapping[str, Any]) -> tuple[int, float, int]:
        score = entry.get("score")
        return (1, 0.0, entry["config"]) if score is None else (0, self.objective.sort_key(score), entry["config"])

    def prepare_trials(self, round_no: int, trials: Sequence[Trial], store: TrialStore) -> None:
        """Note each trial in its rung; a configuration that goes on starts from its last trial's checkpoint."""
        proposals = self.ask_proposals(round_no)
        data = self.record()
        for trial, proposal in zip(trials, proposals, strict=False):
            rung = data["brackets"][str(proposal["bracket"])][round_no]
            entry = next(e for e in rung if e["config"] == proposal["config"])
            entry["trial_id"], entry["folder"] = trial.trial_id, store.trial_dir(trial)
            if proposal["from"] is not None:
                hand_over(
                    proposal["from"],
                    store.trial_dir(trial),
                    {"bracket": proposal["bracket"], "config": proposal["config"], "rung": round_no - 1},
                    f"sweep {self.spec.name}: Hyperband bracket {proposal['bracket']} configuration "
                    f"{proposal['config']} at rung {round_no - 1}",
                )
        write_json(self.path, data)

    def tell_trials(self, round_no: int, outcomes: Sequence[tuple[Any, ...]]) -> int:
        """Each trial's score in its rung, found by its trial id (two brackets may run equal values)."""
        data = self.record()
        entries = {
            e["trial_id"]: e for rungs in data["brackets"].values() if len(rungs) > round_no for e in rungs[round_no]
        }
        new = 0
        for trial, values, *_ in outcomes:
            entry = entries.get(trial.trial_id)
            if entry is None or entry.get("told"):
                continue
            entry["score"] = None if values is None else self._score(values)
            entry["told"] = True
            new += 1
        write_json(self.path, data)
        return new
