"""One piece of work's Slurm job, from its submission to its end (the Kubernetes provider's ``PodManager``, for
Slurm jobs).

A :class:`SlurmJobManager` is the work of one task instance, one sweep chunk or one terminal stage, named by a
stable ``key`` (recorded in the job's ``--comment``). :meth:`SlurmJobManager.start` finds its job and returns an
:class:`Attached`:

* **re-attach** — a live job of the same key (an earlier try of the same task, whose worker died) is followed
  instead of submitting a duplicate;
* **adopt or cancel orphans** — a live job of the same *family* (the same task in another DAG run, the same
  sweep in another terminal run) whose owner is gone: adopted when it does the same *work*, cancelled otherwise;
  one whose owner still runs (or cannot be asked) is left alone;
* **submit once** — sbatch, retried while Slurm is unreachable or full for now; before each retry the comment is
  looked for, so an attempt that got through after all is not submitted twice.

Then :meth:`~SlurmJobManager.output_path` says where the job writes, :meth:`~SlurmJobManager.wait` follows it to
its end in this process (its output shown as it is written, when :func:`~.output.follows_output` says so; deferred,
the triggerer's shared poller does this and its event becomes the same :class:`JobWait`), and
:meth:`~SlurmJobManager.finish` reads what its end means for the task (core/slurm/finish.py's ``job_end``).

Every call to Slurm the submission makes goes through one declared retry policy, :data:`SLURM_RETRY` (tenacity).
The users: ``SlurmJobOperator`` (and the sweep trial and array operators built on it) and ``gpusched sweep run
--backend slurm``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.slurm.finish import JobEnd, job_end
from airflow_provider_gpusched.core.slurm.job import job_comment, parse_job_comment
from airflow_provider_gpusched.core.slurm.output import OutputFollower, follows_output
from airflow_provider_gpusched.core.slurm.states import JobStatus
from airflow_provider_gpusched.core.slurm.transport import SlurmUnavailableError

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.slurm.client import SlurmClient
    from airflow_provider_gpusched.core.slurm.job import SlurmJobSpec

T = TypeVar("T")


class Log(Protocol):
    """Where the decisions are said: a ``logging.Logger``, or an operator's ``self.log``."""

    def info(self, msg: Any, /, *args: Any) -> Any: ...

    def warning(self, msg: Any, /, *args: Any) -> Any: ...


#: the states of an owner (an Airflow task instance) in which it still waits for its job
LIVE_OWNER_STATES = frozenset(
    {"running", "deferred", "queued", "scheduled", "up_for_retry", "up_for_reschedule", "restarting"}
)


@dataclass(frozen=True)
class RetryPolicy:
    """How a call to Slurm is retried while Slurm is unreachable or full for now (``SlurmUnavailableError``): up to
    ``attempts`` tries, waiting ``first_wait`` seconds, then twice as long each time, at most ``max_wait``."""

    attempts: int = 7
    first_wait: float = 1.0
    max_wait: float = 30.0

    def retrying(self, log: Log, what: str, sleep: Callable[[float], None] = time.sleep) -> Retrying:
        def before_sleep(state: Any) -> None:
            log.warning(
                "Slurm %s (unreachable or full for now: %s); trying again in %d s (try %d of %d)",
                what,
                state.outcome.exception(),
                state.next_action.sleep,
                state.attempt_number + 1,
                self.attempts,
            )

        return Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=self.first_wait, min=self.first_wait, max=self.max_wait),
            retry=retry_if_exception_type(SlurmUnavailableError),
            before_sleep=before_sleep,
            sleep=sleep,
            reraise=True,
        )

    def call(self, fn: Callable[[], T], log: Log, what: str, sleep: Callable[[float], None] = time.sleep) -> T:
        return self.retrying(log, what, sleep)(fn)


#: the one retry policy of every call to Slurm the submission makes
SLURM_RETRY = RetryPolicy()


@dataclass(frozen=True)
class Attached:
    """The job that does the work, and how it was found: ``"re-attached"`` (a live job of the same key),
    ``"adopted"`` (an orphan doing the same work) or ``"submitted"``."""

    job_id: str
    how: str

    @property
    def submitted(self) -> bool:
        return self.how == "submitted"


@dataclass(frozen=True)
class JobWait:
    """What following a job to its end saw: its final status (``job``, as ``JobStatus.to_dict``; None when it could
    not be followed to its end), its output file, its requeues, a problem with following it, and how many lines of
    its output were shown as they were written (None: not followed)."""

    job: dict[str, Any] | None
    output_path: str
    preemptions: int = 0
    preemption_events: list[str] = field(default_factory=list)
    problem: str | None = None
    followed_lines: int | None = None

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> JobWait:
        """The same, from the event of the triggerer that followed the job (``SlurmJobTrigger``)."""
        return cls(
            job=event.get("job"),
            output_path=event.get("output_path", ""),
            preemptions=event.get("preemptions", 0),
            preemption_events=event.get("preemption_events", []),
            problem=None if event.get("job") else event.get("message"),
            followed_lines=event.get("followed_lines"),
        )


class SlurmJobManager:
    """One piece of work's Slurm job, from its submission to its end (see the module's text).

    :param client: the ``SlurmClient`` (CLI here, or over ssh).
    :param key: the work's stable key (:func:`~airflow_provider_gpusched.core.slurm.job.task_key`): every try of
        the same task instance has it.
    :param family: what the same work has in every run (:func:`task_family_key`), to find orphans; None: no
        orphan handling.
    :param owner_state: the state of the owner of another run (``run`` of a job's comment): a state of
        :data:`LIVE_OWNER_STATES` leaves its job alone; None: cannot tell (also left alone).
    """

    def __init__(
        self,
        client: SlurmClient,
        key: str,
        *,
        family: str | None = None,
        owner_state: Callable[[str], str | None] | None = None,
        log: Log | None = None,
        retry: RetryPolicy = SLURM_RETRY,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client, self.key, self.family = client, key, family
        self.owner_state = owner_state or (lambda run: None)
        self.log: Log = log or logging.getLogger(__name__)
        self.retry, self.sleep = retry, sleep

    # -- the steps ---------------------------------------------------------------------------------------------
    def live(self) -> list[tuple[str, str]]:
        """``(job id, comment)`` of the live jobs of this key."""
        return self.retry.call(
            lambda: self.client.find_live_jobs(job_comment(self.key)),
            self.log,
            "did not answer while looking for earlier jobs",
            self.sleep,
        )

    def attach(self) -> Attached | None:
        """A live job of this key (an earlier try's), re-attached; None when there is none."""
        live = self.live()
        if not live:
            return None
        job_id, comment = live[0]
        self.log.info(
            "Re-attaching to Slurm job %s (%s), still alive from an earlier try; not submitting a duplicate",
            job_id,
            comment,
        )
        return Attached(job_id, "re-attached")

    def handle_orphans(self, work: str) -> str | None:
        """Jobs of this family left running by other runs whose owner is gone: re-attach to one doing the same
        ``work`` (returns its id), cancel the others. Every decision is logged."""
        if self.family is None:
            return None
        try:
            jobs = self.retry.call(
                lambda: self.client.find_live_jobs(job_comment("")),
                self.log,
                "did not answer while looking for jobs left by earlier runs",
                self.sleep,
            )
        except SlurmUnavailableError as exc:
            self.log.warning("Could not look for jobs left by earlier runs (%s); submitting", exc)
            return None
        adopted = None
        for job_id, comment in jobs:
            info = parse_job_comment(comment)
            if info.get("task") != self.family or info.get("key") == self.key or not info.get("run"):
                continue
            run = info["run"]
            state = self.owner_state(run)
            if state is None or state in LIVE_OWNER_STATES:
                self.log.info(
                    "Slurm job %s belongs to this task in DAG run %s, whose task is %s: leaving it",
                    job_id,
                    run,
                    state or "of unknown state",
                )
                continue
            if adopted is None and info.get("work") == work:
                adopted = job_id
                self.log.warning(
                    "Re-attaching to Slurm job %s, left running by DAG run %s (its task is %s: its "
                    "worker died); it does the same work, so no second job is submitted",
                    job_id,
                    run,
                    state,
                )
                continue
            self.client.cancel([job_id])
            self.log.warning(
                "Cancelled orphaned Slurm job %s of DAG run %s: its task is %s, so nothing waits for "
                "it any more (a killed worker leaves its job running)",
                job_id,
                run,
                state,
            )
        return adopted

    def submit(self, spec: SlurmJobSpec) -> str:
        """sbatch under the retry policy; before each retry, the job of this key is looked for (an attempt that got
        through after all), so a retry never duplicates it. A ``SlurmCommandError`` (sbatch refused the job) is
        not retried."""
        tries = [0]

        def once() -> str:
            tries[0] += 1
            if tries[0] > 1:
                found = self.client.find_live_jobs(job_comment(self.key))
                if found:
                    return found[0][0]
            return self.client.submit(spec).job_id

        return self.retry.call(once, self.log, "did not take the job", self.sleep)

    def start(self, build: Callable[[], tuple[SlurmJobSpec, str]]) -> tuple[Attached, SlurmJobSpec | None]:
        """The job of this work: re-attached, or (``build()`` gives the job and its work key only then) adopted or
        submitted. Returns it, and the spec that was built (None when re-attached)."""
        attached = self.attach()
        if attached is not None:
            return attached, None
        spec, work = build()
        adopted = self.handle_orphans(work)
        if adopted is not None:
            return Attached(adopted, "adopted"), spec
        return Attached(self.submit(spec), "submitted"), spec

    def start_job(self, spec: SlurmJobSpec, work: str) -> Attached:
        """:meth:`start` for a job whose spec is already built."""
        return self.start(lambda: (spec, work))[0]

    def output_path(self, attached: Attached, spec: SlurmJobSpec | None, pattern: str) -> str:
        """Where the job writes its output, its ``%j`` and ``%A`` filled in: the spec's for a job submitted now,
        Slurm's own for an adopted one (another run's, else ``pattern``), ``pattern`` (the same for every try of
        this work) for a re-attached one."""
        job_id = attached.job_id
        if attached.how == "re-attached":
            path: str | None = pattern
        elif attached.how == "adopted":
            path = self.client.output_path(job_id) or pattern
        else:
            assert spec is not None
            path = spec.output
        return (path or "").replace("%j", job_id).replace("%A", job_id)

    def wait(
        self,
        job_id: str,
        output_path: str,
        *,
        poll_interval: float,
        array_size: int | None,
        not_found_timeout: float,
        follow_output: bool,
        chain: bool,
    ) -> JobWait:
        """Follow the job to its end here (``SlurmClient.follow``): its state changes, and its new output lines
        while it runs (when :func:`follows_output`), go to the log."""
        follower = (
            OutputFollower(output_path, self.client.runner)
            if follows_output(follow_output, output_path, array_size)
            else None
        )

        def show_output(_status: JobStatus) -> None:
            if follower is None:
                return
            try:
                for line in follower.read():
                    self.log.info("%s", line)
            except (OSError, GpuschedError) as exc:
                self.log.warning("Cannot read the job's output %s now: %s", output_path, exc)

        tracker = self.client.follow(
            job_id,
            poll_interval=poll_interval,
            array_size=array_size,
            not_found_timeout=not_found_timeout,
            on_line=lambda line: self.log.info("%s", line),
            on_poll=show_output,
            chain=chain,
        )
        if follower is not None:
            for line in follower.flush():
                self.log.info("%s", line)
        final = tracker.final_status()
        return JobWait(
            job=final.to_dict(),
            output_path=output_path,
            preemptions=tracker.preemptions,
            preemption_events=tracker.preemption_events,
            problem=final.reason if tracker.lost else None,
            followed_lines=follower.lines if follower is not None else None,
        )

    def finish(self, status: JobStatus, output_path: str, problem: str | None, tail_lines: int) -> JobEnd:
        """What the job's end means for its task: its output's tail, a stop mark (core/slurm/finish.py)."""
        return job_end(self.client, status, output_path, problem, tail_lines)


#: the manager's old name (it covered the submission only); still importable
Submission = SlurmJobManager
