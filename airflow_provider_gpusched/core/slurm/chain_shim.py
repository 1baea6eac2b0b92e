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
    requeues left (never raise them: main caps on :func:`slurm_restarts`)."""

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


def job_end_time(job_id: str, timeout: float = 30) -> "float | None":
    """This run's end time (its start plus the time limit), from ``scontrol show job``; None if unknown."""
    try:
        out = subprocess.run(
            ["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=timeout
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for word in out.split():
        if word.startswith("EndTime="):
            try:
                return time.mktime(time.strptime(word[len("EndTime=") :], "%Y-%m-%dT%H:%M:%S"))
            except ValueError:
                return None
    return None


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
        say("the job's end time is unknown (scontrol show job): no signal before the time limit")
        return
    at = end - delay

    def fire() -> None:
        time.sleep(max(0.0, at - _now()))
        with contextlib.suppress(OSError):
            os.kill(target, signum)

    threading.Thread(target=fire, daemon=True).start()
    say(f"SIG{signal.Signals(signum).name[3:]} will come at {_stamp(at)} ({delay} s before the time limit)")


def main(argv: "list[str]") -> int:
    given = None  # type: str | None
    if argv[:1] and argv[0].startswith(RESTARTS_ARG):
        given, argv = argv[0][len(RESTARTS_ARG) :], argv[1:]
    config = json.loads(argv[0])
    command = argv[2:] if argv[1:2] == ["--"] else argv[1:]
    max_requeues = int(config["max_requeues"])
    grace = float(config["grace"])
    chain_signal = getattr(signal, "SIG" + config["signal"])
    checkpoint = fill(config["checkpoint"])
    job = job_key()
    records = Records(os.path.join(config["records"], f"chain-{job}.jsonl"))
    on_record, numbered = count_segments(records.read(), job)
    # Slurm's restart count caps the chain: the records (the work may have erased or filled them) may only lower
    # the requeues left, and number the segments no lower than Slurm's count does
    restarts = slurm_restarts(given)
    requeues, segment = max(on_record, restarts), max(numbered, restarts + 1)
    node = socket.gethostname()
    started = _now()
    mark = checkpoint_mark(checkpoint)
    base = {"v": RECORD_VERSION, "job": job, "segment": segment}
    records.add(dict(base, event="start", at=started, node=node, restart=restarts))
    say(
        f"segment {segment} of job {job} (at most {max_requeues + 1}) started on {node} at {_stamp(started)}; "
        f"checkpoint {checkpoint}"
    )
    note = restarts_note(restarts) if given is not None else ""  # (without the argument they are one)
    if note:
        say(note)
    env = dict(os.environ)
    env.update(
        GPUSCHED_CHAIN_SEGMENT=str(segment),
        GPUSCHED_CHAIN_MAX_REQUEUES=str(max_requeues),
        GPUSCHED_CHAIN_SIGNAL=config["signal"],
        GPUSCHED_CHAIN_CHECKPOINT=checkpoint,
    )
    # the containment shim passes every signal on to the whole job: pass it on here only without one
    contained = os.environ.get("GPUSCHED_CONTAINED") == os.environ.get("SLURM_JOB_ID", "none")
    seen = {}  # type: dict[str, float]
    child = None  # type: subprocess.Popen[bytes] | None

    def on_signal(signum: int, _frame: object) -> None:
        name = "chain" if signum == chain_signal else "term"
        seen.setdefault(name, _now())
        if child is not None and not contained:
            with contextlib.suppress(OSError):
                child.send_signal(signum)

    signal.signal(chain_signal, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    if config.get("self_signal"):  # the batch shell: the containment shim, which passes it to the whole job
        arm_self_signal(int(config["self_signal"]), chain_signal, os.getppid() if contained else os.getpid())
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:
        records.add(dict(base, event="end", at=_now(), outcome="failed", detail=f"cannot start: {exc}", exit=127))
        say(f"segment {segment} cannot start {command[0]!r}: {exc}")
        return 127
    stopped_by_us = False
    took = None  # type: bool | None  # whether the work catches the chain's signal, seen after it came
    mark_at_signal = None  # type: int | None
    looked = 0.0
    while True:
        try:
            code = child.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass
        # sticky: a work may take the signal late (still loading); looked at before the signal too, as a work that
        # takes it may be gone before the next look
        signalled = "chain" in seen
        # (before the signal a look every 30 s: a walk of /proc; after it every second, until the work has exited)
        if took is not True and (_now() - looked >= (1 if signalled else 30) or (signalled and mark_at_signal is None)):
            looked = _now()
            now_takes = takes_signal(child.pid, chain_signal)
            took = took if now_takes is None else now_takes
        if not signalled:
            continue
        if mark_at_signal is None:  # first look after the signal: what the work has, and how long it may take
            mark_at_signal = checkpoint_mark(checkpoint)
            if config.get("grace_to_end"):
                end_time = job_end_time(os.environ.get("SLURM_JOB_ID", ""), timeout=10)
                if end_time is not None:
                    grace = max(float(config["grace"]), end_time - GRACE_MARGIN - seen["chain"])
            say(
                "SIG{} came {:.0f} s after the segment started; the work has {:.0f} s to save and exit".format(
                    config["signal"], seen["chain"] - started, grace
                )
            )
        if _now() - seen["chain"] > grace and not stopped_by_us:
            how = "took SIG{} but" if took else "ignored SIG{} and" if took is False else "got SIG{} but"
            say("the work {} had not exited {:.0f} s after it; stopping it".format(how.format(config["signal"]), grace))
            stopped_by_us = True
            child.terminate()
            try:
                code = child.wait(timeout=5)
                break
            except subprocess.TimeoutExpired:
                child.kill()
    ended = _now()
    if code == -chain_signal:  # its default action ended the work: it did not take the signal
        took = False
    newest = checkpoint_mark(checkpoint)
    progressed = newest > mark
    end = dict(base, event="end", at=ended, exit=code)
    if "chain" in seen:
        end["signalled"] = seen["chain"]
    when = "SIG{} at {}".format(config["signal"], _stamp(seen["chain"])) if "chain" in seen else ""
    if "chain" not in seen or (code == 0 and not progressed):
        if "term" in seen and "chain" not in seen:
            outcome, detail = "stopped", "SIGTERM (cancelled, preempted or at the time limit): not requeued"
        elif code == 0:
            outcome, detail = "completed", "the work finished"
        else:
            outcome, detail = "failed", f"the work exited with {code}"
        records.add(dict(end, outcome=outcome, detail=detail))
        say(f"segment {segment} of job {job} ended at {_stamp(ended)}: {detail}")
        return code if code >= 0 else 128 - code
    after = seen["chain"] - started  # how long the segment had worked when the signal came
    early = after < float(config.get("advised_work", 0))
    stop_note = ""  # why the wrapper stopped the work, if it did
    if stopped_by_us and took and mark_at_signal is not None and newest > mark_at_signal:
        stop_note = f" (it took the signal and was still saving {grace:.0f} s after it: stopped)"
    elif stopped_by_us and took:
        stop_note = f" (it took the signal but had not exited {grace:.0f} s after it: stopped)"
    elif stopped_by_us and took is False:
        stop_note = " (it ignored the signal and was stopped)"
    elif stopped_by_us:  # /proc could not tell
        stop_note = f" (it had not exited {grace:.0f} s after the signal: stopped)"
    soon = "SIG{} came {:.0f} s after the segment started".format(config["signal"], after)
    allowance = not progressed and segment == 1 and early and took and requeues < max_requeues
    if allowance:
        # the work took the signal, but had had no time to save anything: not a hang. One more segment (Slurm's
        # signal comes at its 30-second check, so the next one may have longer); a second one without a
        # checkpoint ends the chain below
        detail = (
            f"no checkpoint yet: {soon}, before the work could save one (it took the signal); requeued to try once "
            f"more (the first segment's allowance) ({requeues + 1} of at most {max_requeues}){stop_note}"
        )
        return requeue(records, dict(end, outcome="requeued", detail=detail), job, segment, ended, code)
    if not progressed:
        detail = f"no progress: no newer checkpoint at {checkpoint} since the segment started ({_stamp(started)})"
        if early:
            detail += (
                f"; {soon}, sooner than a segment needs ({config.get('advised_work')} s) to start and checkpoint: "
                "give the job a longer time_limit (a segment works time_limit - signal_delay - up to 30 s before "
                "the signal; docs/slurm.md)"
            )
        detail += stop_note
        outcome = "no-progress"
    elif requeues >= max_requeues:
        detail = (
            f"out of requeues: the time limit came after {requeues} requeue(s) (max_requeues={max_requeues})"
            + (
                f" (Slurm's restart count: a requeue after a preemption or a node failure counts too; "
                f"{on_record} on the chain's record)"
                if restarts > on_record
                else ""
            )
            + stop_note
        )
        outcome = "out-of-requeues"
    else:
        detail = (
            f"time limit near ({when}); checkpoint saved; requeued ({requeues + 1} of at most {max_requeues})"
            + stop_note
        )
        return requeue(records, dict(end, outcome="requeued", detail=detail), job, segment, ended, code)
    records.add(dict(end, outcome=outcome, detail=detail))
    say(f"segment {segment} of job {job} ended at {_stamp(ended)}: the chain ends, {detail}")
    return code if code not in (0, None) and code > 0 else 1


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
