"""Search-space dimensions: ``choice``, ``uniform``, ``loguniform``, ``randint``, ``quniform``.

Each can be enumerated for a grid (``grid(steps)``: continuous ranges get ``steps`` evenly spaced points,
ends included — DI-toolkit's ``uniform(0.95, 1)`` with 5 steps is 0.95, 0.9625, 0.975, 0.9875, 1.0) and
sampled for random search (``sample(rng)``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_gpusched.core.checks import is_int, is_number
from airflow_provider_gpusched.core.errors import InvalidArgumentError


def _number(name: str, value: Any) -> float:
    if not is_number(value) or not math.isfinite(value):
        raise InvalidArgumentError(name, value, "a finite number")
    return float(value)


def _linspace(low: float, high: float, steps: int) -> list[float]:
    if steps == 1:
        return [low]
    return [low + (high - low) * i / (steps - 1) for i in range(steps)]


def _clean(x: float) -> float:
    """Grid points without float noise (``0.010000000000000004`` -> ``0.01``): 12 significant digits."""
    return float(f"{x:.12g}")


@dataclass(frozen=True)
class Choice:
    values: tuple[Any, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.values, (list, tuple)) or not self.values:
            raise InvalidArgumentError("choice", self.values, "a non-empty list of values")
        object.__setattr__(self, "values", tuple(self.values))

    def grid(self, steps: int | None = None) -> list[Any]:
        return list(self.values)

    def count(self, steps: int | None = None) -> int:
        return len(self.values)

    def sample(self, rng: random.Random) -> Any:
        return rng.choice(self.values)


@dataclass(frozen=True)
class Uniform:
    low: float
    high: float

    def __post_init__(self) -> None:
        low, high = _number("uniform.low", self.low), _number("uniform.high", self.high)
        if not low < high:
            raise InvalidArgumentError("uniform", (self.low, self.high), "low < high")

    def grid(self, steps: int | None = None) -> list[float]:
        return [_clean(x) for x in _linspace(self.low, self.high, _steps(steps, self))]

    def count(self, steps: int | None = None) -> int:
        return _steps(steps, self)

    def sample(self, rng: random.Random) -> float:
        return rng.uniform(self.low, self.high)


@dataclass(frozen=True)
class LogUniform:
    low: float
    high: float

    def __post_init__(self) -> None:
        low, high = _number("loguniform.low", self.low), _number("loguniform.high", self.high)
        if not 0 < low < high:
            raise InvalidArgumentError("loguniform", (self.low, self.high), "0 < low < high")

    def grid(self, steps: int | None = None) -> list[float]:
        return [_clean(math.exp(x)) for x in _linspace(math.log(self.low), math.log(self.high), _steps(steps, self))]

    def count(self, steps: int | None = None) -> int:
        return _steps(steps, self)

    def sample(self, rng: random.Random) -> float:
        return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))


@dataclass(frozen=True)
class RandInt:
    """Integers ``low <= x <= high`` (both ends included)."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not all(is_int(v) for v in (self.low, self.high)) or self.low > self.high:
            raise InvalidArgumentError("randint", (self.low, self.high), "integers low <= high")

    def grid(self, steps: int | None = None) -> list[int]:
        if steps is None or steps >= self.high - self.low + 1:
            return list(range(self.low, self.high + 1))
        return sorted({round(x) for x in _linspace(self.low, self.high, steps)})

    def count(self, steps: int | None = None) -> int:
        n = self.high - self.low + 1
        return n if steps is None else min(n, _steps(steps, self))

    def sample(self, rng: random.Random) -> int:
        return rng.randint(self.low, self.high)


@dataclass(frozen=True)
class QUniform:
    """``low..high`` in multiples of ``q`` (ends included when they are multiples)."""

    low: float
    high: float
    q: float

    def __post_init__(self) -> None:
        low, high, q = (_number(f"quniform.{n}", getattr(self, n)) for n in ("low", "high", "q"))
        if not low < high or q <= 0:
            raise InvalidArgumentError("quniform", (self.low, self.high, self.q), "low < high and q > 0")

    def _range(self) -> tuple[int, int]:
        return math.ceil(self.low / self.q - 1e-9), math.floor(self.high / self.q + 1e-9)

    def _points(self) -> list[float]:
        first, last = self._range()
        if last - first + 1 > MAX_POINTS:
            raise InvalidArgumentError(
                "quniform", (self.low, self.high, self.q), f"at most {MAX_POINTS:,} multiples of q between low and high"
            )
        return [_tidy(k * self.q) for k in range(first, last + 1)]

    def count(self, steps: int | None = None) -> int:
        first, last = self._range()
        n = max(0, last - first + 1)
        return n if steps is None else min(n, _steps(steps, self))

    def grid(self, steps: int | None = None) -> list[float]:
        points = self._points()
        if steps is None or steps >= len(points):
            return points
        return [points[round(i * (len(points) - 1) / (steps - 1))] for i in range(steps)] if steps > 1 else points[:1]

    def sample(self, rng: random.Random) -> float:
        first, last = self._range()
        return _tidy(rng.randint(first, last) * self.q)


def _tidy(x: float) -> float | int:
    r = round(x, 12)
    return int(r) if float(r).is_integer() else r


#: the most grid points one dimension may have (a grid of more is never what anyone meant)
MAX_POINTS = 10_000_000


def _steps(steps: int | None, space: Any) -> int:
    if steps is None:
        raise InvalidArgumentError("grid_steps", None, f"a number of grid points for the continuous {space!r}")
    if not is_int(steps) or not 1 <= steps <= MAX_POINTS:
        raise InvalidArgumentError("grid_steps", steps, f"an integer from 1 to {MAX_POINTS:,}")
    return steps


Space = Choice | Uniform | LogUniform | RandInt | QUniform


def choice(values: Sequence[Any]) -> Choice:
    return Choice(tuple(values))


def uniform(low: float, high: float) -> Uniform:
    return Uniform(low, high)


def loguniform(low: float, high: float) -> LogUniform:
    return LogUniform(low, high)


def randint(low: int, high: int) -> RandInt:
    return RandInt(low, high)


def quniform(low: float, high: float, q: float) -> QUniform:
    return QUniform(low, high, q)


@dataclass(frozen=True)
class Conditional:
    """A parameter that exists only when earlier parameters have given values:
    ``when({"optimizer": "sgd"}, uniform(0.8, 0.99))`` — ``momentum`` only for SGD trials. Condition values
    may be a single value or a list of allowed values. The dimension is a search space or a value list."""

    condition: tuple[Any, ...]  # ((key, (allowed, ...)), ...)
    dim: Any

    def holds(self, params: dict[str, Any]) -> bool:
        return all(key in params and params[key] in allowed for key, allowed in self.condition)

    @property
    def keys(self) -> list[str]:
        return [key for key, _ in self.condition]


def when(condition: dict[str, Any], dim: Any) -> Conditional:
    if not isinstance(condition, dict) or not condition:
        raise InvalidArgumentError("when", condition, "a mapping such as {'optimizer': 'sgd'}")
    if isinstance(dim, Conditional):
        raise InvalidArgumentError("when", dim, "a search space or a list of values (not another when)")
    normalised = tuple((str(k), tuple(v) if isinstance(v, (list, tuple)) else (v,)) for k, v in condition.items())
    return Conditional(normalised, dim)
