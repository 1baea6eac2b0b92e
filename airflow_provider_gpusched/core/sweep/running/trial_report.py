"""``report()``: what a Python trial calls to record its metrics while it runs (the writing side of
core/sweep/records/reports.py).

It writes the JSON form of a report line with one ``write`` to ``$GPUSCHED_REPORT_FILE`` opened for appending.
Outside a sweep (no ``$GPUSCHED_REPORT_FILE``) it does nothing, so the same code runs on its own. In a sweep with
a pruning rule (core/sweep/pruning_rules/judging.py) it raises ``TrialPruned`` when the rule stops the trial; a command trial is
stopped by its runner instead."""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

from airflow_provider_gpusched.core.checks import is_int, is_number
from airflow_provider_gpusched.core.sweep.pruning_rules.judging import (
    SHARED_STUDY_ENV,
    SweepReports,
    TrialPruned,
    rule_from_env,
)
from airflow_provider_gpusched.core.sweep.records.reports import REPORT_ENV

_steps: dict[str, int] = {}  # per report file: the next step when report() is given none


def report(
    step: int | None = None, *, checkpoint: str | None = None, final: bool = False, **metrics: float
) -> dict[str, Any]:
    """Record this trial's metrics at ``step`` (default: one more than the last step reported from this
    process). Values must be numbers; NaN and infinities are written as ``null`` (a diverged loss is
    recorded, not refused). ``final``: this is the trial's last report, its whole budget trained (the last epoch,
    or an early stop of its own): no pruning rule stops it there. Returns the record written."""
    if step is None:
        step = _steps.get(os.environ.get(REPORT_ENV, ""), 0)
    if not is_int(step) or step < 0:
        raise TypeError(f"report(step=...): expected a whole number >= 0, got {step!r}")
    if not metrics:
        raise TypeError("report(): give at least one metric, e.g. report(step=3, loss=0.25)")
    clean: dict[str, float | None] = {}
    for name, value in metrics.items():
        if not is_number(value):
            if hasattr(value, "item"):  # a numpy or torch scalar
                value = value.item()
            if not is_number(value):
                raise TypeError(f"report({name}=...): expected a number, got {type(value).__name__}")
        clean[name] = value if math.isfinite(value) else None
    if checkpoint is not None and not isinstance(checkpoint, (str, os.PathLike)):
        raise TypeError(f"report(checkpoint=...): expected a path, got {type(checkpoint).__name__}")
    if not isinstance(final, bool):
        raise TypeError(f"report(final=...): expected True or False, got {type(final).__name__}")
    record: dict[str, Any] = {"step": step, "time": round(time.time(), 3), "metrics": clean}
    if checkpoint is not None:
        record["checkpoint"] = os.fspath(checkpoint)
    if final:
        record["final"] = True
    path = os.environ.get(REPORT_ENV)
    if path:
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        _steps[path] = step + 1
        _prune_check()
    return record


_sweep_reports: dict[str, Any] = {}  # per sweep folder: its SweepReports (files re-read only when changed)
_rules: dict[
    tuple[Any, ...], Any
] = {}  # ($GPUSCHED_PRUNING, $GPUSCHED_TRIAL_DIR) -> (rule, sweep folder, trial folder)


def _prune_check() -> None:
    """In a trial of a sweep with a pruning rule: raise TrialPruned when the rule stops this trial."""
    if "GPUSCHED_PRUNING" not in os.environ:
        return
    key = (os.environ["GPUSCHED_PRUNING"], os.environ.get("GPUSCHED_TRIAL_DIR"))
    found = _rules.get(key)
    if found is None:  # read (and checked) once per rule and trial, not on every report
        found = _rules.setdefault(key, rule_from_env())
    if found is None:
        return
    rule, sweep_dir, name = found
    shared = os.environ.get(SHARED_STUDY_ENV) == "1"
    reports = _sweep_reports.setdefault(sweep_dir, SweepReports(sweep_dir, shared))
    why = reports.judge(rule, name)
    if why:
        raise TrialPruned(why)
