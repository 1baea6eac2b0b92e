"""Idle-time filling on local GPUs: which idle leases to preempt, when a GPU counts as idle, and what
fill-in work cost and lost.

* :func:`choose_victims` — the fewest preemptible leases whose removal lets a normal request fit
  (lowest priority first, then the youngest: least work lost).
* :class:`GPUActivity` — per GPU, when work we do not know about (a colleague's process, or utilisation
  on a GPU without any lease) was last seen; idle work starts only on GPUs quiet for ``idle_for`` seconds.
* :class:`PreemptionHistory` — one task's preemptions, GPU-seconds used and GPU-seconds lost (the time
  since its last checkpoint when it was stopped), carried across relaunches (and Airflow deferrals).
* :func:`append_accounting` / :func:`accounting_totals` — the host's ledger (``accounting.jsonl`` in the
  lease state directory): one line per attempt, summed per class by ``gpusched gpus usage``.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Sequence

from airflow_provider_gpusched.core.gpu.inventory import GPUInfo
from airflow_provider_gpusched.core.gpu.placement import GPURequest, GPUUsage, LeaseView, gpu_usage, place
from airflow_provider_gpusched.core.job_classes import LocalClassPolicy
from airflow_provider_gpusched.core.safe_files import (
    BadRecordError,
    UnsafePathError,
    append_line,
    open_regular,
    read_json_record,
    write_json_atomic,
)
from airflow_provider_gpusched.core.units import format_bytes

ACCOUNTING_FILE = "accounting.jsonl"
ACTIVITY_FILE = "activity.json"


def choose_victims(request: GPURequest, gpus: Sequence[GPUInfo], views: dict[str, LeaseView],
                   candidates: Sequence[tuple[str, int, float]]) -> list[str] | None:
    """Lease ids to preempt so that ``request`` fits, or None if preempting every candidate would not do.

    ``views``: every live lease by id; ``candidates``: ``(lease id, priority, started)`` of the leases
    that may be preempted now. Greedy by (priority, youngest first), then pruned to a minimal set."""
    order = sorted(candidates, key=lambda c: (c[1], -c[2], c[0]))
    chosen: list[str] = []

    def fits(removed: Iterable[str]) -> bool:
        gone = set(removed)
        rest = [v for lid, v in views.items() if lid not in gone]
        return place(request, gpu_usage(gpus, rest))[0] is not None

    for lease_id, _, _ in order:
        chosen.append(lease_id)
        if fits(chosen):
            break
    else:
        return None
    for lease_id in list(reversed(chosen)):  # drop any that the request does not actually need
        trial = [x for x in chosen if x != lease_id]
        if trial and fits(trial):
            chosen = trial
    return chosen


def gpu_is_busy(usage: GPUUsage, policy: LocalClassPolicy) -> str:
    """'' if nothing we do not know about is using the GPU, else what is."""
    if usage.foreign_used > policy.max_foreign_memory:
        return (f"GPU {usage.gpu.index}: {usage.foreign_processes or 'unknown'} foreign process(es) use "
                f"{format_bytes(usage.foreign_used)}")
    util = usage.gpu.utilization
    if usage.leases == 0 and util is not None and util > policy.max_utilization:
        return f"GPU {usage.gpu.index}: {util}% utilisation with no lease on it"
    return ""


class GPUActivity:
    """When each GPU was last busy with foreign work (a JSON file, updated under the allocation lock)."""

    def __init__(self, state_dir: str, clock: Callable[[], float] = time.time, file_mode: int = 0o600) -> None:
        self.path = os.path.join(state_dir, ACTIVITY_FILE)
        self.clock = clock
        self.file_mode = file_mode

    def update(self, usage: dict[int, GPUUsage], policy: LocalClassPolicy) -> dict[int, float]:
        """Record what is busy now; return, per GPU, since when it has been quiet."""
        now = self.clock()
        try:  # an unreadable file only means "busy until now": idle work waits, nothing is handed out twice
            data = {int(k): float(v) for k, v in read_json_record(self.path).items()}
        except (OSError, BadRecordError, ValueError, TypeError, AttributeError):
            data = {}
        changed = False
        for index, u in usage.items():
            if index not in data or gpu_is_busy(u, policy):
                data[index] = now
                changed = True
        if changed:
            write_json_atomic(self.path, {str(k): v for k, v in data.items()}, self.file_mode)
        return data


def newest_checkpoint(directory: str | None, since: float) -> float | None:
    """The wall time of the newest file written under ``directory`` after ``since``, if any."""
    if not directory or not os.path.isdir(directory):
        return None
    newest = None
    for root, _, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):
                mtime = os.stat(os.path.join(root, name)).st_mtime
                if mtime >= since and (newest is None or mtime > newest):
                    newest = mtime
    return newest


@dataclass
class PreemptionHistory:
    """One task's life as fill-in work, across relaunches."""

    preemptions: int = 0
    gpu_seconds: float = 0.0
    lost_gpu_seconds: float = 0.0
    events: list[str] = field(default_factory=list)

    def preemptible(self, policy: LocalClassPolicy) -> bool:
        """Whether the next lease may be preempted (not after ``max_preemptions``)."""
        return policy.preemptible and self.preemptions < policy.max_preemptions

    def record(self, attempt: Any) -> str:
        """Add one :class:`~airflow_provider_gpusched.core.gpu.runner.Attempt` (its ``seconds``,
        ``gpu_seconds``, ``lost_gpu_seconds``, ``preempted``); return the log line for a preemption ('' otherwise)."""
        self.gpu_seconds += attempt.gpu_seconds
        if not attempt.preempted:
            return ""
        self.preemptions += 1
        self.lost_gpu_seconds += attempt.lost_gpu_seconds
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
        line = (f"preempted at {stamp} after {attempt.seconds:.1f}s ({attempt.preempted}); "
                f"{attempt.lost_gpu_seconds:.1f} GPU-s since the last checkpoint lost; preemption {self.preemptions}")
        self.events.append(line)
        return line

    def summary(self, job_class: str) -> str:
        text = f"GPU time ({job_class} class): {self.gpu_seconds:.1f} GPU-s used"
        if self.preemptions:
            text += f", {self.lost_gpu_seconds:.1f} GPU-s lost to {self.preemptions} preemption(s)"
        return text

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> PreemptionHistory:
        return cls(**data) if data else cls()


def append_accounting(state_dir: str, record: dict, file_mode: int = 0o600) -> None:
    """One line per attempt; O_APPEND writes of one short line do not interleave; never through a link."""
    append_line(os.path.join(state_dir, ACCOUNTING_FILE), json.dumps(record, sort_keys=True) + "\n", file_mode)


_ACCOUNTING_NUMBERS = ("gpu_seconds", "lost_gpu_seconds")


def accounting_records(state_dir: str) -> list[dict]:
    """The ledger's records; lines that are not a record of the right shape are left out."""
    path = os.path.join(state_dir, ACCOUNTING_FILE)
    records = []
    try:
        fd = open_regular(path, os.O_RDONLY)
    except (FileNotFoundError, OSError, UnsafePathError):
        return records
    with os.fdopen(fd, errors="replace") as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if (isinstance(record, dict) and isinstance(record.get("job_class", "normal"), str)
                    and all(isinstance(record.get(k, 0), (int, float)) and not isinstance(record.get(k, 0), bool)
                            for k in _ACCOUNTING_NUMBERS)):
                records.append(record)
    return records


def accounting_totals(records: Iterable[dict]) -> dict[str, dict[str, float]]:
    """Per class: attempts, GPU-seconds used, GPU-seconds lost, preemptions."""
    totals: dict[str, dict[str, float]] = {}
    for r in records:
        t = totals.setdefault(r.get("job_class", "normal"),
                              {"attempts": 0, "gpu_seconds": 0.0, "lost_gpu_seconds": 0.0, "preemptions": 0})
        t["attempts"] += 1
        t["gpu_seconds"] += float(r.get("gpu_seconds", 0))
        t["lost_gpu_seconds"] += float(r.get("lost_gpu_seconds", 0))
        t["preemptions"] += int(r["preemptions"]) if "preemptions" in r else (1 if r.get("preempted") else 0)
    return totals
