"""NAS evolution (``search: evolution``; seed 000's ``EvolutionModelSearcher``): its settings, its kind and its
search. — NAS evolution as in seed 000's ``EvolutionModelSearcher``: a pool of
  candidate architectures (one choice per position), the top-k kept over all rounds, the next pool made by
  mutation (each position re-drawn with ``mutate_prob``) and crossover (each position from one of two
  parents), filled up at random; candidates that break a constraint (e.g. ``flops <= 600`` computed by a
  user function) are never proposed, nor are candidates already evaluated. In a small space (up to 100,000
  candidates) the pool is filled from what is left when random draws keep repeating; once every feasible
  candidate has been evaluated a round proposes nothing and the search ends (the best stays the best)."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.records import Settings, says
from airflow_provider_gpusched.core.sweep.definition.search_kind import (
    AtLeastOne,
    AtLeastZero,
    SearchKind,
    objective_needed,
)
from airflow_provider_gpusched.core.sweep.parts import spaces
from airflow_provider_gpusched.core.sweep.parts.expand import (
    check_space,
    finite_space_size,
    flatten,
    nested,
)
from airflow_provider_gpusched.core.sweep.parts.objective import crowding_distances, pareto_fronts
from airflow_provider_gpusched.core.sweep.records.store import read_json, write_json
from airflow_provider_gpusched.core.sweep.searches.rounds import RoundSearch, trial_key

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec


@dataclass
class EvolutionSettings:
    """Seed 000's ``EvolutionModelSearcher`` fields: the settings of ``search: evolution``."""

    candidate_pool_size: AtLeastOne = 10
    candidate_top_k: AtLeastOne = 3
    num_mutation: AtLeastZero = 5
    num_crossover: AtLeastZero = 5
    mutate_prob: Annotated[float, says("a probability between 0 and 1", ge=0, le=1)] = 0.1
    max_epoch: AtLeastOne = 5
    constraints: Annotated[
        dict[Any, Annotated[float, says("a number (an upper bound)")]], says("a mapping such as {flops: 600}")
    ] = field(default_factory=dict)
    measure: Callable[[dict[str, Any]], Mapping[str, float]] | None = None
    #: the built-in measure (pavi's ``evaluator``): the FLOPs and parameters of the model that a user function
    #: builds from the candidate (core/sweep/searches/model_cost.py), a ModelCost or ``{build, input_shape, units}``
    evaluator: Any = None

    def check(self, where: str) -> None:
        _EVOLUTION.check(self, where)  # each setting's type and bounds (their annotations)
        if self.evaluator is not None:
            from airflow_provider_gpusched.core.sweep.searches.model_cost import ModelCost

            if isinstance(self.evaluator, Mapping):
                self.evaluator = ModelCost.from_mapping(self.evaluator, f"{where}.evaluator")
            if not isinstance(self.evaluator, ModelCost):
                raise InvalidArgumentError(
                    f"{where}.evaluator",
                    self.evaluator,
                    "a ModelCost or {build: 'package.module:function', input_shape: [...]}",
                )
            self.evaluator.check(f"{where}.evaluator")
            if self.measure is not None and self.measure is not self.evaluator:
                raise InvalidArgumentError(
                    f"{where}.evaluator",
                    self.evaluator,
                    "either evaluator or measure, not both (both say how to measure)",
                )
            self.measure = self.evaluator
        if self.candidate_top_k > self.candidate_pool_size:
            raise InvalidArgumentError(
                f"{where}.candidate_top_k",
                self.candidate_top_k,
                f"at most candidate_pool_size ({self.candidate_pool_size})",
            )
        if self.constraints and self.measure is None:
            raise InvalidArgumentError(
                f"{where}.measure",
                None,
                "a function params -> {constraint name: value} (or an evaluator) when constraints are given",
            )
        if self.measure is not None and not callable(self.measure):
            raise InvalidArgumentError(f"{where}.measure", self.measure, "a callable")


_EVOLUTION = Settings(EvolutionSettings)


class EvolutionKind(SearchKind["SweepSpec"]):
    """pavi's NAS evolution: a pool of candidates mutated and crossed over each round (``evolution`` settings);
    ``rounds`` and ``per_round`` come from ``max_epoch`` and ``candidate_pool_size``."""

    settings_key = "evolution"
    settings_class = EvolutionSettings
    settings_expected = "a mapping of evolution settings"
    #: a spec of another type may carry them (they were always only type-checked there)
    settings_only_with_kind = False

    def settings_schema(self) -> dict[str, Any] | None:
        """Its settings' schema: the functions (``measure``, ``evaluator``) are named as ``package.module:name``."""
        import dataclasses
        import typing

        from pydantic import TypeAdapter

        hints = typing.get_type_hints(EvolutionSettings, include_extras=True)
        fields = {
            f.name: {k: v for k, v in TypeAdapter(hints[f.name]).json_schema().items() if k != "title"}
            for f in dataclasses.fields(EvolutionSettings)
            if f.name not in ("measure", "evaluator")  # functions: a file names them as package.module:name
        }
        from airflow_provider_gpusched.core.sweep.definition.schema import TARGET

        return {"type": "object", "properties": {**fields, "measure": TARGET}, "additionalProperties": False}

    name = "evolution"
    in_rounds = True

    def check(self, spec: SweepSpec) -> None:
        check_space(spec.space, f"{spec.where}: space", spec.global_config)
        objective_needed(spec, "a score to optimise")
        self.parse_settings(spec)
        for key, dim in flatten(spec.space).items():
            if not isinstance(dim, (list, tuple, spaces.Choice)):
                raise InvalidArgumentError(
                    f"{spec.where}: space.{key}",
                    dim,
                    "a list of choices (evolution searches over discrete choices per position)",
                )
        if spec.asynchronous:
            raise InvalidArgumentError(
                f"{spec.where}: asynchronous",
                True,
                "false for search: evolution (each generation is bred from the scores of the last: it runs in "
                "rounds; use search: optuna for an asynchronous search)",
            )
        spec.rounds = spec.evolution.max_epoch
        spec.per_round = spec.evolution.candidate_pool_size

    def round_search(self, spec: SweepSpec, state_dir: str) -> RoundSearch:
        from airflow_provider_gpusched.core.sweep.searches.evolution import EvolutionSearch

        return EvolutionSearch(spec, state_dir)


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
        seen = {trial_key(h["params"]) for h in self.history()}
        out: list[dict[str, Any]] = []

        def add(make: Callable[[], dict[str, Any]], origin: str) -> bool:
            for _ in range(100):
                params = {**self.fixed, **make()}
                key = trial_key(params)
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
                key = trial_key(params)
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
