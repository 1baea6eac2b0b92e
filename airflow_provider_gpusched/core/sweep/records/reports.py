"""Intermediate reports: what a trial says while it runs (step, metrics, an optional checkpoint path).

A trial appends one line per report to ``$GPUSCHED_REPORT_FILE`` (``reports.jsonl`` in its folder), so any
language can report, and a crash loses at most the line being written:

* a JSON object: ``{"step": 3, "loss": 0.25, "checkpoint": "ckpt/3.pt"}`` (or the metrics under ``"metrics"``);
* or ``key=value`` words: ``step=3 loss=0.25 checkpoint=ckpt/3.pt`` (``echo ... >> "$GPUSCHED_REPORT_FILE"``).

``"final": true`` (``final=true``) marks a trial's last report, its budget trained: no pruning rule stops it there.

Python trials write them with ``report`` (core/sweep/running/trial_report.py, ``from airflow_provider_gpusched.trial
import report``); this module is the format and the reading side.

:func:`read_reports` reads a file back: a last line without its newline (being written, or cut by a crash) is
left out; any other line that is not a report (not the format, a number out of bounds: see
:func:`parse_report_line`) is named in ``problems`` by file and line number and skipped, never silently dropped,
never an error that stops the reader.
"""

from __future__ import annotations

import json
import os
from typing import Any

from airflow_provider_gpusched.core.checks import is_finite_number, is_int, is_number
from airflow_provider_gpusched.core.errors import GpuschedError, brief_repr
from airflow_provider_gpusched.core.safe_files import json_depth

REPORT_ENV = "GPUSCHED_REPORT_FILE"
REPORTS_FILE = "reports.jsonl"
#: the curve of the attempt before the current one, kept aside when a trial starts again (``previous_run`` in its
#: status says which DAG run it belongs to)
PREVIOUS_REPORTS_FILE = "reports.previous.jsonl"
MAX_REPORTS_BYTES = 64 * 2**20  # a trial's reports read back at most (the newest are kept when larger)
#: what the UI reads of a trial's reports per refresh (it draws at most 120 points of the newest)
UI_REPORTS_BYTES = 512 * 2**10
#: how reports_of_run's note begins when a later run replaced the curve (the UI counts those trials)
RAN_AGAIN = "ran again in DAG run"


#: a report line read at most (a JSON line of a few metrics is ~100 bytes; a longer line is refused, not parsed)
MAX_REPORT_LINE_BYTES = 64 * 2**10
#: the largest step a report may give: every step is exact as a float64 (a curve's x axis, a pruner's budget)
MAX_STEP = 2**53
#: the deepest nesting of arrays and objects a report line may hold (a report is an object of metrics: 2 levels)
MAX_REPORT_DEPTH = 16


def parse_report_line(line: str) -> dict[str, Any]:
    """One report line as ``{"step", "metrics", "checkpoint"?, "time"?}``; ValueError says what is wrong.

    Every number read is bounded here, for every reader after (collect's summary, the UI's curves, the pruning
    rules, tracking): a metric is a finite float64 or null (NaN and infinities become null, as :func:`report`
    writes them; a whole number too large for a float64, which JSON allows, is refused), the step a whole
    number 0..:data:`MAX_STEP`, the time a finite number."""
    text = line.strip()
    if len(text) > MAX_REPORT_LINE_BYTES:
        raise ValueError(f"longer than {MAX_REPORT_LINE_BYTES} characters")
    if text.startswith("{"):
        # checked before parsing, not left to RecursionError: whether that comes depends on the interpreter's
        # recursion limit, which any library in the process may have raised
        if json_depth(text.encode(), MAX_REPORT_DEPTH) > MAX_REPORT_DEPTH:
            raise ValueError("not a report (nested too deeply)")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise ValueError("not a report (nested too deeply)") from None
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        metrics = data.get("metrics")
        if metrics is None:
            metrics = {k: v for k, v in data.items() if k not in ("step", "time", "checkpoint", "final")}
        step, checkpoint, stamp, final = data.get("step"), data.get("checkpoint"), data.get("time"), data.get("final")
    else:
        metrics, step, checkpoint, stamp, final = {}, None, None, None, None
        for word in text.split():
            key, sep, value = word.partition("=")
            if not sep or not key:
                raise ValueError(f"expected key=value words, got {word!r}")
            if key == "step":
                step = int(value) if value.isdigit() else value
            elif key == "checkpoint":
                checkpoint = value
            elif key == "final":
                final = {"true": True, "1": True, "false": False, "0": False}.get(value.lower(), value)
            else:
                try:
                    metrics[key] = float(value)
                except ValueError:
                    raise ValueError(f"{key}={value!r} is not a number") from None
    if not is_int(step) or not 0 <= step <= MAX_STEP:
        raise ValueError(f"step: expected a whole number from 0 to 2**53, got {brief_repr(step)}")
    if final is not None and not isinstance(final, bool):
        raise ValueError(f"final: expected true or false, got {brief_repr(final)}")
    if not isinstance(metrics, dict) or not metrics:
        raise ValueError("no metrics")
    for key, value in metrics.items():
        if value is not None and (not is_number(value)):
            raise ValueError(f"metric {brief_repr(key)}: expected a number or null, got {brief_repr(value)}")
        if is_int(value) and not is_finite_number(value):
            raise ValueError(f"metric {brief_repr(key)}: expected a number within float range, got {brief_repr(value)}")
    if checkpoint is not None and not isinstance(checkpoint, (str, int, float)):
        raise ValueError(f"checkpoint: expected a path, got {brief_repr(checkpoint)}")
    if stamp is not None and not is_finite_number(stamp):
        raise ValueError(f"time: expected seconds since 1970 (a finite number), got {brief_repr(stamp)}")
    record: dict[str, Any] = {
        "step": step,
        "metrics": {str(k): (v if v is None or is_finite_number(v) else None) for k, v in metrics.items()},
    }
    if checkpoint is not None:
        record["checkpoint"] = str(checkpoint)
    if stamp is not None:
        record["time"] = stamp
    if final:
        record["final"] = True
    return record


def read_reports(
    path: str, root: str | None = None, max_bytes: int = MAX_REPORTS_BYTES
) -> tuple[list[dict[str, Any]], list[str]]:
    """The reports in ``path`` in the order written, and the problems (``path:line: why``) of lines that are
    not reports. A missing file has none. ``root``: read only a regular file under it, reached without a
    symbolic link (the UI reads paths built from published records)."""
    if root is not None:
        from airflow_provider_gpusched.core.safe_files import is_under, open_regular

        if not is_under(path, root):
            return [], [f"{path}: not under {root}"]
        try:
            fd = open_regular(path, os.O_RDONLY)
        except FileNotFoundError:
            return [], []
        except (OSError, GpuschedError) as exc:
            return [], [f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})"]
        opened = os.fdopen(fd, "rb")
    else:
        opened = None
    try:
        with opened or open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            skipped = max(0, size - max_bytes)
            if skipped:
                fh.seek(skipped)
            data = fh.read()
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [f"{path}: cannot read ({exc.strerror})"]
    lines = data.split(b"\n")
    if skipped:
        lines = lines[1:]  # the first line was cut by the seek
    lines = lines[:-1]  # after the last newline: empty, or a line still being written
    reports, problems = [], []
    if skipped:
        problems.append(f"{path}: only the newest {max_bytes / 2**20:g} MiB were read")
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        if len(raw) > MAX_REPORT_LINE_BYTES:
            problems.append(f"{path}:{number}: longer than {MAX_REPORT_LINE_BYTES} bytes")
            continue
        try:
            reports.append(parse_report_line(raw.decode("utf-8")))
        except (ValueError, UnicodeDecodeError) as exc:
            problems.append(f"{path}:{number}: {exc}")
    return reports, problems


def summarise(reports: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What a results table shows of a trial's reports: how many, the last step and its metrics."""
    if not reports:
        return None
    last = reports[-1]
    out = {"count": len(reports), "last_step": last["step"], "last": last["metrics"]}
    checkpoints = [r["checkpoint"] for r in reports if "checkpoint" in r]
    if checkpoints:
        out["checkpoint"] = checkpoints[-1]
    return out


def reports_of_run(path: str, run: str, root: str) -> tuple[list[dict[str, Any]] | None, str]:
    """The reports that DAG run ``run`` recorded in ``path`` (a trial's ``reports.jsonl`` under ``root``), and
    a note. The trial's ``status.json`` beside says which run its current file belongs to (``run``) and which
    run the kept-aside one belongs to (``previous_run``): a run that the trial ran in again later sees its own
    curve from ``reports.previous.jsonl``, or none (``None`` and why), never a later run's. A status file
    without a run (written before runs were recorded, or by a run outside Airflow) leaves the current file."""
    from airflow_provider_gpusched.core.safe_files import BadRecordError, is_under, read_json_record

    folder = os.path.dirname(path)
    status_path = os.path.join(folder, "status.json")
    if not is_under(status_path, root):
        return None, f"{status_path}: not under {root}"
    try:
        status = read_json_record(status_path, 1 << 16)
    except FileNotFoundError:
        return read_reports(path, root, UI_REPORTS_BYTES)[0], ""
    except (OSError, BadRecordError) as exc:
        return None, f"{status_path}: {exc}"
    if not isinstance(status, dict) or not isinstance(status.get("run"), str) or status["run"] == run:
        return read_reports(path, root, UI_REPORTS_BYTES)[0], ""
    if status.get("previous_run") == run:
        return read_reports(os.path.join(folder, PREVIOUS_REPORTS_FILE), root, UI_REPORTS_BYTES)[0], ""
    return None, f"{RAN_AGAIN} {status['run']}; the curve of this run is not kept"
