"""What the dense search (solver.py) and the integer program (milp.py) share: the answer of an exact check and
the part of the cost model the integer program reads. Both import it, so neither imports the other's types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass
class CheckResult:
    """``stages`` [(type index, first, last)] when a schedule within x was found; ``proven_infeasible`` when
    the solver proved that none exists; neither when it ran out of time."""

    stages: list[tuple[int, int, int]] | None
    proven_infeasible: bool


class StageModel(Protocol):
    """The stage and link costs the integer program needs (solver.py's ``_Model``)."""

    @property
    def L(self) -> int:
        """Layers."""

    @property
    def T(self) -> int:
        """Device types with at least one host."""

    @property
    def counts(self) -> list[int]:
        """Hosts per type."""

    @property
    def comm(self) -> list[list[list[float]]]:
        """``comm[j-1][a][b]``: seconds to send layer j's output from a host of type a to one of type b."""

    def _end_bits(self, x: float) -> list[list[int]]:
        """``bits[k][s]``: bit r set for each last layer r of a stage from layer s+1 on type k within x."""
        ...


__all__ = ["CheckResult", "StageModel"]
