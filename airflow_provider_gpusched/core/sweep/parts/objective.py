"""What a sweep optimises, and the leaderboard.

A trial's result is what it wrote to ``result.json`` in its folder (or DI-toolkit's ``result.pkl``), or what
its Python callable returned (a dict, or a bare number). The objective names a metric in it — a key, a
dotted path such as ``eval.accuracy``, or DI-toolkit's ``R['eval']['accuracy']`` — and whether to
``maximize`` or ``minimize`` it (``Objective.parse("maximize R['eval_value']")`` reads DI-toolkit's text).

Several metrics (``Objective(["accuracy", "latency_ms"], ["maximize", "minimize"])``, or the text
``"maximize accuracy, minimize latency_ms"``) are ranked by Pareto front (:func:`pareto_fronts`), or by a
weighted sum where ``weights`` are given.
"""

from __future__ import annotations

import importlib.util
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_gpusched.core.checks import is_finite_number, is_number
from airflow_provider_gpusched.core.errors import InvalidArgumentError, brief_repr
from airflow_provider_gpusched.core.text import format_table

MODES = ("maximize", "minimize")


@dataclass(frozen=True)
class Objective:
    """One metric and its direction, or several (``metric`` and ``mode`` as lists of equal length).

    With several metrics the leaderboard ranks by Pareto front (front 1: no other trial is at least as good
    in every metric and better in one), then by the first metric within a front. ``weights`` (one per
    metric, >= 0) add a scalarisation: the weighted sum of the metrics, each signed by its direction
    (``maximize`` counts up, ``minimize`` counts down), is then the score the leaderboard ranks by and the
    best trial is the one with the highest sum; the front is still shown.
    """

    metric: str | Sequence[str]
    mode: str | Sequence[str] = "maximize"
    weights: Sequence[float] | None = None

    def __post_init__(self) -> None:
        several = not isinstance(self.metric, str)
        metrics = list(self.metric) if several and isinstance(self.metric, Sequence) else [self.metric]
        if several and (not isinstance(self.metric, Sequence) or len(metrics) < 2):
            raise InvalidArgumentError(
                "objective.metric",
                self.metric,
                "the name of a metric in the trial result, or a list of two or more names",
            )
        modes = (
            [self.mode] * len(metrics)
            if isinstance(self.mode, str)
            else list(self.mode)
            if isinstance(self.mode, Sequence)
            else [self.mode]
        )
        if len(modes) != len(metrics):
            raise InvalidArgumentError("objective.mode", self.mode, f"one mode per metric ({len(metrics)})")
        for i, name in enumerate(metrics):
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError("objective.metric", name, "the name of a metric in the trial result")
            if name.lstrip().startswith("R["):  # DI-toolkit's R['eval_value'] / R['eval']['value']
                metrics[i] = _r_path(name)
        for mode in modes:
            if mode not in MODES:
                raise InvalidArgumentError("objective.mode", mode, "'maximize' or 'minimize'")
        if len(set(metrics)) != len(metrics):
            raise InvalidArgumentError("objective.metric", self.metric, "distinct metric names")
        weights: Any = self.weights  # a list, or {metric: weight} (made a list here); checked below
        if weights is not None:
            if not several:
                raise InvalidArgumentError("objective.weights", weights, "weights only with several metrics")
            if isinstance(weights, Mapping):  # {metric: weight}
                unknown = [k for k in weights if k not in metrics]
                if unknown:
                    raise InvalidArgumentError(
                        f"objective.weights.{unknown[0]}",
                        weights[unknown[0]],
                        f"a weight for one of the metrics {metrics}",
                    )
                weights = [weights.get(m, 0.0) for m in metrics]
            if (
                isinstance(weights, str)
                or not isinstance(weights, Sequence)
                or len(weights) != len(metrics)
                or not all(is_finite_number(w) and w >= 0 for w in weights)
                or not any(weights)
            ):
                raise InvalidArgumentError(
                    "objective.weights",
                    self.weights,
                    f"{len(metrics)} numbers >= 0, not all 0 (one per metric, in order)",
                )
            object.__setattr__(self, "weights", tuple(float(w) for w in weights))
        object.__setattr__(self, "metric", tuple(metrics) if several else metrics[0])
        object.__setattr__(self, "mode", tuple(modes) if several else modes[0])

    @classmethod
    def parse(cls, text: Any, where: str = "objective") -> Objective:
        """DI-toolkit's form as text: ``maximize R['eval_value']``, ``minimize loss``; several metrics
        separated by commas: ``maximize accuracy, minimize latency_ms``."""
        items = [part.strip().split(None, 1) for part in text.split(",")] if isinstance(text, str) else [[]]
        if not all(len(parts) == 2 and parts[0] in MODES for parts in items):
            raise InvalidArgumentError(
                where,
                text,
                "'maximize METRIC' or 'minimize METRIC' (METRIC: a key, a dotted "
                "path, or R['key']), several separated by commas, or a mapping "
                "{metric: ..., mode: ...}",
            )
        try:
            if len(items) == 1:
                return cls(items[0][1].strip(), items[0][0])
            return cls([parts[1].strip() for parts in items], [parts[0] for parts in items])
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(where, text, exc.expected) from None

    # -- the metrics -----------------------------------------------------------------------------------
    @property
    def metrics(self) -> tuple[str, ...]:
        return self.metric if isinstance(self.metric, tuple) else (self.metric,)

    @property
    def modes(self) -> tuple[str, ...]:
        return self.mode if isinstance(self.mode, tuple) else (self.mode,)

    @property
    def several(self) -> bool:
        return isinstance(self.metric, tuple)

    @property
    def primary(self) -> Objective:
        """The first metric alone: what a single-metric rule (pruning) judges by unless told otherwise."""
        return Objective(self.metrics[0], self.modes[0])

    # -- the score: what the leaderboard ranks by ------------------------------------------------------
    @property
    def maximize(self) -> bool:
        """Whether a higher :meth:`score` is better."""
        return True if self.weights else self.modes[0] == "maximize"

    @property
    def score_label(self) -> str:
        """What :meth:`score` is, for headings."""
        if self.weights:
            return (
                "weighted sum ("
                + " ".join(
                    f"{'+' if mode == 'maximize' else '-'}{w:g}*{m}"
                    for m, mode, w in zip(self.metrics, self.modes, self.weights, strict=True)
                )
                + ")"
            )
        return self.metrics[0]

    def values(self, result: Any) -> tuple[float, ...] | None:
        """Each metric's value in ``result``, or None when one is missing or not a finite number."""
        out = []
        for metric in self.metrics:
            value = result
            if isinstance(result, Mapping):
                value = result.get(metric) if metric in result else _dig(result, metric)
            elif self.several:
                return None
            if not is_finite_number(value):
                return None
            out.append(float(value))
        return tuple(out)

    def score(self, result: Any) -> float | None:
        """The number the leaderboard ranks by: the metric's value; with several metrics the weighted sum
        (with weights) or the first metric (ranked within its Pareto front). None when a metric is missing
        or not a finite number."""
        values = self.values(result)
        if values is None:
            return None
        if self.weights:
            return sum(
                w * (v if mode == "maximize" else -v)
                for v, mode, w in zip(values, self.modes, self.weights, strict=True)
            )
        return values[0]

    def problem(self, result: Any) -> str:
        """'' when :meth:`values` finds a finite number for every metric in ``result``, else what is wrong
        (for the trial's status)."""
        for metric in self.metrics:
            if not isinstance(result, Mapping):
                if is_number(result) and not self.several:
                    return "" if is_finite_number(result) else f"{metric} = {brief_repr(result)} is not a finite number"
                return f"the result is {type(result).__name__}, not a JSON object with {metric!r}"
            value = result.get(metric) if metric in result else _dig(result, metric)
            if value is None and metric not in result:
                keys = ", ".join(sorted(map(str, result))[:10]) or "none"
                return f"the result has no {metric!r} (its keys: {keys})"
            if not is_number(value):
                return f"{metric} = {brief_repr(value)} is not a number"
            if not is_finite_number(value):
                return f"{metric} = {brief_repr(value)} is not a finite number"
        return ""

    def better(self, a: float, b: float) -> bool:
        return a > b if self.maximize else a < b

    def sort_key(self, score: float) -> float:
        return -score if self.maximize else score

    def to_dict(self) -> dict[str, Any]:
        if not self.several:
            return {"metric": self.metric, "mode": self.mode}
        out: dict[str, Any] = {"metric": list(self.metric), "mode": list(self.mode)}
        if self.weights:
            out["weights"] = list(self.weights)
        return out

    def describe(self) -> str:
        return ", ".join(f"{mode} {metric}" for metric, mode in zip(self.metrics, self.modes, strict=True))


def pareto_fronts(
    points: Sequence[Sequence[float]], modes: Sequence[str], enough: int | None = None
) -> list[list[int]]:
    """Non-dominated sorting: the indices of ``points`` by front (front 0 first), each front in input order.
    ``enough``: stop once the fronts found hold at least that many points (a leaderboard needs its top only).

    Points sorted best-first on every metric in turn can only be dominated by points before them, so a front
    grows and never has to drop a member: with two metrics each front is peeled in one pass (O(n) after one
    sort), with more in O(n * |front| * m) (numpy checks a point against the whole front at once)."""
    signs = [1.0 if mode == "maximize" else -1.0 for mode in modes]
    oriented = [tuple(s * v for s, v in zip(signs, p, strict=True)) for p in points]
    left = sorted(range(len(points)), key=lambda i: tuple(-v for v in oriented[i]))
    fronts: list[list[int]] = []
    found = 0
    two = len(signs) == 2
    while left and (enough is None or found < enough):
        front: list[int] = []
        rest: list[int] = []
        if two:
            # two metrics, best first on the first: a point is dominated exactly when an earlier one is better
            # on the second, or as good on it with a better first metric: one pass, O(n) per front
            best_b = first_a = -math.inf
            for i in left:
                a, b = oriented[i]
                if b < best_b or (b == best_b and first_a > a):
                    rest.append(i)
                else:
                    front.append(i)
                    if b > best_b:
                        best_b, first_a = b, a
            fronts.append(sorted(front))
            found += len(front)
            left = rest
            continue
        _peel(oriented, left, front, rest)
        fronts.append(sorted(front))
        found += len(front)
        left = rest
    return fronts


#: a front of three or more metrics larger than this is checked with numpy (a point against the whole front
#: in one array operation); smaller ones in plain Python, which is faster there
NUMPY_FRONT = 64
#: NumPy is not a dependency of the package (the partition extra brings it; so do Optuna and PyTorch)
_HAS_NUMPY = importlib.util.find_spec("numpy") is not None


def _peel(oriented: Sequence[tuple[float, ...]], left: Sequence[int], front: list[int], rest: list[int]) -> None:
    """One front of three or more metrics: ``left`` (sorted best-first) split into ``front`` and ``rest``."""
    members: Any = None  # numpy is imported once the front is large
    count = 0
    for i in left:
        p = oriented[i]
        if members is None:
            dominated = any(
                all(a >= b for a, b in zip(oriented[j], p, strict=True)) and oriented[j] != p for j in front
            )
        else:
            import numpy as np

            found, q = members[:count], np.asarray(p)
            dominated = bool(np.any(np.all(found >= q, axis=1) & np.any(found > q, axis=1)))
        if dominated:
            rest.append(i)
            continue
        front.append(i)
        if members is not None:
            members[count] = p
            count += 1
        elif len(front) > NUMPY_FRONT and _HAS_NUMPY:  # (without NumPy, plain Python all the way)
            import numpy as np

            members = np.empty((len(left), len(p)))
            members[: len(front)] = [oriented[j] for j in front]
            count = len(front)


def crowding_distances(points: Sequence[Sequence[float]]) -> list[float]:
    """NSGA-II's crowding distance of each point within its front: the ends of every metric are infinite,
    the others the sum over metrics of the normalised gap between their neighbours."""
    n = len(points)
    if n <= 2:
        return [math.inf] * n
    out = [0.0] * n
    for m in range(len(points[0])):
        order = sorted(range(n), key=lambda i: points[i][m])
        low, high = points[order[0]][m], points[order[-1]][m]
        out[order[0]] = out[order[-1]] = math.inf
        if high == low:
            continue
        for k in range(1, n - 1):
            out[order[k]] += (points[order[k + 1]][m] - points[order[k - 1]][m]) / (high - low)
    return out


_R_KEY = re.compile(r"""\[\s*(?:'([^'\]]+)'|"([^"\]]+)")\s*\]""")


def _r_path(text: str) -> str:
    """``R['eval']['value']`` -> ``eval.value``."""
    rest = text.strip()[1:]
    keys = []
    while rest:
        match = _R_KEY.match(rest)
        if not match:
            raise InvalidArgumentError("objective.metric", text, "R['key'] or R['key']['inner'] (DI-toolkit's form)")
        keys.append(match.group(1) or match.group(2))
        rest = rest[match.end() :].lstrip()
    if not keys:
        raise InvalidArgumentError("objective.metric", text, "R['key'] or R['key']['inner'] (DI-toolkit's form)")
    return ".".join(keys)


def _dig(result: Mapping[str, Any], path: str) -> Any:
    node: Any = result
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def leaderboard(
    records: Iterable[Mapping[str, Any]], objective: Objective, top_n: int | None = 10
) -> list[dict[str, Any]]:
    """The ``top_n`` (None: all) succeeded records with a score, best first (ties keep trial order). With several
    metrics each row also has ``values`` (metric -> value) and ``front`` (1 = on the Pareto front; fronts
    are numbered until they hold ``top_n`` trials, later ones are None); without weights rows are ranked by
    front, then by the first metric, and with weights by the weighted sum."""
    scored = []
    for record in records:
        if record.get("state") != "succeeded":
            continue
        values = objective.values(record.get("result"))
        if values is not None:
            scored.append({**record, "score": objective.score(record.get("result")), "_values": values})
    if objective.several:
        fronts = pareto_fronts([r["_values"] for r in scored], objective.modes, enough=top_n)
        front_of = {i: f + 1 for f, members in enumerate(fronts) for i in members}
        for i, r in enumerate(scored):
            r["front"] = front_of.get(i)
            r["values"] = dict(zip(objective.metrics, r["_values"], strict=True))
        if not objective.weights:
            scored = [r for r in scored if r["front"] is not None]
    for r in scored:
        del r["_values"]
    first = (lambda r: r["front"]) if objective.several and not objective.weights else (lambda r: 0)
    scored.sort(key=lambda r: (first(r), objective.sort_key(r["score"]), r.get("index", 0)))
    return [{"rank": i + 1, **r} for i, r in enumerate(scored[:top_n])]


def pareto_front(records: Iterable[Mapping[str, Any]], objective: Objective) -> list[dict[str, Any]]:
    """Every succeeded record on the Pareto front of a multi-metric objective, best first metric first,
    each with ``values`` (metric -> value)."""
    scored = [
        (r, v)
        for r in records
        if r.get("state") == "succeeded"
        for v in [objective.values(r.get("result"))]
        if v is not None
    ]
    fronts = pareto_fronts([v for _, v in scored], objective.modes, enough=1)
    rows = [
        {**scored[i][0], "values": dict(zip(objective.metrics, scored[i][1], strict=True))}
        for i in (fronts[0] if fronts else [])
    ]
    first, mode = objective.metrics[0], objective.modes[0]
    rows.sort(key=lambda r: (-r["values"][first] if mode == "maximize" else r["values"][first], r.get("index", 0)))
    return rows


def format_leaderboard(board: Sequence[Mapping[str, Any]], objective: Objective) -> str:
    if not board:
        return f"no succeeded trial reported {' and '.join(map(repr, objective.metrics))}"
    if not objective.several:
        rows = [(r["rank"], r["score"], r["label"] or r["trial_id"], r["trial_id"]) for r in board]
        return format_table(rows, ["rank", f"{objective.metric} ({objective.mode})", "parameters", "trial"])
    head = ["rank", "front"] + [f"{m} ({mode[:3]})" for m, mode in zip(objective.metrics, objective.modes, strict=True)]
    if objective.weights:
        head.append("weighted sum")
    rows = []
    for r in board:
        row = [r["rank"], r.get("front")] + [(r.get("values") or {}).get(m) for m in objective.metrics]
        if objective.weights:
            row.append(round(r["score"], 6))
        rows.append(tuple(row + [r["label"] or r["trial_id"], r["trial_id"]]))
    return format_table(rows, head + ["parameters", "trial"])


def objective_from_mapping(data: Mapping[str, Any], where: str) -> Objective:
    """An objective written as a mapping (``{metric: acc, mode: maximize, weights: [...]}``), errors naming
    ``where`` and the key."""
    unknown = [k for k in data if k not in ("metric", "mode", "weights")]
    if unknown:
        raise InvalidArgumentError(f"{where}.{unknown[0]}", data[unknown[0]], "only metric, mode and weights")
    try:
        metric: Any = data.get("metric")  # Objective checks it and names what it expected
        return Objective(metric, data.get("mode", "maximize"), data.get("weights"))
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{where}.{exc.argument.split('.')[-1]}", exc.value, exc.expected) from None
