"""The interface of a search type (core/sweep/search_kinds.py has the built-in ones and the registry, which also
reads the entry-point group ``airflow_provider_gpusched.search_kinds``).

A kind is told the whole spec once its shared fields are valid; it checks the settings only it reads, fills their
defaults, and answers what the spec means for its type. A one-shot kind (``in_rounds = False``) implements
``trials``; a round kind implements ``round_search`` (core/sweep/search.py's ``RoundSearch``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.sweep.expand import Trial, flatten

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.search import RoundSearch
    from airflow_provider_gpusched.core.sweep.spec import SweepSpec


class SearchKind:
    """What one search type owns. Subclasses set ``name``; round kinds set ``in_rounds`` and implement
    ``round_search``; one-shot kinds implement ``trials``."""

    name: ClassVar[str]
    in_rounds: ClassVar[bool] = False
    #: the spec key an error names when one stage has more than ``max_trials`` trials
    size_key: ClassVar[str] = "per_round"
    #: whether a trial's checkpoints must be in its own folder (``checkpoint/``), whatever runs it: the search
    #: hands them on to later trials (PBT)
    hands_on_checkpoints: ClassVar[bool] = False

    def check(self, spec: SweepSpec) -> None:
        """Validate the settings this kind reads and fill its defaults (may set ``spec.rounds`` and
        ``spec.per_round``); raise InvalidArgumentError naming the key."""

    def varying(self, spec: SweepSpec) -> list[str]:
        """The parameters that differ between trials."""
        return list(flatten(spec.space))

    def stage_size(self, spec: SweepSpec) -> int:
        """Trials one stage maps over, known without expanding anything (a round kind's ``check`` sets
        ``per_round``)."""
        if spec.per_round is None:
            raise GpuschedError(
                f"{spec.where}: search {spec.search!r}: per_round is not set (the kind's check did not run)"
            )
        return spec.per_round

    def round_sizes(self, spec: SweepSpec, space_size: int | None) -> list[int]:
        """How many trials each round of a round kind has at most (``gpusched sweep preview``): ``per_round`` each,
        capped by what a finite space of ``space_size`` points still holds (no round proposes a point already
        evaluated)."""
        out, left, per_round = [], space_size, spec.per_round or 0
        for _ in range(spec.rounds or 0):
            n = per_round if left is None else min(per_round, left)
            out.append(n)
            left = None if left is None else left - n
        return out

    def trials(self, spec: SweepSpec) -> list[Trial]:
        raise InvalidArgumentError(
            f"{spec.where}: search",
            spec.search,
            "'grid' or 'random' here; optuna and evolution sweeps make trials round by round",
        )

    def round_search(self, spec: SweepSpec, state_dir: str) -> RoundSearch:
        raise GpuschedError(f"search {spec.search!r} does not run in rounds")
