"""The local-GPU attempt loop's one decision step.

One piece of work on local GPUs goes: acquire a lease, run one attempt, release it, then **decide**:
relaunch after a preemption (after a backoff), retry a GPU out-of-memory failure with a bigger reservation,
succeed, or fail. :func:`decide` is that step, and the only place it is written. :class:`WorkProgress`
is what the loop carries between attempts; it turns into a plain dict and back, so that an Airflow
operator can carry it across a deferral.

One loop uses it, :func:`~airflow_provider_gpusched.core.gpu.supervisor.attempt_loop`; its users differ only in how
they wait (an :class:`~airflow_provider_gpusched.core.gpu.supervisor.AttemptHooks`): the blocking
:class:`~airflow_provider_gpusched.core.gpu.supervisor.GPUWorkSupervisor` (scripts, batched sweep trials, the
benchmarks) and :class:`~airflow_provider_gpusched.operators.local_gpu.LocalGPUOperator` (defers to the
triggerer, reschedules, or blocks in the worker; on a fleet host too). This is what
:class:`~airflow_provider_gpusched.core.slurm.states.JobTracker` is for Slurm jobs.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_provider_gpusched.core import pyfunc
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.gpu.accounting import PreemptionHistory
from airflow_provider_gpusched.core.gpu.class_policy import LocalClassPolicy
from airflow_provider_gpusched.core.gpu.inventory import GPUInventory
from airflow_provider_gpusched.core.gpu.lease_store import Lease
from airflow_provider_gpusched.core.gpu.oom import OOMRetryPolicy
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.work import Work
from airflow_provider_gpusched.core.units import format_bytes


@dataclass
class Attempt:
    """One run of the work on one lease."""

    number: int
    request: str
    gpus: list[int]
    exit_code: int | None
    oom: str | None
    seconds: float
    stopped: bool = False
    preempted: str | None = None  # why the attempt was stopped to give its GPUs back
    halted: str | None = None  # who stopped it for good (gpusched queue stop), when and why
    timed_out: str | None = None  # stopped at the work's time limit ("reached its time limit (00:00:03) ...")
    gpu_seconds: float = 0.0
    lost_gpu_seconds: float = 0.0
    #: a two-stage task: seconds of its load stage, and then waiting for its GPUs (None: not two-stage, or the
    #: stage was never reached)
    load_seconds: float | None = None
    gpu_wait_seconds: float | None = None
    #: when the attempt started (wall clock) and on which host: the GPU timeline's bar (core/gpu/timeline.py);
    #: absent in the payloads of tasks deferred before they were recorded
    started: float | None = None
    host: str = ""


@dataclass
class AttemptOutcome:
    attempt: Attempt
    lease: Lease
    tail: list[str]


@dataclass
class WorkProgress:
    """Where one piece of work stands between attempts: the request for the next attempt, the attempts
    so far and its life as fill-in work (preemptions, GPU time)."""

    request: GPURequest
    attempts: list[Attempt] = field(default_factory=list)
    history: PreemptionHistory = field(default_factory=PreemptionHistory)

    @property
    def next_number(self) -> int:
        return len(self.attempts) + 1

    @property
    def oom_failures(self) -> int:
        return sum(1 for a in self.attempts if a.oom)

    def relaunch_env(self) -> dict[str, str]:
        """What the next child is told: how often it was preempted (resume from its checkpoint if > 0)."""
        return {"GPUSCHED_PREEMPTIONS": str(self.history.preemptions)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "request": asdict(self.request),
            "attempts": [asdict(a) for a in self.attempts],
            "history": self.history.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkProgress:
        """The inverse of :meth:`to_dict` (a deferred task's payload, written by this package)."""
        return cls(
            GPURequest(**data["request"]),
            [Attempt(**a) for a in data.get("attempts") or []],
            PreemptionHistory.from_dict(data.get("history")),
        )


class Action(enum.Enum):
    RELAUNCH = "relaunch"  # preempted: run again (same request) after ``wait`` seconds
    RETRY_BIGGER = "retry_bigger"  # GPU OOM: run again with the bigger ``progress.request`` now
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    HALTED = "halted"  # stopped for good by `gpusched queue stop`: fail, and retrying cannot help
    TIMED_OUT = "timed_out"  # stopped at its time limit, as Slurm stops a job at --time: fail (state timeout)


@dataclass(frozen=True)
class NextStep:
    action: Action
    message: str  # what to log (for FAILED: why, for people)
    wait: float = 0.0  # seconds before the next attempt may start


def decide(
    progress: WorkProgress,
    outcome: AttemptOutcome,
    *,
    job_class: str,
    policy: LocalClassPolicy,
    oom_policy: OOMRetryPolicy,
    gpu_sizes: Sequence[int],
    stopping: bool,
    work: Work,
) -> NextStep:
    """Record ``outcome`` in ``progress`` and say what comes next. ``stopping``: the caller is being
    stopped (a killed task), so nothing is relaunched or retried. ``work``: what ran (for the failure message)."""
    a = outcome.attempt
    progress.attempts.append(a)
    history = progress.history
    line = history.record(a)
    if a.halted:
        return NextStep(Action.HALTED, f"work on GPU(s) {a.gpus} {a.halted}")
    if a.preempted and not stopping:
        wait = policy.backoff_for(history.preemptions)
        last = (
            ""
            if history.preemptible(policy)
            else f"; the next run is not preemptible (max_preemptions={policy.max_preemptions})"
        )
        return NextStep(Action.RELAUNCH, f"{line}; relaunching after {wait:.1f}s{last}", wait)
    if a.timed_out:
        tail = "\n".join(outcome.tail[-20:])
        return NextStep(
            Action.TIMED_OUT, f"work on GPU(s) {a.gpus} {a.timed_out}\n--- last lines of output ---\n{tail}"
        )
    if a.exit_code == 0:
        return NextStep(Action.SUCCEEDED, history.summary(job_class))
    if a.oom and not stopping:
        bigger = oom_policy.escalate(progress.request, progress.oom_failures, gpu_sizes)
        if bigger is not None:
            message = (
                f"GPU out of memory with {progress.request.describe()} ({a.oom}); retrying with {bigger.describe()}"
            )
            progress.request = bigger
            return NextStep(Action.RETRY_BIGGER, message)
    return NextStep(Action.FAILED, failure_message(outcome, [x.request for x in progress.attempts], work))


def failure_message(outcome: AttemptOutcome, requests: list[str], work: Work) -> str:
    """Why the work failed, for people: the callable's exception with its traceback, or the GPU OOM and
    every reservation tried (``requests``), or the exit code; then the last lines of output."""
    a = outcome.attempt
    if work.call_dir:
        error = pyfunc.read_outcome(work.call_dir).error
        if error is not None:
            return f"{error} on GPU(s) {a.gpus}\n--- remote traceback ---\n{error.remote_traceback}"
    if a.oom:
        what = f"GPU out of memory after {len(requests)} attempt(s) ({', '.join(requests)}): {a.oom}"
    else:
        what = f"exit code {a.exit_code}"
    tail = "\n".join(outcome.tail[-20:])
    return f"work on GPU(s) {a.gpus} failed: {what}\n--- last lines of output ---\n{tail}"


def gpu_descriptions(lease: Lease, inventory: GPUInventory) -> list[dict[str, Any]]:
    names = {g.index: g.name for g in inventory.gpus()}
    return [
        {
            "index": i,
            "uuid": u,
            "name": names.get(i, ""),
            "simulated": lease.simulated,
            "memory_reserved": lease.memory.get(i),
        }
        for i, u in zip(lease.gpus, lease.uuids, strict=True)
    ]


def attempt_banner(number: int, request: GPURequest, lease: Lease, gpus: list[dict[str, Any]], job_class: str) -> str:
    """The line that starts an attempt: what, where, which class."""
    where = ", ".join(f"{g['index']} ({g['uuid']}{', SIMULATED' if g['simulated'] else ''})" for g in gpus)
    if lease.stage == "load":
        return (
            f"attempt {number}: {request.describe()}: load stage started on host resources"
            + (f" ({format_bytes(lease.host_memory)} of RAM)" if lease.host_memory else "")
            + f", no GPU visible until it calls wait_for_gpus(), {job_class} class"
        )
    return (
        f"attempt {number}: {request.describe()} on GPU {where}, CUDA_VISIBLE_DEVICES={lease.cuda_visible_devices}, "
        f"{job_class} class" + (" (preemptible)" if lease.preemptible else "")
    )


@dataclass
class RunResult:
    """A successful piece of work: where it ran, its attempts and GPU time, and the callable's value."""

    exit_code: int
    gpus: list[dict[str, Any]]
    attempts: list[Attempt]
    log_path: str
    value: object = None
    history: PreemptionHistory = field(default_factory=PreemptionHistory)

    @property
    def oom_retries(self) -> int:
        return sum(1 for a in self.attempts if a.oom)

    def to_dict(self) -> dict[str, Any]:
        """What a program's task returns (its XCom)."""
        return {
            "exit_code": self.exit_code,
            "gpus": self.gpus,
            "log_path": self.log_path,
            "simulated": any(g["simulated"] for g in self.gpus),
            "oom_retries": self.oom_retries,
            "attempts": [asdict(a) for a in self.attempts],
            "gpu_time": self.history.to_dict(),
        }


def work_value(work: Work) -> object:
    """What a successful attempt produced: the callable's return value (None for programs)."""
    if not work.call_dir:
        return None
    outcome = pyfunc.read_outcome(work.call_dir)
    if not outcome.finished:
        raise GpuschedError(f"the callable exited 0 but left no result in {work.call_dir}")
    return outcome.value
