"""The settings records of the search types a spec carries (``evolution``, ``pbt``, ``hyperband``): plain records
with their own checks, below both the spec that holds them and the searches that read them (their public homes,
core/sweep/search_kinds.py, pbt.py and hyperband.py, re-export them)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.records import Settings, says

AtLeastOne = Annotated[int, says("an integer >= 1", ge=1)]
AtLeastZero = Annotated[int, says("an integer >= 0", ge=0)]


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
    #: builds from the candidate (core/sweep/model_cost.py), a ModelCost or ``{build, input_shape, units}``
    evaluator: Any = None

    def check(self, where: str) -> None:
        _EVOLUTION.check(self, where)  # each setting's type and bounds (their annotations)
        if self.evaluator is not None:
            from airflow_provider_gpusched.core.sweep.model_cost import ModelCost

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


Fraction = Annotated[float, says("a fraction above 0 and at most 0.5", gt=0, le=0.5)]


@dataclass
class PBTSettings:
    """The settings of ``search: pbt`` (Ray Tune's ``PopulationBasedTraining`` names and defaults)."""

    population: Annotated[int, says("a whole number >= 2", ge=2)] = 4
    #: reported steps per generation (Ray Tune's ``perturbation_interval``, in ``time_attr`` units)
    perturbation_interval: Annotated[int, says("a whole number of steps >= 1", ge=1)] = 2
    #: each member's budget in reported steps (the last generation may be shorter)
    steps: Annotated[int, says("a whole number of steps >= 1", ge=1)] = 10
    #: the trial parameter that says up to which step a trial trains (the digits example's ``epochs``)
    step_param: Annotated[str, says("a parameter name", min_length=1)] = "epochs"
    quantile_fraction: Fraction = 0.25
    resample_probability: Annotated[float, says("a probability between 0 and 1", ge=0, le=1)] = 0.25
    perturbation_factors: Annotated[
        list[Annotated[float, says("a positive number", gt=0)]], says("a list of positive factors such as [1.2, 0.8]")
    ] = field(default_factory=lambda: [1.2, 0.8])

    def check(self, where: str) -> None:
        _PBT.check(self, where)
        if not self.perturbation_factors:
            raise InvalidArgumentError(
                f"{where}.perturbation_factors", [], "a list of positive factors such as [1.2, 0.8]"
            )
        if self.perturbation_interval > self.steps:
            raise InvalidArgumentError(
                f"{where}.perturbation_interval",
                self.perturbation_interval,
                f"at most steps ({self.steps}): a perturbation interval longer than the budget never perturbs",
            )

    @property
    def generations(self) -> int:
        return math.ceil(self.steps / self.perturbation_interval)

    def step_of(self, generation: int) -> int:
        """The step generation ``generation`` trains up to."""
        return min(self.steps, (generation + 1) * self.perturbation_interval)


_PBT = Settings(PBTSettings)


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
