"""What the built-in pruning rules share: a metric's values read out of a trial's reports, and which way is worse."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_gpusched.core.checks import is_number
from airflow_provider_gpusched.core.sweep.pruning_rules.base import PruningRule, Reports


def _value(report: Mapping[str, Any], metric: str) -> float | None:
    value: Any = report["metrics"].get(metric)
    return float(value) if is_number(value) else None


def _scored(reports: Reports, metric: str) -> list[tuple[int, float]]:
    return [(r["step"], v) for r in reports if (v := _value(r, metric)) is not None]


def _own_curve(rule: PruningRule, own: Reports) -> tuple[str, bool, list[tuple[int, float]]]:
    """The judged metric, whether higher is better, and the trial's (step, value) reports of that metric."""
    metric = rule.judged_metric
    return metric, rule.mode == "maximize", _scored(own, metric)


def _worse(better_high: bool) -> Callable[[float, float], bool]:
    return (lambda a, b: a < b) if better_high else (lambda a, b: a > b)
