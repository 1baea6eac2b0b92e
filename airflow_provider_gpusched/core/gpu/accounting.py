"""What GPU work used and lost: one task's history across relaunches, and the host's ledger.

* :class:`PreemptionHistory` — one task's preemptions, GPU-seconds used and GPU-seconds lost (the time
  since its last checkpoint when it was stopped), carried across relaunches (and Airflow deferrals).
* :class:`GPUTimeLedger` — the host's ledger (``accounting.jsonl`` in the lease state directory): one
  line per attempt, summed per class by :func:`accounting_totals` (``gpusched gpus usage``, the GPU board).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_provider_gpusched.core.gpu.class_policy import LocalClassPolicy
from airflow_provider_gpusched.core.safe_files import UnsafePathError, append_line, open_regular

ACCOUNTING_FILE = "accounting.jsonl"


def gpu_share(gpus: Iterable[int], memory: Mapping[int, int], whole: bool, totals: Mapping[int, int]) -> float:
    """How many GPUs a lease holds, counting a memory slice as its fraction of the GPU: a whole GPU is 1, a
    12 GiB slice of an 80 GiB GPU is 0.15. GPU-seconds are this share times the seconds held, so two trials
    packed onto one GPU together count one GPU, not two. A GPU whose size is unknown counts whole."""
    share = 0.0
    for gpu in gpus:
        reserved, total = memory.get(gpu, 0), totals.get(gpu, 0)
        share += 1.0 if whole or reserved <= 0 or total <= 0 else min(1.0, reserved / total)
    return share


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
        """Add one :class:`~airflow_provider_gpusched.core.gpu.supervisor.Attempt` (its ``seconds``,
        ``gpu_seconds``, ``lost_gpu_seconds``, ``preempted``); return the log line for a preemption ('' otherwise)."""
        self.gpu_seconds += attempt.gpu_seconds
        if not attempt.preempted:
            return ""
        self.preemptions += 1
        self.lost_gpu_seconds += attempt.lost_gpu_seconds
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
        line = (
            f"preempted at {stamp} after {attempt.seconds:.1f}s ({attempt.preempted}); "
            f"{attempt.lost_gpu_seconds:.1f} GPU-s since the last checkpoint lost; preemption {self.preemptions}"
        )
        self.events.append(line)
        return line

    def summary(self, job_class: str) -> str:
        text = f"GPU time ({job_class} class): {self.gpu_seconds:.1f} GPU-s used"
        if self.preemptions:
            text += f", {self.lost_gpu_seconds:.1f} GPU-s lost to {self.preemptions} preemption(s)"
        return text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> PreemptionHistory:
        return cls(**data) if data else cls()


class GPUTimeLedger:
    """``accounting.jsonl`` in ``state_dir``: O_APPEND writes of one short line do not interleave; never
    through a link."""

    def __init__(self, state_dir: str, file_mode: int = 0o600, clock: Callable[[], float] = time.time) -> None:
        self.path = os.path.join(state_dir, ACCOUNTING_FILE)
        self.file_mode = file_mode
        self.clock = clock

    def append(self, record: dict[str, Any]) -> None:
        """Add one attempt (stamped with the time)."""
        append_line(self.path, json.dumps({"time": self.clock(), **record}, sort_keys=True) + "\n", self.file_mode)

    def records(self) -> list[dict[str, Any]]:
        """The ledger's records; lines that are not a record of the right shape are left out."""
        records: list[dict[str, Any]] = []
        try:
            fd = open_regular(self.path, os.O_RDONLY)
        except (FileNotFoundError, OSError, UnsafePathError):
            return records
        with os.fdopen(fd, errors="replace") as fh:
            for line in fh:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if (
                    isinstance(record, dict)
                    and isinstance(record.get("job_class", "normal"), str)
                    and all(
                        isinstance(record.get(k, 0), (int, float)) and not isinstance(record.get(k, 0), bool)
                        for k in _ACCOUNTING_NUMBERS
                    )
                ):
                    records.append(record)
        return records


_ACCOUNTING_NUMBERS = ("gpu_seconds", "lost_gpu_seconds")


def accounting_totals(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per class: attempts, GPU-seconds used, GPU-seconds lost, preemptions. A record is one attempt (the ledger's
    lines), or says how many it sums up (``attempts``: the attempts a task left out of its published history)."""
    totals: dict[str, dict[str, float]] = {}
    for r in records:
        t = totals.setdefault(
            r.get("job_class", "normal"), {"attempts": 0, "gpu_seconds": 0.0, "lost_gpu_seconds": 0.0, "preemptions": 0}
        )
        t["attempts"] += int(r["attempts"]) if "attempts" in r else 1
        t["gpu_seconds"] += float(r.get("gpu_seconds", 0))
        t["lost_gpu_seconds"] += float(r.get("lost_gpu_seconds", 0))
        t["preemptions"] += int(r["preemptions"]) if "preemptions" in r else (1 if r.get("preempted") else 0)
    return totals
