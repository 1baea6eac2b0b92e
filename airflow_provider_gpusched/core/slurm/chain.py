"""Training longer than the time limit: a Slurm job that goes on, segment after segment, from its checkpoint.

:class:`TimeLimitChain` is what a job declares. The job is submitted with ``--signal=B:SIG@DELAY`` and
``--requeue``; its command runs under the chain's wrapper (core/slurm/chain_shim.py, carried in the script), which on
the signal lets the work checkpoint and exit, then requeues the job (the same job id) while the checkpoint is newer
than at the segment's start and requeues are left. The Airflow task follows the one job id across its segments,
as it follows a preempted and requeued job. What each segment did is in the chain's record file
(:func:`records_path`), read back here, checked, as :class:`Segment`\\s for the task log and the Slurm job view.

The hand-over takes Slurm's own time: a requeued job may start again only after its old credential expired
(``AuthInfo=cred_expire``, 120 s by default), plus a scheduling pass.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.records import RecordType, one_of, record_class, says
from airflow_provider_gpusched.core.safe_files import BadRecordError, parse_json_record
from airflow_provider_gpusched.core.slurm.chain_shim import LINE_LIMIT, MAX_SEGMENT, RESTARTS_ARG

#: how a segment ended, as the wrapper writes it
OUTCOMES = ("requeued", "completed", "failed", "stopped", "no-progress", "out-of-requeues", "requeue-failed")
#: a segment with no end record but a later segment: its wrapper was killed before it could write its end
LOST = (
    "no end record: its wrapper was stopped before it wrote one (a node failure or Slurm's kill); a later segment ran"
)
#: outcomes that end a chain that had more to do: the task fails with the segment's words
CHAIN_FAILURES = ("no-progress", "out-of-requeues", "requeue-failed")
#: slurmctld checks time limits, and sends ``--signal``'s signal, at its periodic check (every 30 s): the signal
#: comes ``signal_delay`` to ``signal_delay + SIGNAL_CHECK`` seconds before the limit
SIGNAL_CHECK = 30
#: the job script's shell variable that holds Slurm's restart count, read before the job's own lines
RESTARTS_VARIABLE = "gpusched_restarts"
#: seconds a segment should have before the signal may come: the work's start (imports, data, resuming) and a
#: checkpoint. A shorter window is said at submission, and a segment signalled sooner than this after its start
#: is judged as one that had no time to checkpoint, never as a hang (chain_shim.py)
ADVISED_WORK = 60
#: the latest time a record may hold (9999-12-31T23:59:59Z): later ones are no times the task log can print
MAX_TIME = 253402300799.0
#: a time in a record: its bounds keep it one the task log can print
Time = Annotated[float, says("a time (seconds since 1970, before the year 10000)", ge=0, le=MAX_TIME, strict=False)]
SegmentNumber = Annotated[int, says(f"a segment number from 1 to {MAX_SEGMENT}", ge=1, le=MAX_SEGMENT)]
#: the segments read back at most (the newest): what the job's record holds (job_view.read_job_record)
MAX_SEGMENTS = 1000
#: the lines read at most (the last ones): a segment writes two or three
MAX_LINES = 5 * MAX_SEGMENTS
#: bad lines named one by one at most; more are counted in one more line
MAX_PROBLEMS = 20


@record_class(extra="forbid")
@dataclass(frozen=True)
class TimeLimitChain:
    """A job that continues past its time limit (submitit's ``slurm_max_num_timeout`` and
    ``slurm_signal_delay_s``, with the same defaults)."""

    #: the file or folder whose newer modification time proves a segment made progress (``%j``, ``%A``, ``%a``
    #: allowed); a Python callable with a checkpoint method needs none (its call file is the checkpoint)
    checkpoint: (
        Annotated[str, says("a path (a file or folder; %j, %A, %a allowed)", min_length=1, pattern=r"^[^\x00-\x1f]*$")]
        | None
    ) = None
    #: requeues after the first segment (segments: at most max_requeues + 1)
    max_requeues: Annotated[int, says("a whole number from 0 to 1000", ge=0, le=1000)] = 3
    #: the signal Slurm sends before the limit, to the work as to the wrapper
    signal: Annotated[str, says("'USR1' or 'USR2'"), one_of(("USR1", "USR2"))] = "USR1"
    #: seconds before the time limit that the signal comes
    signal_delay: Annotated[int, says("seconds from 10 to 65535", ge=10, le=65535)] = 90
    #: seconds the work has after the signal to checkpoint and exit, then it is stopped. The default: until
    #: 10 s (chain_shim.GRACE_MARGIN) before the limit (the job's end time, read on the node when the signal comes), at
    #: least signal_delay - 5. slurmctld sends the signal at its periodic check (every 30 s), so it comes
    #: signal_delay to signal_delay + 30 seconds before the limit: a fixed grace would throw up to 30 s away
    grace: Annotated[float, says("seconds > 0", gt=0)] | None = None

    @property
    def grace_seconds(self) -> float:
        return float(self.grace) if self.grace is not None else float(self.signal_delay - 5)

    def sbatch_args(self) -> list[str]:
        return [f"--signal=B:{self.signal}@{self.signal_delay}", "--requeue"]

    def work_before_signal(self, time_limit_minutes: int) -> int:
        """The seconds a segment is sure to have before the signal may come: the limit less ``signal_delay`` and
        slurmctld's 30-second check (through slurmrestd the wrapper signals on time, so a segment there gets up to
        30 s more)."""
        return time_limit_minutes * 60 - self.signal_delay - SIGNAL_CHECK

    def check_against(self, time_limit_minutes: int | None, argument: str = "time_limit_chain") -> None:
        """Refuse a delay or grace that do not fit in the job's time limit (Slurm takes them as they are): the
        signal must leave a segment some time to work, even when slurmctld sends it 30 s early."""
        if self.grace is not None and self.grace >= self.signal_delay:
            raise InvalidArgumentError(
                f"{argument}.grace", self.grace, f"fewer seconds than signal_delay ({self.signal_delay})"
            )
        if time_limit_minutes is not None and self.work_before_signal(time_limit_minutes) <= 0:
            limit = time_limit_minutes * 60
            raise InvalidArgumentError(
                f"{argument}.signal_delay",
                self.signal_delay,
                f"fewer seconds than the job's time limit ({limit} s) less the {SIGNAL_CHECK} s by which Slurm's "
                f"signal may come early: at most {max(limit - SIGNAL_CHECK - 1, 0)} s, or a longer time_limit "
                f"(a segment would have no time to work before the signal; docs/slurm.md)",
            )

    def timing_advice(self, time_limit_minutes: int | None) -> str | None:
        """A sentence for the task log when the time limit leaves a segment less than ADVISED_WORK seconds before
        the signal may come (a work that starts slowly saves nothing in that time), else None."""
        if time_limit_minutes is None:
            return None
        work = self.work_before_signal(time_limit_minutes)
        if work >= ADVISED_WORK:
            return None
        needed = -(-(ADVISED_WORK + self.signal_delay + SIGNAL_CHECK) // 60)
        return (
            f"time_limit_chain: with a {time_limit_minutes}-minute time limit and signal_delay={self.signal_delay}, "
            f"Slurm's signal may come as soon as {work} s after a segment starts (it comes signal_delay to "
            f"signal_delay + {SIGNAL_CHECK} s before the limit). The command must start, resume and be able to save "
            f"a checkpoint within that, or a segment ends with no progress; a time limit of {needed} minutes or "
            f"more leaves it at least {ADVISED_WORK} s (docs/slurm.md, 'What a command needs')"
        )

    @staticmethod
    def read_restarts() -> list[str]:
        """The job script's lines that keep Slurm's restart count (``SLURM_RESTART_COUNT``, 0 when absent or not
        digits) in a read-only shell variable for :meth:`wrap`'s lines: they go before any line of the job's own
        (its environment exports, its setup), which may set or unset the variable but no longer change the count
        that caps the chain (chain_shim.slurm_restarts)."""
        return [
            f'{RESTARTS_VARIABLE}="${{SLURM_RESTART_COUNT:-0}}"',
            f'case "${RESTARTS_VARIABLE}" in "" | *[!0-9]*) {RESTARTS_VARIABLE}=0 ;; esac',
            f"readonly {RESTARTS_VARIABLE}",
        ]

    def wrap(self, argv: Sequence[str], records_dir: str, checkpoint: str, *, self_signal: bool = False) -> list[str]:
        """The job script's lines that run ``argv`` under the chain's wrapper (its source carried along), with
        Slurm's restart count as :meth:`read_restarts`'s lines, earlier in the script, kept it.
        ``self_signal``: Slurm will not signal the batch shell (the REST transport), so the wrapper does, at
        ``signal_delay`` seconds before the job's end time."""
        from airflow_provider_gpusched.core.slurm.chain_shim import shim_source

        config = {
            "checkpoint": checkpoint,
            "max_requeues": self.max_requeues,
            "signal": self.signal,
            "grace": self.grace_seconds,
            "records": records_dir,
            "advised_work": ADVISED_WORK,
        }
        if self.grace is None:  # the default grace runs on to the job's end time, less a margin
            config["grace_to_end"] = True
        if self_signal:
            config["self_signal"] = self.signal_delay
        return [
            f"gpusched_chain={shlex.quote(shim_source())}",
            f'exec python3 -I -S -c "$gpusched_chain" "{RESTARTS_ARG}${RESTARTS_VARIABLE}" '
            + shlex.join([json.dumps(config, sort_keys=True), "--", *(str(a) for a in argv)]),
        ]


CHAIN = RecordType(TimeLimitChain, name="time-limit chain")


def time_limit_chain(value: Any, argument: str = "time_limit_chain") -> TimeLimitChain | None:
    """An operator's or spec's ``time_limit_chain``: None or False (off), True (the defaults), a mapping of
    settings or a :class:`TimeLimitChain`."""
    if value is None or value is False:
        return None
    if value is True:
        return TimeLimitChain()
    if isinstance(value, TimeLimitChain):
        return value
    expected = "True, or a mapping of checkpoint, max_requeues, signal, signal_delay, grace"
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(argument, value, expected)
    return CHAIN.read_argument(value, argument, expected)


def records_path(records_dir: str, job_key: str) -> str:
    """Where the wrapper keeps job ``job_key``'s segments (``ID`` or ``ARRAYID_TASK``)."""
    return os.path.join(records_dir, f"chain-{job_key}.jsonl")


# -- the records, read back ---------------------------------------------------------------------------------------


@record_class
@dataclass(frozen=True)
class SegmentRecord:
    """One line of the wrapper's record file: a segment's start or end."""

    v: Annotated[int, says("record version 1", ge=1, le=1)]
    job: Annotated[str, says("a Slurm job id such as 123 or 123_4", pattern=r"^\d+(_\d+)?$")]
    segment: SegmentNumber
    event: Annotated[str, says("'start' or 'end'"), one_of(("start", "end"))]
    at: Time
    node: Annotated[str, says("a node name", max_length=256)] | None = None
    outcome: Annotated[str, says("one of " + ", ".join(OUTCOMES)), one_of(OUTCOMES)] | None = None
    detail: Annotated[str, says("text", max_length=4096)] | None = None
    exit: Annotated[int, says("an exit status from -255 to 255", ge=-255, le=255)] | None = None
    signalled: Time | None = None


SEGMENT_RECORD = RecordType(SegmentRecord, name="chain segment record")


@record_class
@dataclass(frozen=True)
class Segment:
    """One segment of a chain: where and when it ran, and how it ended (None while it runs). The Slurm job view
    gets these in the job's record (checked when read back)."""

    job: Annotated[str, says("a Slurm job id such as 123 or 123_4", pattern=r"^\d+(_\d+)?$")]
    segment: SegmentNumber
    node: Annotated[str, says("a node name", max_length=256)] | None = None
    started: Time | None = None
    ended: Time | None = None
    outcome: Annotated[str, says("one of " + ", ".join(OUTCOMES)), one_of(OUTCOMES)] | None = None
    detail: Annotated[str, says("text", max_length=4096)] | None = None
    signalled: Time | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        import time

        def at(t: float | None) -> str:
            return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if t is not None else "?"

        head = f"segment {self.segment} of job {self.job} on {self.node or '?'}: {at(self.started)}"
        if self.ended is None:
            return f"{head} - {self.detail}" if self.detail else head + " - (running)"
        return f"{head} - {at(self.ended)}, {self.outcome}: {self.detail or ''}".rstrip(": ")


def parse_segments(text: str, source: str) -> tuple[list[Segment], list[str]]:
    """The segments in a record file's text, in order, and a problem for each line that is not a record (named by
    ``source`` and line: never silently dropped). The file lies where the job's work can write it: a line too long,
    nested too deep or holding a number out of range is such a problem, never an exception. Bounded: only the last
    :data:`MAX_LINES` lines are read, past :data:`MAX_PROBLEMS` the bad lines are counted, and past
    :data:`MAX_SEGMENTS` the oldest segments are left out (each said as a problem)."""
    problems: list[str] = []
    more = 0
    starts: dict[tuple[str, int], SegmentRecord] = {}
    ends: dict[tuple[str, int], SegmentRecord] = {}
    lines = text.splitlines()
    skipped = max(0, len(lines) - MAX_LINES)
    if skipped:
        problems.append(f"{source}: {len(lines)} lines; only the last {MAX_LINES} are read")
    for number, line in enumerate(lines[skipped:], skipped + 1):
        if not line.strip():
            continue
        where = f"{source}: line {number}"
        try:
            if len(line) > LINE_LIMIT:
                raise BadRecordError(f"{where}: longer than {LINE_LIMIT} characters")
            record = SEGMENT_RECORD.read(parse_json_record(where, line.encode(errors="replace")), where)
        except BadRecordError as exc:
            if len(problems) < MAX_PROBLEMS + bool(skipped):
                problems.append(str(exc))
            else:
                more += 1
            continue
        # a later end of the same segment wins: the wrapper writes "requeued" before it asks Slurm, and overwrites
        # it with "requeue-failed" when Slurm refuses
        (starts if record.event == "start" else ends)[(record.job, record.segment)] = record
    if more:
        problems.append(f"{source}: {more} more line(s) that are not records")
    keys = sorted(set(starts) | set(ends))
    if len(keys) > MAX_SEGMENTS:
        problems.append(f"{source}: {len(keys)} segments on record; the newest {MAX_SEGMENTS} are shown")
        keys = sorted(keys, key=lambda k: k[1])[-MAX_SEGMENTS:]
        keys.sort()
    last: dict[str, int] = {}
    for job, number in keys:
        last[job] = max(last.get(job, 0), number)
    segments = []
    for key in keys:
        start, end = starts.get(key), ends.get(key)
        later = last[key[0]] > key[1]
        segments.append(
            Segment(
                job=key[0],
                segment=key[1],
                node=start.node if start else None,
                started=start.at if start else None,
                ended=end.at if end else None,
                outcome=end.outcome if end else None,
                detail=end.detail if end else (LOST if later else None),
                signalled=end.signalled if end else None,
            )
        )
    return segments, problems


def chain_failure(segments: Sequence[Segment]) -> str | None:
    """Why the chain ended without finishing its work (its last segment's words), or None."""
    if segments and segments[-1].outcome in CHAIN_FAILURES:
        last = segments[-1]
        return f"the time-limit chain ended in segment {last.segment}: {last.detail}"
    return None


class RecordReader(Protocol):
    """What :func:`read_chain` needs of a ``SlurmClient``: a small file's text, here or through the login host
    (a protocol, so that this module, which the job spec imports, does not import the client back)."""

    def read_text(self, path: str, max_bytes: int = ..., *, tail: bool = ...) -> str | None: ...


def read_chain(client: RecordReader, records_dir: str, job_keys: Sequence[str]) -> tuple[list[Segment], list[str]]:
    r"""The segments of jobs ``job_keys`` (``ID``, or an array's ``ID_TASK``\s) from their record files (the
    last MiB of each), here or through the login host; with a problem for each line that is not a record."""
    segments: list[Segment] = []
    problems: list[str] = []
    for key in job_keys:
        path = records_path(records_dir, key)
        text = client.read_text(path, tail=True)  # the newest records: junk written first hides none
        if text is None:
            continue
        found, bad = parse_segments(text, path)
        segments.extend(s for s in found if s.job == key)
        problems.extend(bad)
    return segments, problems


SEGMENT = RecordType(Segment, name="chain segment")
