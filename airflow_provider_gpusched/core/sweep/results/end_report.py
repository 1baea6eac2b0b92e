"""The report sent when a sweep (or a round) ends: status counts, the leaderboard's top, the best trial, the
failures with the last lines of their output, and GPU time by class — as plain text, Markdown and HTML.

Built from what ``collect`` wrote in the sweep's folder (``summary.json``, ``leaderboard.json``,
``pareto.json``) and each failed trial's ``output.log``; no Airflow import (the notifiers in
``airflow_provider_gpusched.notifications`` deliver it).
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_gpusched.core.checks import is_finite_number, is_json_number
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.safe_files import read_tail
from airflow_provider_gpusched.core.sweep.parts.objective import Objective
from airflow_provider_gpusched.core.sweep.records.store import FAILED_STATES, RUN_STATES, read_json
from airflow_provider_gpusched.core.text import printable

#: failures listed in a report, and the lines of output shown for each
MAX_FAILURES, TAIL_LINES = 10, 15


@dataclass
class SweepEndReport:
    sweep: str
    folder: str
    counts: dict[str, int]
    objective: Objective | None = None
    top: list[dict[str, Any]] = field(default_factory=list)
    pareto_front: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    gpu_seconds: dict[str, float] = field(default_factory=dict)
    run: str | None = None
    round_no: int | None = None  # a report at the end of this round (0-based) of a search in rounds
    rounds: int | None = None

    @property
    def stopped(self) -> bool:
        """The run was stopped (or its tasks ended) before it ran every trial of its plan."""
        return bool(self.counts.get("stopped") or self.counts.get("not_started"))

    @property
    def ok(self) -> bool:
        return not self.stopped and not any(self.counts.get(state) for state in FAILED_STATES)

    @property
    def subject(self) -> str:
        done = ", ".join(
            f"{self.counts.get(k, 0)} {k.replace('_', ' ')}"
            for k in ("succeeded", *FAILED_STATES, "pruned", "stopped", "not_started")
            if self.counts.get(k)
        )
        if self.stopped and self.round_no is None:
            return f"[gpusched] sweep {self.sweep} was stopped: {done or 'nothing ran'}"
        best = ""
        if self.top and self.objective is not None:  # a leaderboard comes with its objective
            best = f"; best {self.objective.score_label} {self.top[0]['score']:.6g}"
        if self.round_no is not None:
            return f"[gpusched] sweep {self.sweep} round {self.round_no + 1} of {self.rounds}: so far {done}{best}"
        return f"[gpusched] sweep {self.sweep} {'finished' if self.ok else 'finished with failures'}: {done}{best}"

    def _rows(self) -> tuple[list[str], list[list[str]]]:
        objective = self.objective
        head = ["rank", objective.score_label if objective else "score", "trial"]
        if objective is not None and objective.several:
            head = ["rank", "front", *objective.metrics, "trial"]
        rows = []
        for r in self.top:
            if objective is not None and objective.several:
                rows.append(
                    [
                        str(r["rank"]),
                        str(r.get("front") or "-"),
                        *[f"{(r.get('values') or {}).get(m, float('nan')):.6g}" for m in objective.metrics],
                        printable(r["label"] or r["trial_id"]),
                    ]
                )
            else:
                rows.append([str(r["rank"]), f"{r['score']:.6g}", printable(r["label"] or r["trial_id"])])
        return head, rows

    def text(self) -> str:
        lines = [
            self.subject,
            "",
            f"results: {self.folder}" + (f" (DAG run {self.run})" if self.run else ""),
            "counts: " + ", ".join(f"{k} {v}" for k, v in self.counts.items() if v),
        ]
        if self.top and self.objective is not None:  # a leaderboard comes with its objective
            head, rows = self._rows()
            widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
            lines += [
                "",
                f"top {len(rows)} ({self.objective.describe()}):",
                "  " + "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)),
            ]
            lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        if self.pareto_front:
            lines += ["", f"Pareto front: {len(self.pareto_front)} trial(s)"]
        if self.gpu_seconds:
            lines += ["", "GPU time by class: " + ", ".join(f"{k} {_hours(v)}" for k, v in self.gpu_seconds.items())]
        for f in self.failures:
            lines += ["", f"trial {f['index']} {printable(f['label'])} [{f['state']}]: {printable(str(f['error']))}"]
            if f.get("tail"):
                lines += [f"  last lines of {f['log']}:"] + ["    " + printable(x) for x in f["tail"].splitlines()]
        return "\n".join(lines) + "\n"

    def markdown(self) -> str:
        lines = [
            f"**{_md(self.subject)}**",
            "",
            f"Results: `{self.folder}`" + (f" (DAG run `{self.run}`)" if self.run else ""),
            "",
            "| " + " | ".join(state for state, n in self.counts.items() if n) + " |",
            "|" + "---|" * sum(1 for v in self.counts.values() if v),
            "| " + " | ".join(str(v) for v in self.counts.values() if v) + " |",
        ]
        if self.top and self.objective is not None:  # a leaderboard comes with its objective
            head, rows = self._rows()
            lines += [
                "",
                f"Top {len(rows)} ({_md(self.objective.describe())}):",
                "",
                "| " + " | ".join(_md(h) for h in head) + " |",
                "|" + "---|" * len(head),
            ]
            lines += ["| " + " | ".join(_md(c) for c in r) + " |" for r in rows]
        if self.gpu_seconds:
            lines += ["", "GPU time by class: " + ", ".join(f"{k} {_hours(v)}" for k, v in self.gpu_seconds.items())]
        for f in self.failures:
            lines += ["", f"- trial {f['index']} `{_md(f['label'])}` **{f['state']}**: {_md(str(f['error']))}"]
            if f.get("tail"):
                lines += ["", "```", f["tail"].replace("```", "'''"), "```"]
        return "\n".join(lines) + "\n"

    def html(self) -> str:
        e = html.escape
        parts = [
            f"<h3>{e(self.subject)}</h3>",
            f"<p>Results: <code>{e(self.folder)}</code>"
            + (f" (DAG run <code>{e(self.run)}</code>)" if self.run else "")
            + "</p>",
            "<table><tr>"
            + "".join(f"<th>{e(k)}</th>" for k, v in self.counts.items() if v)
            + "</tr><tr>"
            + "".join(f"<td>{v}</td>" for v in self.counts.values() if v)
            + "</tr></table>",
        ]
        if self.top and self.objective is not None:  # a leaderboard comes with its objective
            head, rows = self._rows()
            parts.append(
                f"<p>Top {len(rows)} ({e(self.objective.describe())}):</p><table><tr>"
                + "".join(f"<th>{e(h)}</th>" for h in head)
                + "</tr>"
                + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows)
                + "</table>"
            )
        if self.gpu_seconds:
            parts.append(
                "<p>GPU time by class: "
                + e(", ".join(f"{k} {_hours(v)}" for k, v in self.gpu_seconds.items()))
                + "</p>"
            )
        for f in self.failures:
            parts.append(
                f"<p>trial {f['index']} <code>{e(f['label'])}</code> <b>{e(f['state'])}</b>: "
                f"{e(str(f['error']))}</p>" + (f"<pre>{e(f['tail'])}</pre>" if f.get("tail") else "")
            )
        return "\n".join(parts) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {
            "sweep": self.sweep,
            "folder": self.folder,
            "run": self.run,
            "round": self.round_no,
            "rounds": self.rounds,
            "ok": self.ok,
            "subject": self.subject,
            "counts": self.counts,
            "objective": self.objective.to_dict() if self.objective else None,
            "top": [
                {k: r.get(k) for k in ("rank", "score", "label", "trial_id", "params", "front", "values")}
                for r in self.top
            ],
            "pareto_front": len(self.pareto_front),
            "gpu_seconds": self.gpu_seconds,
            "failures": [
                {k: f.get(k) for k in ("index", "label", "state", "error", "log", "tail")} for f in self.failures
            ],
        }


def _md(text: str) -> str:
    return printable(text).replace("|", "\\|").replace("*", "\\*").replace("_", "\\_").replace("`", "'")


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} GPU-h" if seconds >= 360 else f"{seconds:.0f} GPU-s"


def _gpu_count(record: Mapping[str, Any], default: int) -> float:
    """The GPUs a trial held: its recorded share (a memory slice counts as its fraction of the GPU), else the GPUs
    its status names, else the spec's count (Slurm)."""
    share: Any = record.get("gpu_share")
    if is_json_number(share) and 0 < share <= 1024:
        return float(share)
    gpus = record.get("gpus")
    if isinstance(gpus, str) and gpus.strip():
        return len([g for g in gpus.split(",") if g.strip()])
    return default


def build_end_report(
    folder: str,
    *,
    top_n: int = 5,
    job_class: str = "normal",
    gpus_per_trial: int = 1,
    run: str | None = None,
    tail_lines: int = TAIL_LINES,
    round_no: int | None = None,
    rounds: int | None = None,
) -> SweepEndReport:
    """The report of the sweep in ``folder`` as ``collect`` left it. ``job_class`` and ``gpus_per_trial``
    (the spec's resources) count GPU time where a trial's status does not name its GPUs (Slurm)."""
    summary = read_json(os.path.join(folder, "summary.json"))
    if (
        not isinstance(summary, dict)
        or not isinstance(summary.get("records"), list)
        or not isinstance(summary.get("counts"), dict)
    ):
        raise GpuschedError(
            f"{os.path.join(folder, 'summary.json')}: missing or malformed (expected the summary "
            f"written by the sweep's collect task, with 'counts' and 'records')"
        )
    records = [r for r in summary["records"] if isinstance(r, dict)]
    counts = {k: int(v) for k, v in summary["counts"].items() if k in (*RUN_STATES, "defined") and isinstance(v, int)}
    table: dict[str, Any] = summary["table"] if isinstance(summary.get("table"), dict) else {}
    # this run's failures (the summary's table is per run), not an earlier run's that still stand
    failed_here = {i for state in FAILED_STATES for i in (table.get(state) or []) if isinstance(i, int)}
    board = read_json(os.path.join(folder, "leaderboard.json"))
    objective: Objective | None = None
    top: list[dict[str, Any]] = []
    if (
        isinstance(board, dict)
        and isinstance(board.get("objective"), dict)
        and isinstance(board.get("leaderboard"), list)
    ):
        try:
            objective = Objective(**board["objective"])
        except (TypeError, GpuschedError):
            raise GpuschedError(f"{os.path.join(folder, 'leaderboard.json')}: 'objective' is malformed") from None
        top = [r for r in board["leaderboard"] if isinstance(r, dict) and isinstance(r.get("score"), (int, float))][
            :top_n
        ]
    pareto = read_json(os.path.join(folder, "pareto.json"))
    front = pareto.get("front", []) if isinstance(pareto, dict) and isinstance(pareto.get("front"), list) else []
    failures: list[dict[str, Any]] = []
    for r in records:
        if r.get("state") not in FAILED_STATES or len(failures) >= MAX_FAILURES:
            continue
        if table and r.get("index") not in failed_here:
            continue
        log = r.get("log") if isinstance(r.get("log"), str) else None
        tail = read_tail(log, folder, tail_lines) if log else None  # only a log inside the sweep's folder
        failures.append(
            {
                "index": r.get("index"),
                "label": str(r.get("label") or r.get("trial_id")),
                "state": r["state"],
                "error": r.get("error"),
                "log": log,
                "tail": tail,
            }
        )
    gpu_seconds: dict[str, float] = {}
    used = sum(
        float(r["seconds"]) * _gpu_count(r, gpus_per_trial) for r in records if is_finite_number(r.get("seconds"))
    )
    if used:
        gpu_seconds[job_class] = round(used, 1)
    return SweepEndReport(
        sweep=str(summary.get("sweep") or os.path.basename(folder)),
        folder=folder,
        counts=counts,
        objective=objective,
        top=top,
        pareto_front=front,
        failures=failures,
        gpu_seconds=gpu_seconds,
        run=run,
        round_no=round_no,
        rounds=rounds,
    )


def format_for(kind: str, report: SweepEndReport) -> str:
    """``text``, ``markdown`` or ``html``."""
    if kind not in ("text", "markdown", "html"):
        raise GpuschedError(f"report format {kind!r}: expected 'text', 'markdown' or 'html'")
    text: str = getattr(report, kind)()
    return text
