"""The Slurm job state model: every state Slurm reports, classified.

Slurm reports states as words (``RUNNING``, ``CANCELLED by 0``, ``OUT_OF_MEMORY``...). This module
maps each one to a :class:`JobPhase`: not finished (pending or running) or finished with an outcome.
``PREEMPTED`` is final only when the job was not requeued: a requeued job reappears as ``PENDING``
with a higher restart count and is still waited for. :class:`JobTracker` follows one job's statuses over
time (state changes, requeues, a job that vanished) for every way of waiting: blocking, sensor, trigger.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


class JobPhase(str, enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    PREEMPTED = "preempted"
    OUT_OF_MEMORY = "out_of_memory"
    NODE_FAIL = "node_fail"
    BOOT_FAIL = "boot_fail"
    DEADLINE = "deadline"
    REVOKED = "revoked"
    #: Slurm knows nothing about the job (it left the queue and no completion record was found).
    NOT_FOUND = "not_found"

    @property
    def is_terminal(self) -> bool:
        return self not in (JobPhase.PENDING, JobPhase.RUNNING, JobPhase.NOT_FOUND)

    @property
    def is_success(self) -> bool:
        return self is JobPhase.SUCCEEDED


#: Slurm states of jobs that have not started running yet (or wait to run again).
PENDING_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "SPECIAL_EXIT",
        "RESV_DEL_HOLD",
        "SUSPENDED",
        "STOPPED",
        "RESIZING",
    }
)
#: Slurm states of jobs that are running or finishing.
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT"})
#: Slurm's final states and what they mean here.
TERMINAL_STATES = {
    "COMPLETED": JobPhase.SUCCEEDED,
    "FAILED": JobPhase.FAILED,
    "CANCELLED": JobPhase.CANCELLED,
    "TIMEOUT": JobPhase.TIMEOUT,
    "PREEMPTED": JobPhase.PREEMPTED,
    "OUT_OF_MEMORY": JobPhase.OUT_OF_MEMORY,
    "NODE_FAIL": JobPhase.NODE_FAIL,
    "BOOT_FAIL": JobPhase.BOOT_FAIL,
    "DEADLINE": JobPhase.DEADLINE,
    "REVOKED": JobPhase.REVOKED,
}
# squeue's and sacct's short codes, for output that uses %t instead of %T
_SHORT = {
    "PD": "PENDING",
    "R": "RUNNING",
    "CG": "COMPLETING",
    "CF": "CONFIGURING",
    "CD": "COMPLETED",
    "F": "FAILED",
    "CA": "CANCELLED",
    "TO": "TIMEOUT",
    "PR": "PREEMPTED",
    "OOM": "OUT_OF_MEMORY",
    "NF": "NODE_FAIL",
    "BF": "BOOT_FAIL",
    "DL": "DEADLINE",
    "RV": "REVOKED",
    "S": "SUSPENDED",
    "ST": "STOPPED",
    "SI": "SIGNALING",
    "SO": "STAGE_OUT",
    "RS": "RESIZING",
    "RQ": "REQUEUED",
    "RH": "REQUEUE_HOLD",
    "RF": "REQUEUE_FED",
    "SE": "SPECIAL_EXIT",
    "RD": "RESV_DEL_HOLD",
}


def normalize_state(raw: str) -> str:
    """``'CANCELLED by 0'`` -> ``'CANCELLED'``, ``'CD'`` -> ``'COMPLETED'``, ``'RUNNING+'`` -> ``'RUNNING'``."""
    word = (raw or "").strip().split(" ")[0].rstrip("+*").upper()
    return _SHORT.get(word, word)


def classify_state(raw: str) -> JobPhase:
    """The phase of a Slurm state string. Unknown words count as pending, never as a failure:
    a newer Slurm with a new state must not fail tasks whose jobs are fine. An empty state is not a state:
    NOT_FOUND, which the tracker gives up on after ``not_found_timeout`` with a clear message."""
    state = normalize_state(raw)
    if not state:  # nothing readable (a record that failed to parse): never "pending" forever
        return JobPhase.NOT_FOUND
    if state in TERMINAL_STATES:
        return TERMINAL_STATES[state]
    if state in RUNNING_STATES:
        return JobPhase.RUNNING
    return JobPhase.PENDING


def parse_exit_code(text: str | None) -> tuple[int | None, int | None]:
    """Slurm's ``EXIT:SIGNAL`` (``'3:0'``, ``'0:15'``) -> ``(3, None)``, ``(0, 15)``. Empty -> ``(None, None)``."""
    if not text:
        return None, None
    text = text.strip()
    if not text or text in ("N/A", "(null)"):
        return None, None
    code, _, sig = text.partition(":")
    try:
        exit_code = int(code)
    except ValueError:
        return None, None
    try:
        signal = int(sig) if sig else 0
    except ValueError:
        signal = 0
    return exit_code, (signal or None)


def parse_duration(text: str | None) -> float | None:
    """Slurm's durations (``TimeUsed``, ``Elapsed``): ``SS``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``;
    None for anything else (``INVALID``, ``N/A``, empty)."""
    text = (text or "").strip()
    days = 0
    if "-" in text:
        head, _, text = text.partition("-")
        if not head.isdigit():
            return None
        days = int(head)
    parts = text.split(":") if text else []
    if not parts or len(parts) > 3 or not all(p.isdigit() for p in parts):
        return None
    if days and len(parts) < 3:
        parts = parts + ["0"] * (3 - len(parts))  # D-HH or D-HH:MM
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + int(p)
    return float(days * 86400 + seconds)


@dataclass
class JobStatus:
    """What Slurm says about one job (or one task of an array job)."""

    job_id: str
    phase: JobPhase
    state: str = ""  # Slurm's own word, normalised
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    restarts: int = 0
    name: str = ""
    partition: str = ""
    nodes: str = ""
    array_job_id: str | None = None
    array_task_id: str | None = None
    source: str = ""  # squeue, sacct, jobcomp, scontrol
    elapsed: float | None = None  # seconds the job has run (its last run, when requeued)
    tasks: dict[str, JobStatus] = field(default_factory=dict)  # array tasks, keyed "ID_TASK"

    @classmethod
    def from_accounting(cls, job_id: str, state: str, exit_code: str | None, source: str, **known: Any) -> JobStatus:
        """A finished job as an accounting record says it (sacct's columns, a jobcomp line): Slurm's state word
        and ``exit_code`` text (``0:9``) read here, once; ``job_id`` ``ID_TASK`` is an array task."""
        code, sig = parse_exit_code(exit_code)
        state = normalize_state(state)
        array_id, _, task = job_id.partition("_")
        return cls(
            job_id=job_id,
            phase=classify_state(state),
            state=state,
            exit_code=code,
            signal=sig,
            array_job_id=array_id if task else None,
            array_task_id=task or None,
            source=source,
            **known,
        )

    @property
    def is_terminal(self) -> bool:
        return self.phase.is_terminal

    def describe(self) -> str:
        text = f"job {self.job_id} {self.state or self.phase.value}"
        meaning = _MEANING.get(self.phase)
        # what the state means first (a job that reached its time limit did, whatever its shell exited with: 0:0 in
        # Slurm's records, or 143 where the shell outlived SIGTERM's delivery to its child), then how it exited;
        # an exit code 0 beside a meaning would mislead and is left out
        how = [f"exit code {self.exit_code}"] if self.exit_code or (self.exit_code is not None and not meaning) else []
        if self.signal:
            how.append(signal_name(self.signal))
        said = "; ".join(part for part in (meaning, ", ".join(how)) if part)
        if said:
            text += f" ({said})"
        if self.reason and self.reason not in ("None", "(null)"):
            text += f" [{self.reason}]"
        if self.restarts:
            text += f", requeued {self.restarts}x"
        return text

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["phase"] = self.phase.value
        data["tasks"] = {k: v.to_dict() for k, v in self.tasks.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobStatus:
        data = dict(data)
        data["phase"] = JobPhase(data["phase"])
        data["tasks"] = {k: cls.from_dict(v) for k, v in (data.get("tasks") or {}).items()}
        return cls(**data)


#: what a final state means, said instead of a misleading "exit code 0" (Slurm records 0:0 for these)
_MEANING = {
    JobPhase.TIMEOUT: "reached its time limit",
    JobPhase.CANCELLED: "cancelled (scancel, an administrator, or Slurm)",
    JobPhase.PREEMPTED: "preempted and not requeued",
    JobPhase.NODE_FAIL: "its node failed",
    JobPhase.BOOT_FAIL: "its node failed to boot",
    JobPhase.DEADLINE: "missed its deadline",
    JobPhase.OUT_OF_MEMORY: "ran out of memory",
    JobPhase.REVOKED: "revoked (federation)",
}


def signal_name(number: int) -> str:
    """``15`` -> ``'signal 15 (SIGTERM)'``; numbers without a name stay numbers."""
    import signal as _signal

    try:
        return f"signal {number} ({_signal.Signals(number).name})"
    except ValueError:
        return f"signal {number}"


def array_task_order(key: str) -> tuple[int, str]:
    """Sort key for array task keys ``ID_TASK``: by task number."""
    tail = key.rsplit("_", 1)[-1]
    return (int(tail), key) if tail.isdigit() else (1 << 30, key)


def aggregate_array(job_id: str, tasks: dict[str, JobStatus], expected: int | None = None) -> JobStatus:
    """One status for an array job: running while any task is unfinished; then succeeded only if every
    task succeeded, else the outcome of the first task that did not (by task id)."""
    restarts = max((t.restarts for t in tasks.values()), default=0)
    elapsed = max((t.elapsed for t in tasks.values() if t.elapsed is not None), default=None)  # the longest task
    unfinished = [t for t in tasks.values() if not t.is_terminal]
    missing = expected is not None and len(tasks) < expected
    if unfinished or missing or not tasks:
        phase = JobPhase.RUNNING if any(t.phase is JobPhase.RUNNING for t in unfinished) else JobPhase.PENDING
        if not tasks:
            phase = JobPhase.NOT_FOUND
        return JobStatus(
            job_id=job_id,
            phase=phase,
            state=phase.value.upper(),
            restarts=restarts,
            tasks=tasks,
            source="array",
            elapsed=elapsed,
        )

    failed = [tasks[k] for k in sorted(tasks, key=array_task_order) if not tasks[k].phase.is_success]
    if not failed:
        return JobStatus(
            job_id=job_id,
            phase=JobPhase.SUCCEEDED,
            state="COMPLETED",
            exit_code=0,
            restarts=restarts,
            tasks=tasks,
            source="array",
            elapsed=elapsed,
        )
    first = failed[0]
    return JobStatus(
        job_id=job_id,
        phase=first.phase,
        state=first.state,
        exit_code=first.exit_code,
        signal=first.signal,
        restarts=restarts,
        tasks=tasks,
        source="array",
        elapsed=elapsed,
        reason=f"{len(failed)} of {len(tasks)} array tasks did not succeed",
    )


@dataclass
class JobTracker:
    """What happened to one job so far. Feed it statuses with :meth:`update`."""

    job_id: str
    not_found_timeout: float = 300.0
    clock: Callable[[], float] = time.monotonic
    last: JobStatus | None = None
    preemptions: int = 0
    events: list[str] = field(default_factory=list)
    preemption_events: list[str] = field(default_factory=list)
    wall_clock: Callable[[], float] = time.time
    #: the job is a time-limit chain (core/slurm/chain.py): its requeues are its next segments, not preemptions
    chain: bool = False
    _not_found_since: float | None = None

    def update(self, status: JobStatus) -> list[str]:
        """Record a status; return the log lines it causes (state changes, requeues)."""
        lines: list[str] = []
        prev = self.last
        if status.phase is JobPhase.NOT_FOUND:
            if self._not_found_since is None:
                self._not_found_since = self.clock()
                lines.append(
                    f"job {self.job_id} is not known to squeue or the completion record; "
                    f"waiting up to {self.not_found_timeout:.0f}s for it to show up"
                )
            self.events.extend(lines)
            return lines  # keep the last known status
        else:
            self._not_found_since = None
        # counted from 0, not from the first status seen: a requeue before it (a triggerer that took its time to
        # start, a re-attached task) is one of the job's requeues too. Each line is a record kept after the job
        # ended (the Slurm tab lists them): it says what happened, not what is being done now
        before = prev.restarts if prev is not None else 0
        if status.restarts > before:
            self.preemptions += status.restarts - before
            seen = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.wall_clock()))
            if self.chain:
                line = (
                    f"job {self.job_id} was requeued for segment {status.restarts + 1} of its time-limit chain "
                    f"(restart {status.restarts}, seen {seen})"
                )
            else:
                line = f"job {self.job_id} was preempted/requeued (restart {status.restarts}, seen {seen})"
            self.preemption_events.append(line)
            lines.append(line)
        if prev is None or (status.state, status.reason) != (prev.state, prev.reason):
            lines.append(f"{status.describe()}")
        self.last = status
        self.events.extend(lines)
        return lines

    @property
    def lost(self) -> bool:
        return self._not_found_since is not None and self.clock() - self._not_found_since > self.not_found_timeout

    @property
    def done(self) -> bool:
        return self.lost or (self.last is not None and self.last.is_terminal)

    def final_status(self) -> JobStatus:
        if self.lost:
            return JobStatus(
                job_id=self.job_id,
                phase=JobPhase.NOT_FOUND,
                state="NOT_FOUND",
                reason="the job disappeared from squeue and no completion record was found",
            )
        assert self.last is not None
        return self.last
