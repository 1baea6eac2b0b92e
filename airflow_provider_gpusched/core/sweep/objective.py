"""What a sweep optimises, and the leaderboard.

A trial's result is what it wrote to ``result.json`` in its folder (or DI-toolkit's ``result.pkl``), or what
its Python callable returned (a dict, or a bare number). The objective names a metric in it — a key, a
dotted path such as ``eval.accuracy``, or DI-toolkit's ``R['eval']['accuracy']`` — and whether to
``maximize`` or ``minimize`` it (``Objective.parse("maximize R['eval_value']")`` reads DI-toolkit's text).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.text import format_table

MODES = ("maximize", "minimize")


@dataclass(frozen=True)
class Objective:
    metric: str
    mode: str = "maximize"

    def __post_init__(self) -> None:
        if not isinstance(self.metric, str) or not self.metric:
            raise InvalidArgumentError("objective.metric", self.metric, "the name of a metric in the trial result")
        if self.metric.lstrip().startswith("R["):  # DI-toolkit's R['eval_value'] / R['eval']['value']
            object.__setattr__(self, "metric", _r_path(self.metric))
        if self.mode not in MODES:
            raise InvalidArgumentError("objective.mode", self.mode, "'maximize' or 'minimize'")

    @classmethod
    def parse(cls, text: Any, where: str = "objective") -> Objective:
        """DI-toolkit's form as text: ``maximize R['eval_value']``, ``minimize loss``."""
        parts = text.split(None, 1) if isinstance(text, str) else []
        if len(parts) != 2 or parts[0] not in MODES:
            raise InvalidArgumentError(where, text, "'maximize METRIC' or 'minimize METRIC' (METRIC: a key, a dotted "
                                                    "path, or R['key']), or a mapping {metric: ..., mode: ...}")
        try:
            return cls(parts[1].strip(), parts[0])
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(where, text, exc.expected) from None

    @property
    def maximize(self) -> bool:
        return self.mode == "maximize"

    def score(self, result: Any) -> float | None:
        """The metric's value in ``result``, or None when it is missing or not a finite number."""
        value = result
        if isinstance(result, Mapping):
            value = result.get(self.metric) if self.metric in result else _dig(result, self.metric)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return None
        return float(value)

    def problem(self, result: Any) -> str:
        """'' when :meth:`score` finds a finite number in ``result``, else what is wrong (for the trial's status)."""
        if not isinstance(result, Mapping):
            if isinstance(result, (int, float)) and not isinstance(result, bool):
                return "" if math.isfinite(result) else f"{self.metric} = {result!r} is not a finite number"
            return f"the result is {type(result).__name__}, not a JSON object with {self.metric!r}"
        value = result.get(self.metric) if self.metric in result else _dig(result, self.metric)
        if value is None and self.metric not in result:
            keys = ", ".join(sorted(map(str, result))[:10]) or "none"
            return f"the result has no {self.metric!r} (its keys: {keys})"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{self.metric} = {value!r:.80} is not a number"
        if not math.isfinite(value):
            return f"{self.metric} = {value!r} is not a finite number"
        return ""

    def better(self, a: float, b: float) -> bool:
        return a > b if self.maximize else a < b

    def sort_key(self, score: float) -> float:
        return -score if self.maximize else score

    def to_dict(self) -> dict:
        return {"metric": self.metric, "mode": self.mode}


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
        rest = rest[match.end():].lstrip()
    if not keys:
        raise InvalidArgumentError("objective.metric", text, "R['key'] or R['key']['inner'] (DI-toolkit's form)")
    return ".".join(keys)


def _dig(result: Mapping, path: str) -> Any:
    node: Any = result
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def leaderboard(records: Iterable[Mapping], objective: Objective, top_n: int = 10) -> list[dict]:
    """The ``top_n`` succeeded records with a score, best first (ties keep trial order)."""
    scored = []
    for record in records:
        if record.get("state") != "succeeded":
            continue
        score = objective.score(record.get("result"))
        if score is not None:
            scored.append({**record, "score": score})
    scored.sort(key=lambda r: (objective.sort_key(r["score"]), r.get("index", 0)))
    return [{"rank": i + 1, **r} for i, r in enumerate(scored[:top_n])]


def format_leaderboard(board: Sequence[Mapping], objective: Objective) -> str:
    if not board:
        return f"no succeeded trial reported {objective.metric!r}"
    rows = [(r["rank"], r["score"], r["label"] or r["trial_id"], r["trial_id"]) for r in board]
    return format_table(rows, ["rank", f"{objective.metric} ({objective.mode})", "parameters", "trial"])
