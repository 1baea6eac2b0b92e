"""The time-limit chain's wrapper, run in a Slurm job around the work:
``python3 -I -S -c SOURCE --slurm-restarts=N CONFIG -- argv...``.

Slurm signals the job a while before its time limit (``--signal=B:USR1@90``); where the transport cannot ask for
that (slurmrestd 22.05 refuses ``B:``), the config's ``self_signal`` has this wrapper send the signal to the batch
shell itself, ``self_signal`` seconds before the job's end time. The work (its child) gets the same signal from the
containment shim (core/contain.py), saves a checkpoint and exits. Then this wrapper decides:

* the checkpoint is newer than at the segment's start and requeues are left: ``scontrol requeue`` the job, which
  Slurm starts again (the same job id) as the chain's next segment;
* no newer checkpoint: the work made no progress (hung, or it does not checkpoint): the chain ends, failed;
* no requeue left: the chain ends, failed. Requeues are counted by Slurm's restart count (a preemption's or node
  failure's requeue counts too): ``--slurm-restarts=N``, which the job script reads from ``SLURM_RESTART_COUNT``
  before any line of the job's own (its ``environment`` exports and ``setup`` lines may set or unset that variable
  for the work, and do not change this count: :func:`slurm_restarts`). The record file, which the work can write,
  may only lower what is left;
* the work finished before the signal (or after it, with nothing new to continue from): the job ends as it did.

A work that has not exited ``grace`` seconds after the signal is stopped (SIGTERM, then SIGKILL), before Slurm's own
time limit, and judged the same way. The default grace (``grace_to_end``) runs on to ``GRACE_MARGIN`` seconds
before the job's end time (``scontrol show job``): slurmctld's signal may come 30 s earlier than asked. Whether the
work *took* the signal (a process of it catches it: ``SigCgt`` in /proc) tells "ignored the signal" apart from "was
still saving". A first segment signalled before ``advised_work`` seconds, with no newer checkpoint, whose work took the
signal, is requeued once more rather than taken for a hang (the first segment's allowance: the work may not have
had the time to save anything); any other segment without a newer checkpoint ends the chain, its words saying how
soon the signal came. A SIGTERM without the chain's signal first (``scancel``, a preemption) is
never followed by a requeue here. Each segment's start and end go to the chain's record file (JSON lines, mode 0600,
opened without following a link) and, in words, to the job's output.

Standalone on purpose (the standard library only, Python 3.7): a job script carries its source
(:func:`shim_source`) to compute nodes that may not have this package.
"""

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time

RECORD_VERSION = 1
#: the default grace ends this many seconds before the job's end time: SIGTERM, 5 s for it, then the requeue
GRACE_MARGIN = 10


def _now() -> float:
    return time.time()


def _stamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(at))


def checkpoint_mark(path: str) -> int:
    """The newest modification time (ns) of the checkpoint: the file, or anything in the folder (three levels
    deep); 0 when there is none."""
    try:
        newest = os.stat(path).st_mtime_ns
    except OSError:
        return 0
    if os.path.isdir(path):
        base = path.rstrip(os.sep).count(os.sep)
        for root, dirs, files in os.walk(path):
            if root.rstrip(os.sep).count(os.sep) - base >= 3:
                dirs[:] = []
            for name in files + dirs:
                with contextlib.suppress(OSError):
                    newest = max(newest, os.stat(os.path.join(root, name)).st_mtime_ns)
    return newest


def job_key() -> str:
    """This job as Slurm names it: ``ID``, or ``ARRAYID_TASK`` for an array task."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID", "0")


def fill(pattern: str) -> str:
    """Slurm's ``%j``, ``%A`` and ``%a`` in a path, for this job."""
    job = os.environ.get("SLURM_JOB_ID", "0")
    return (
        pattern.replace("%A", os.environ.get("SLURM_ARRAY_JOB_ID", job))
        .replace("%a", os.environ.get("SLURM_ARRAY_TASK_ID", "0"))
        .replace("%j", job)
    )


#: the most of the record file read back: its last MiB (the newest records; junk written first hides nothing)
READ_LIMIT = 1 << 20
#: a record line longer than this is not one of the wrapper's (theirs are under 5 KiB): skipped unparsed
LINE_LIMIT = 64 << 10
#: a segment number above this is not one of the wrapper's (max_requeues is at most 1000)
MAX_SEGMENT = 100000


#: the argument that carries Slurm's restart count, as the job script read it before the job's own lines
RESTARTS_ARG = "--slurm-restarts="


def slurm_restarts(given: "str | None" = None) -> int:
    """How many times Slurm has restarted this job (``SLURM_RESTART_COUNT``, absent before the first restart):
    every requeue counts, the chain's own, a preemption's or a node failure's. The chain's cap is on this, never
    on the record file, which the work may write. ``given``: the count the job script read first thing
    (:data:`RESTARTS_ARG`), before the job's environment exports and setup lines, which may change the variable;
    None (a script rendered before the argument existed) or not a count: this wrapper's own environment."""

    def count(text: str) -> "int | None":
        text = text.strip()
        return int(text) if text.isdigit() and text.isascii() and len(text) <= 9 else None

    found = count(given) if given is not None else None
    return found if found is not None else count(os.environ.get("SLURM_RESTART_COUNT", "")) or 0


def restarts_note(restarts: int) -> str:
    """Words for the job's output when ``SLURM_RESTART_COUNT`` in this environment is not the count read before
    the job's own lines (its environment or setup changed it); empty when they agree."""
    text = os.environ.get("SLURM_RESTART_COUNT")
    if (text or "0").strip() == str(restarts):
        return ""
    shown = "unset" if text is None else "{!r}".format(text[:40] + ("..." if len(text) > 40 else ""))
    return (
        f"SLURM_RESTART_COUNT is {shown} here (the job's environment or setup lines changed it; the work sees that "
        f"value): the chain counts Slurm's {restarts} restart(s), read before them"
    )


class Records:
    """The chain's record file: one JSON object a line, appended. It lies where the work can write it (the same
    user): what is read back only numbers the segments and counts the requeues on record, which may lower the
    requeues left (never raise them: :class:`Segment` caps on :func:`slurm_restarts`)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> "list[dict[str, object]]":
        """The records in the file's last :data:`READ_LIMIT` bytes, oldest first; a line that is not a JSON object
        (too long, nested too deep, a number too big) is skipped."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return []
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return []
            start = max(0, st.st_size - READ_LIMIT - 1)
            data = os.pread(fd, READ_LIMIT + 1, start)
        except OSError:
            return []
        finally:
            os.close(fd)
        lines = data.split(b"\n")
        if start > 0:
            lines = lines[1:]  # the first is cut (or is the byte before the last MiB, a newline or not)
        out = []
        for line in lines:
            if not line.strip() or len(line) > LINE_LIMIT:
                continue
            try:
                record = json.loads(line.decode(errors="replace"))
            except (ValueError, RecursionError):
                continue
            if isinstance(record, dict):
                out.append(record)
        return out

    def add(self, record: "dict[str, object]") -> None:
        """Append ``record``; a file the wrapper cannot write (the work made it a folder, a FIFO, a link) is said,
        never a reason to stop or to hang."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            say(f"cannot write the chain's record file {self.path}: {exc}")
            return
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                say(f"cannot write the chain's record file {self.path}: not a regular file")
                return
            os.write(fd, (json.dumps(record, sort_keys=True) + "\n").encode())
        except OSError as exc:
            say(f"cannot write the chain's record file {self.path}: {exc}")
        finally:
            os.close(fd)


def count_segments(records: "list[dict[str, object]]", job: str) -> "tuple[int, int]":
    """The requeues the chain made so far (segments whose last end record says "requeued") and this segment's
    number (one more than any segment on record, ended or not: a segment whose wrapper was killed before it wrote
    its end still counts), from the records alone."""
    numbers = []  # type: list[int]
    last_end = {}  # type: dict[int, object]
    for record in records:
        number = record.get("segment")
        if record.get("job") != job or type(number) is not int or not 1 <= number <= MAX_SEGMENT:
            continue
        numbers.append(number)
        if record.get("event") == "end":
            last_end[number] = record.get("outcome")
    return sum(1 for outcome in last_end.values() if outcome == "requeued"), max(numbers, default=0) + 1


def say(text: str) -> None:
    print("[gpusched chain] " + text, flush=True)


def limit_seconds(text: str) -> "float | None":
    """Slurm's TimeLimit (``[D-]HH:MM:SS``, ``MM:SS``, ``MM``) in seconds; None for UNLIMITED or anything else."""
    days, _, clock = text.rpartition("-")
    parts = clock.split(":")
    if not (days == "" or days.isdigit()) or not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    values = [int(p) for p in parts]
    if len(values) == 1:
        values = [0, values[0], 0]  # minutes
    elif len(values) == 2:
        values = [0, *values]  # minutes:seconds
    hours, minutes, seconds = values
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60.0 + seconds


def job_end_time(job_id: str, timeout: float = 30) -> "float | None":
    """This run's end time, its start plus the time limit (``scontrol show job``); None if unknown or if the job is
    not running. Not Slurm's EndTime: a cancel sets that to the moment of the cancel, and a wrapper that read it
    then would take the cancel for its time limit."""
    try:
        out = subprocess.run(
            ["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=timeout
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    fields = dict(word.partition("=")[::2] for word in out.split() if "=" in word)
    if fields.get("JobState") != "RUNNING":
        return None
    limit = limit_seconds(fields.get("TimeLimit", ""))
    try:
        started = time.mktime(time.strptime(fields.get("StartTime", ""), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
    return None if limit is None else started + limit


def _tree(root: int) -> "list[int]":
    """``root`` and every live process below it (parent links in /proc)."""
    children = {}  # type: dict[int, list[int]]
    try:
        names = os.listdir("/proc")
    except OSError:
        return [root]
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [root], [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            found.append(pid)
            todo.append(pid)
    return found


#: launchers that catch every signal to pass it on to what they start: that one of them catches the chain's signal
#: says nothing of the work (the processes below them are looked at instead)
LAUNCHERS = ("srun", "mpirun", "mpiexec", "torchrun", "orterun", "prterun")


def takes_signal(root: int, signum: int) -> "bool | None":
    """Whether a process of the work (``root`` or below, launchers aside: :data:`LAUNCHERS`) catches ``signum`` (its
    bit in ``SigCgt``); None where /proc cannot tell (not Linux, or the processes are gone). Below ``srun`` the
    work may run on other nodes, out of sight: then None (the wrapper says the work "got" the signal)."""
    bit, seen = 1 << (signum - 1), False
    for pid in _tree(root):
        try:
            with open(f"/proc/{pid}/status") as fh:
                name, caught = "", 0
                for line in fh:
                    if line.startswith("Name:"):
                        name = line.split(None, 1)[1].strip() if len(line.split()) > 1 else ""
                    elif line.startswith("SigCgt:"):
                        caught = int(line.split()[1], 16)
                        break
                else:
                    continue
        except (OSError, ValueError, IndexError):
            continue
        if name in LAUNCHERS:
            continue
        seen = True
        if caught & bit:
            return True
    return False if seen else None


def arm_self_signal(delay: int, signum: int, target: int) -> None:
    """Send ``signum`` to ``target`` (the batch shell) ``delay`` seconds before the job's end time, as Slurm's
    ``--signal=B:`` would: for transports that cannot ask Slurm for it (slurmrestd 22.05 refuses ``B:``)."""
    import threading

    end = job_end_time(os.environ.get("SLURM_JOB_ID", ""))
    if end is None:
        say("the job's end time is unknown, or it is no longer running (scontrol show job): no signal before its limit")
        return
    at = end - delay

    def fire() -> None:
        time.sleep(max(0.0, at - _now()))
        with contextlib.suppress(OSError):
            os.kill(target, signum)

    threading.Thread(target=fire, daemon=True).start()
    say(f"SIG{signal.Signals(signum).name[3:]} will come at {_stamp(at)} ({delay} s before the time limit)")


def read_argv(argv: "list[str]") -> "tuple[str | None, str, list[str]]":
    """The wrapper's arguments, ``[--slurm-restarts=N] CONFIG [--] COMMAND...``: the restart count as given (None
    without the argument), the config (JSON) and the work's command."""
    given = None  # type: str | None
    if argv[:1] and argv[0].startswith(RESTARTS_ARG):
        given, argv = argv[0][len(RESTARTS_ARG) :], argv[1:]
    command = argv[2:] if argv[1:2] == ["--"] else argv[1:]
    return given, argv[0], command


class Segment:
    """This run of the job, one segment of the chain: it starts the work, watches it (the chain's signal, the
    grace after it) and, once the work has exited, ends the segment (:meth:`finish`): requeued, or the chain ends."""

    def __init__(self, config_json: str, given: "str | None") -> None:
        self.config = config = json.loads(config_json)
        self.given = given
        self.max_requeues = int(config["max_requeues"])
        self.grace = float(config["grace"])
        self.chain_signal = getattr(signal, "SIG" + config["signal"])
        self.checkpoint = fill(config["checkpoint"])
        self.job = job_key()
        self.records = Records(os.path.join(config["records"], f"chain-{self.job}.jsonl"))
        self.on_record, numbered = count_segments(self.records.read(), self.job)
        # Slurm's restart count caps the chain: the records (the work may have erased or filled them) may only lower
        # the requeues left, and number the segments no lower than Slurm's count does
        self.restarts = slurm_restarts(given)
        self.requeues, self.number = max(self.on_record, self.restarts), max(numbered, self.restarts + 1)
        # the containment shim passes every signal on to the whole job: pass it on here only without one
        self.contained = os.environ.get("GPUSCHED_CONTAINED") == os.environ.get("SLURM_JOB_ID", "none")
        self.seen = {}  # type: dict[str, float]
        self.child = None  # type: subprocess.Popen[bytes] | None
        self.stopped_by_us = False
        self.took = None  # type: bool | None  # whether the work catches the chain's signal, seen after it came
        self.mark_at_signal = None  # type: int | None
        self.looked = 0.0
        self.started = 0.0
        self.mark = 0
        self.base = {}  # type: dict[str, object]

    def begin(self) -> None:
        """Record and say the segment's start, and what the checkpoint is at it."""
        node = socket.gethostname()
        self.started = _now()
        self.mark = checkpoint_mark(self.checkpoint)
        self.base = {"v": RECORD_VERSION, "job": self.job, "segment": self.number}
        self.records.add(dict(self.base, event="start", at=self.started, node=node, restart=self.restarts))
        say(
            f"segment {self.number} of job {self.job} (at most {self.max_requeues + 1}) started on {node} at "
            f"{_stamp(self.started)}; checkpoint {self.checkpoint}"
        )
        note = restarts_note(self.restarts) if self.given is not None else ""  # (without the argument they are one)
        if note:
            say(note)

    def work_env(self) -> "dict[str, str]":
        """The work's environment: this one, and what the chain tells the work."""
        env = dict(os.environ)
        env.update(
            GPUSCHED_CHAIN_SEGMENT=str(self.number),
            GPUSCHED_CHAIN_MAX_REQUEUES=str(self.max_requeues),
            GPUSCHED_CHAIN_SIGNAL=self.config["signal"],
            GPUSCHED_CHAIN_CHECKPOINT=self.checkpoint,
        )
        return env

    def on_signal(self, signum: int, _frame: object) -> None:
        name = "chain" if signum == self.chain_signal else "term"
        if name == "chain" and "term" in self.seen:
            return  # SIGTERM came first (a cancel, a preemption): the job is ending, the chain's signal changes nothing
        self.seen.setdefault(name, _now())
        if self.child is not None and not self.contained:
            with contextlib.suppress(OSError):
                self.child.send_signal(signum)

    def start(self, command: "list[str]") -> "subprocess.Popen[bytes] | None":
        """Catch the chain's signal and SIGTERM, then start the work; None (the end recorded) if it cannot start."""
        env = self.work_env()
        signal.signal(self.chain_signal, self.on_signal)
        signal.signal(signal.SIGTERM, self.on_signal)
        if self.config.get("self_signal"):  # the batch shell: the containment shim, which passes it to the whole job
            arm_self_signal(
                int(self.config["self_signal"]), self.chain_signal, os.getppid() if self.contained else os.getpid()
            )
        try:
            self.child = subprocess.Popen(command, env=env)
        except OSError as exc:
            detail = f"cannot start: {exc}"
            self.records.add(dict(self.base, event="end", at=_now(), outcome="failed", detail=detail, exit=127))
            say(f"segment {self.number} cannot start {command[0]!r}: {exc}")
            return None
        return self.child

    def wait(self, child: "subprocess.Popen[bytes]") -> int:
        """Wait for the work to exit; once the chain's signal came, stop it when its grace has run out."""
        while True:
            try:
                return child.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
            # sticky: a work may take the signal late (still loading); looked at before the signal too, as a work
            # that takes it may be gone before the next look
            signalled = "chain" in self.seen
            self.look(child, signalled)
            if not signalled:
                continue
            if self.mark_at_signal is None:
                self.signal_came()
            if _now() - self.seen["chain"] > self.grace and not self.stopped_by_us:
                code = self.stop(child)
                if code is not None:
                    return code

    def look(self, child: "subprocess.Popen[bytes]", signalled: bool) -> None:
        """Whether the work takes the chain's signal (:func:`takes_signal`), now and then: before the signal a look
        every 30 s (a walk of /proc), after it every second, until the work has exited."""
        if self.took is True:
            return
        if _now() - self.looked >= (1 if signalled else 30) or (signalled and self.mark_at_signal is None):
            self.looked = _now()
            now_takes = takes_signal(child.pid, self.chain_signal)
            self.took = self.took if now_takes is None else now_takes

    def signal_came(self) -> None:
        """The first look after the signal: what the work has, and how long it may take."""
        self.mark_at_signal = checkpoint_mark(self.checkpoint)
        if self.config.get("grace_to_end"):
            end_time = job_end_time(os.environ.get("SLURM_JOB_ID", ""), timeout=10)
            if end_time is not None:
                self.grace = max(float(self.config["grace"]), end_time - GRACE_MARGIN - self.seen["chain"])
        say(
            "SIG{} came {:.0f} s after the segment started; the work has {:.0f} s to save and exit".format(
                self.config["signal"], self.seen["chain"] - self.started, self.grace
            )
        )

    def stop(self, child: "subprocess.Popen[bytes]") -> "int | None":
        """Stop the work, past its grace: SIGTERM, 5 s, then SIGKILL; its exit status, None if not exited yet."""
        took = self.took
        how = "took SIG{} but" if took else "ignored SIG{} and" if took is False else "got SIG{} but"
        say(
            "the work {} had not exited {:.0f} s after it; stopping it".format(
                how.format(self.config["signal"]), self.grace
            )
        )
        self.stopped_by_us = True
        child.terminate()
        try:
            return child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            child.kill()
        return None

    def finish(self, code: int) -> int:
        """The work exited with ``code``: record and say how the segment ends; the wrapper's exit status."""
        ended = _now()
        if code == -self.chain_signal:  # its default action ended the work: it did not take the signal
            self.took = False
        newest = checkpoint_mark(self.checkpoint)
        progressed = newest > self.mark
        end = dict(self.base, event="end", at=ended, exit=code)
        if "chain" in self.seen:
            end["signalled"] = self.seen["chain"]
        if "chain" not in self.seen or (code == 0 and not progressed):
            return self.end_as_it_did(end, ended, code)
        return self.end_signalled(end, ended, code, newest, progressed)

    def end_as_it_did(self, end: "dict[str, object]", ended: float, code: int) -> int:
        """No chain signal (or nothing new to continue from after it): the job ends as the work did."""
        if "term" in self.seen and "chain" not in self.seen:
            outcome, detail = "stopped", "SIGTERM (cancelled, preempted or at the time limit): not requeued"
        elif code == 0:
            outcome, detail = "completed", "the work finished"
        else:
            outcome, detail = "failed", f"the work exited with {code}"
        self.records.add(dict(end, outcome=outcome, detail=detail))
        say(f"segment {self.number} of job {self.job} ended at {_stamp(ended)}: {detail}")
        return code if code >= 0 else 128 - code

    def end_signalled(self, end: "dict[str, object]", ended: float, code: int, newest: int, progressed: bool) -> int:
        """The chain's signal came: requeue the job, or end the chain (no progress, out of requeues)."""
        after = self.seen["chain"] - self.started  # how long the segment had worked when the signal came
        early = after < float(self.config.get("advised_work", 0))
        stop_note = self.stop_note(newest)
        soon = "SIG{} came {:.0f} s after the segment started".format(self.config["signal"], after)
        requeues, max_requeues = self.requeues, self.max_requeues
        if not progressed and self.number == 1 and early and self.took and requeues < max_requeues:
            # the work took the signal, but had had no time to save anything: not a hang. One more segment (Slurm's
            # signal comes at its 30-second check, so the next one may have longer); a second one without a
            # checkpoint ends the chain below
            detail = (
                f"no checkpoint yet: {soon}, before the work could save one (it took the signal); requeued to try once "
                f"more (the first segment's allowance) ({requeues + 1} of at most {max_requeues}){stop_note}"
            )
            return requeue(
                self.records, dict(end, outcome="requeued", detail=detail), self.job, self.number, ended, code
            )
        if not progressed:
            outcome, detail = "no-progress", self.no_progress(early, soon) + stop_note
        elif requeues >= max_requeues:
            outcome, detail = "out-of-requeues", self.out_of_requeues() + stop_note
        else:
            when = "SIG{} at {}".format(self.config["signal"], _stamp(self.seen["chain"]))
            detail = (
                f"time limit near ({when}); checkpoint saved; requeued ({requeues + 1} of at most {max_requeues})"
                + stop_note
            )
            return requeue(
                self.records, dict(end, outcome="requeued", detail=detail), self.job, self.number, ended, code
            )
        self.records.add(dict(end, outcome=outcome, detail=detail))
        say(f"segment {self.number} of job {self.job} ended at {_stamp(ended)}: the chain ends, {detail}")
        return code if code not in (0, None) and code > 0 else 1

    def stop_note(self, newest: int) -> str:
        """Why the wrapper stopped the work, if it did."""
        if not self.stopped_by_us:
            return ""
        if self.took and self.mark_at_signal is not None and newest > self.mark_at_signal:
            return f" (it took the signal and was still saving {self.grace:.0f} s after it: stopped)"
        if self.took:
            return f" (it took the signal but had not exited {self.grace:.0f} s after it: stopped)"
        if self.took is False:
            return " (it ignored the signal and was stopped)"
        return f" (it had not exited {self.grace:.0f} s after the signal: stopped)"  # /proc could not tell

    def no_progress(self, early: bool, soon: str) -> str:
        detail = (
            f"no progress: no newer checkpoint at {self.checkpoint} since the segment started ({_stamp(self.started)})"
        )
        if early:
            detail += (
                f"; {soon}, sooner than a segment needs ({self.config.get('advised_work')} s) to start and checkpoint: "
                "give the job a longer time_limit (a segment works time_limit - signal_delay - up to 30 s before "
                "the signal; docs/slurm.md)"
            )
        return detail

    def out_of_requeues(self) -> str:
        detail = (
            f"out of requeues: the time limit came after {self.requeues} requeue(s) (max_requeues={self.max_requeues})"
        )
        if self.restarts > self.on_record:
            detail += (
                f" (Slurm's restart count: a requeue after a preemption or a node failure counts too; "
                f"{self.on_record} on the chain's record)"
            )
        return detail


def main(argv: "list[str]") -> int:
    given, config, command = read_argv(argv)
    segment = Segment(config, given)
    segment.begin()
    child = segment.start(command)
    if child is None:
        return 127
    return segment.finish(segment.wait(child))


def requeue(records: Records, end: "dict[str, object]", job: str, segment: int, ended: float, code: int) -> int:
    """Record the segment's "requeued" end, then ask Slurm to requeue the job; a refusal overwrites the record and
    ends the chain."""
    # recorded before asking: Slurm stops this run as it requeues the job, and may kill this wrapper (SIGKILL
    # KillWait seconds after SIGTERM) before a record written afterwards; a failed requeue overwrites it below
    records.add(end)
    say(f"segment {segment} of job {job} ended at {_stamp(ended)}: {end['detail']}")
    result = subprocess.run(  # an array task by its own key: the array's id would requeue every task
        ["scontrol", "requeue", job],
        capture_output=True,
        text=True,
    )
    if result.returncode == 0:
        return 0
    detail = f"scontrol requeue failed: {result.stderr.strip() or result.returncode}"
    records.add(dict(end, outcome="requeue-failed", detail=detail))
    say(f"segment {segment} of job {job} ended at {_stamp(ended)}: the chain ends, {detail}")
    return code if code not in (0, None) and code > 0 else 1


def shim_source() -> str:
    """This file's code without its docstring, for a job script to run with ``python3 -I -S -c``."""
    from airflow_provider_gpusched.core.contain import carried_source

    return carried_source(__file__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
