"""What every search in rounds shares: :class:`RoundSearch` (ask a round's trials, idempotently; tell their
scores), the trial key, and :func:`make_search` (the spec's kind makes the search)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.sweep.parts.expand import (
    flatten,
    trial_id,
)
from airflow_provider_gpusched.core.sweep.records.store import read_json, write_json

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
    from airflow_provider_gpusched.core.sweep.parts.expand import Trial
    from airflow_provider_gpusched.core.sweep.parts.objective import Objective
    from airflow_provider_gpusched.core.sweep.records.store import TrialStore


class RoundSearch:
    def __init__(self, spec: SweepSpec, state_dir: str) -> None:
        # the search kind gave an adaptive spec these (core/sweep/definition/search_kind.py); a spec that reached a search
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
        by_key = {trial_key(p["params"]): p for p in stored["proposals"]}
        new = 0
        for params, values, *pruned in outcomes:
            key = trial_key(params)
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


def trial_key(params: Mapping[str, Any]) -> str:
    return trial_id(dict(params))


def make_search(spec: SweepSpec, state_dir: str) -> RoundSearch:
    """The search that proposes ``spec``'s rounds: its kind decides (core/sweep/definition/search_kind.py)."""
    # a kind answers the interface (search_kind.SearchInRounds); the built-in ones answer a RoundSearch
    return cast(RoundSearch, spec.kind.round_search(spec, state_dir))


_key = trial_key  # its name before the split
