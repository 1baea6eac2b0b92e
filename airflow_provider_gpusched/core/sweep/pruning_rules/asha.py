"""The ``asha`` rule (asynchronous successive halving, as Ray Tune's ASHA stops trials): rungs at ``min_steps *
reduction_factor**k`` steps; when a trial first reports at or past a rung, it stops if its value is worse than the
cutoff of the top ``1/reduction_factor`` of the values recorded at that rung, its own included (interpolated
between neighbours, as a percentile; no other trial recorded yet: it goes on)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from airflow_provider_gpusched.core.records import says
from airflow_provider_gpusched.core.sweep.pruning_rules.base import Peer, Pruner, Reports
from airflow_provider_gpusched.core.sweep.pruning_rules.curves import _own_curve, _value, _worse


@dataclass
class ASHASettings:
    """``pruning: {rule: asha, min_steps: 1, reduction_factor: 3}``."""

    min_steps: Annotated[int, says("a whole number >= 1", ge=1)] = 1  # the first rung
    #: keep the top 1/reduction_factor at each rung
    reduction_factor: Annotated[int, says("a whole number >= 2", ge=2)] = 3


class ASHARule(Pruner):
    """Asynchronous successive halving: at each rung, a trial outside the top ``1/reduction_factor`` stops."""

    name = "asha"
    settings_class = ASHASettings

    def rungs(self, up_to: int) -> list[int]:
        """The rungs up to step ``up_to``: ``min_steps * reduction_factor**k``."""
        settings = self.rule.settings_as(ASHASettings)
        out, rung = [], settings.min_steps
        while rung <= up_to:
            out.append(rung)
            rung *= settings.reduction_factor
        return out

    def judge(self, trial: str, own: Reports, peers: Sequence[Peer], judged_up_to: int | None = None) -> str:
        factor = self.rule.settings_as(ASHASettings).reduction_factor
        metric, better_high, scored = _own_curve(self.rule, own)
        if not scored:
            return ""
        step, worse = scored[-1][0], _worse(better_high)
        # each rung this trial reached since the last judgement, with its value when it reached it
        if judged_up_to is None:
            judged_up_to = scored[-2][0] if len(scored) > 1 else -1
        for rung in self.rungs(step):
            if any(s >= rung for s, _ in scored if s <= judged_up_to):
                continue  # judged before
            at_rung = next(v for s, v in scored if s >= rung)
            recorded = []
            for reports in (p.reports for p in peers):
                at = [v for r in reports if r["step"] >= rung and (v := _value(r, metric)) is not None]
                if at:
                    recorded.append(at[0])  # the peer's value when it reached the rung
            if not recorded:
                continue
            # the cutoff counts this trial's own value too, as Ray Tune's ASHA does: with few peers at a rung a
            # trial is not held to the single best of them
            cutoff = _top_fraction_cutoff(recorded + [at_rung], 1 / factor, better_high)
            if worse(at_rung, cutoff):
                return (
                    f"ASHA at rung {rung} (step {step}): {metric} {at_rung:.6g} is outside the top "
                    f"1/{factor} of {len(recorded)} other trials (cutoff {cutoff:.6g})"
                )
        return ""


def _top_fraction_cutoff(values: list[float], fraction: float, better_high: bool) -> float:
    """The value that the best ``fraction`` of ``values`` reach, interpolated between neighbours (as
    numpy's percentile does; Ray Tune's ASHA cuts the same way): one value is its own cutoff."""
    ordered = sorted(values, reverse=better_high)  # best first
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
