"""How a schedule is shown: sched-pipeline's YAML list, JSON with per-stage figures, an explanation table."""

from __future__ import annotations

from typing import Any

from airflow_provider_gpusched.core.partition.problem import Problem
from airflow_provider_gpusched.core.partition.solver import Schedule


def schedule_yaml(schedule: Schedule) -> str:
    """``- HOST: [first, last]`` per stage in stage order (sched-pipeline's format); ``[]`` if infeasible."""
    import json

    import yaml

    if not schedule.feasible:
        return "[]"
    lines = []
    for s in schedule.stages:
        host = yaml.safe_dump(s.host, default_style=None).strip().removesuffix("\n...").strip()
        if "\n" in host:  # a name YAML would fold over lines: JSON's quoting is YAML too, and one line
            host = json.dumps(s.host)
        lines.append(f"- {host}: [{s.first}, {s.last}]")
    return "\n".join(lines)


def schedule_json(problem: Problem, schedule: Schedule) -> dict[str, Any]:
    return {
        "model": problem.model,
        "dtype": problem.dtype,
        "batch_size": problem.batch_size,
        "buffers_in": problem.buffers_in,
        "buffers_out": problem.buffers_out,
        "layers": problem.layers,
        "feasible": schedule.feasible,
        "bottleneck_s": schedule.bottleneck_s,
        "optimal": schedule.optimal,
        "lower_bound_s": schedule.lower_bound_s,
        "gap": schedule.gap,
        "bottleneck_stage": None if schedule.bottleneck_stage is None else schedule.bottleneck_stage + 1,
        "stages": [s.to_dict() for s in schedule.stages],
        "skipped_device_types": problem.skipped_types,
    }


def not_proven_note(schedule: Schedule, time_limit: float | None) -> str:
    """One line saying that the schedule is the best found, not a proven optimum, with the proven bound."""
    limit = f"the time limit ({time_limit:g} s)" if time_limit is not None else "the time limit"
    return (
        f"not proven optimal: {limit} stopped the search; bottleneck {schedule.bottleneck_s:.6f} s, proven "
        f"lower bound {schedule.lower_bound_s:.6f} s (gap {100 * (schedule.gap or 0.0):.1f}%)"
    )


def explain_table(problem: Problem, schedule: Schedule) -> str:
    bottleneck, worst = schedule.bottleneck_s, schedule.bottleneck_stage
    if bottleneck is None or worst is None:  # no stages: not feasible
        why = "; ".join(f"{k}: {v}" for k, v in problem.skipped_types.items())
        return f"no feasible schedule for {problem.model} ({problem.layers} layers)" + (
            f"; device types without a profile: {why}" if why else ""
        )
    from airflow_provider_gpusched.core.text import format_table

    mib = 1024 * 1024
    rows = [
        (
            n + 1,
            s.host,
            s.device_type,
            f"{s.first}-{s.last}",
            f"{s.compute_s:.6f}",
            f"{s.comm_s:.6f}",
            f"{s.memory_bytes / mib:.1f}/{s.memory_limit_bytes / mib:.0f}",
            "<- bottleneck" if n == worst else "",
        )
        for n, s in enumerate(schedule.stages)
    ]
    table = format_table(rows, ["stage", "host", "type", "layers", "compute s", "send s", "memory MiB", ""])
    return (
        f"{problem.model}, {problem.dtype}, batch {problem.batch_size}, buffers in/out "
        f"{problem.buffers_in}/{problem.buffers_out}: bottleneck {schedule.bottleneck_s:.6f} s "
        f"(stage {worst + 1}, {1 / bottleneck:.3f} microbatches/s)\n{table}"
    )
