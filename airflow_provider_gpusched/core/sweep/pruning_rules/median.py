"""The ``median`` rule (Optuna's ``MedianPruner``, Vizier's median stopping): after ``warmup_steps``, stop a trial
whose best value so far is worse than the median of the other trials' values at the same step (each peer's latest
value at or before that step, among peers that reached it), once ``min_trials`` peers have."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from airflow_provider_gpusched.core.records import says
from airflow_provider_gpusched.core.sweep.pruning_rules.base import Peer, Pruner, Reports
from airflow_provider_gpusched.core.sweep.pruning_rules.curves import _own_curve, _value, _worse


@dataclass
class MedianSettings:
    """``pruning: {rule: median, warmup_steps: 0, min_trials: 3}``."""

    warmup_steps: Annotated[int, says("a whole number >= 0", ge=0)] = 0  # judge no step before this
    min_trials: Annotated[int, says("a whole number >= 1", ge=1)] = 3  # peers that must have reached the step


class MedianRule(Pruner):
    """Median stopping: a trial whose best value so far is worse than the median of its peers' at the same step."""

    name = "median"
    settings_class = MedianSettings

    def judge(self, trial: str, own: Reports, peers: Sequence[Peer], judged_up_to: int | None = None) -> str:
        settings = self.rule.settings_as(MedianSettings)
        metric, better_high, scored = _own_curve(self.rule, own)
        if not scored:
            return ""
        step, worse = scored[-1][0], _worse(better_high)
        if step < settings.warmup_steps:
            return ""
        best = (max if better_high else min)(v for _, v in scored)
        values = []
        for reports in (p.reports for p in peers):
            peer = [(r["step"], v) for r in reports if (v := _value(r, metric)) is not None]
            if peer and peer[-1][0] >= step:  # it reached this step: its latest value at or before it
                upto = [v for s, v in peer if s <= step]
                values.append(upto[-1] if upto else peer[0][1])
        if len(values) < settings.min_trials:
            return ""
        values.sort()
        mid = len(values) // 2
        median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
        if worse(best, median):
            return (
                f"median stopping at step {step}: best {metric} {best:.6g} is worse than the median "
                f"{median:.6g} of {len(values)} other trials"
            )
        return ""
