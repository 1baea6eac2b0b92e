"""The time-limit chain's wrapper, run in a Slurm job around the work: ``python3 -I -S -c SOURCE CONFIG -- argv...``.

Slurm signals the job a while before its time limit (``--signal=B:USR1@90``); where the transport cannot ask for
that (slurmrestd 22.05 refuses ``B:``), the config's ``self_signal`` has this wrapper send the signal to the batch
shell itself, ``self_signal`` seconds before the job's end time. The work (its child) gets the same signal from the
containment shim (core/contain.py), saves a checkpoint and exits. Then this wrapper decides:

* the checkpoint is newer than at the segment's start and requeues are left: ``scontrol requeue`` the job, which
  Slurm starts again (the same job id) as the chain's next segment;
* no newer checkpoint: the work made no progress (hung, or it does not checkpoint): the chain ends, failed;
* no requeue left: the chain ends, failed;
* the work finished before the signal (or after it, with nothing new to continue from): the job ends as it did.

A work that ignores the signal is stopped ``grace`` seconds after it (SIGTERM, then SIGKILL), before Slurm's own
time limit, and judged the same way. A SIGTERM without the chain's signal first (``scancel``, a preemption) is
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
import subprocess
import sys
import time

RECORD_VERSION = 1


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


class Records:
    """The chain's record file: one JSON object a line, appended."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> "list[dict[str, object]]":
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return []
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(1 << 20)
        out = []
        for line in data.decode(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                out.append(record)
        return out

    def add(self, record: "dict[str, object]") -> None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
        fd = os.open(self.path, flags, 0o600)
        try:
            os.write(fd, (json.dumps(record, sort_keys=True) + "\n").encode())
        finally:
            os.close(fd)


def count_segments(records: "list[dict[str, object]]", job: str) -> "tuple[int, int]":
    """The requeues the chain made so far (segments whose last end record says "requeued") and this segment's
    number (one more than any segment on record, ended or not: a segment whose wrapper was killed before it wrote
    its end still counts)."""
    numbers = []  # type: list[int]
    last_end = {}  # type: dict[int, object]
    for record in records:
        number = record.get("segment")
        if record.get("job") != job or not isinstance(number, int):
            continue
        numbers.append(number)
        if record.get("event") == "end":
            last_end[number] = record.get("outcome")
    return sum(1 for outcome in last_end.values() if outcome == "requeued"), max(numbers, default=0) + 1


def say(text: str) -> None:
    print("[gpusched chain] " + text, flush=True)


def job_end_time(job_id: str) -> "float | None":
    """This run's end time (its start plus the time limit), from ``scontrol show job``; None if unknown."""
    try:
        out = subprocess.run(
            ["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=30
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
    config = json.loads(argv[0])
    command = argv[2:] if argv[1:2] == ["--"] else argv[1:]
    max_requeues = int(config["max_requeues"])
    grace = float(config["grace"])
    chain_signal = getattr(signal, "SIG" + config["signal"])
    checkpoint = fill(config["checkpoint"])
    job = job_key()
    records = Records(os.path.join(config["records"], f"chain-{job}.jsonl"))
    requeues, segment = count_segments(records.read(), job)
    node = socket.gethostname()
    started = _now()
    mark = checkpoint_mark(checkpoint)
    base = {"v": RECORD_VERSION, "job": job, "segment": segment}
    records.add(dict(base, event="start", at=started, node=node, restart=int(os.environ.get("SLURM_RESTART_COUNT", 0))))
    say(
        f"segment {segment} of job {job} (at most {max_requeues + 1}) started on {node} at {_stamp(started)}; "
        f"checkpoint {checkpoint}"
    )
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
    while True:
        try:
            code = child.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass
        if "chain" in seen and _now() - seen["chain"] > grace and not stopped_by_us:
            say("the work did not end within {:.0f} s of SIG{}; stopping it".format(grace, config["signal"]))
            stopped_by_us = True
            child.terminate()
            try:
                code = child.wait(timeout=5)
                break
            except subprocess.TimeoutExpired:
                child.kill()
    ended = _now()
    progressed = checkpoint_mark(checkpoint) > mark
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
    ignored = " (it ignored the signal and was stopped)" if stopped_by_us else ""
    if not progressed:
        detail = (
            f"no progress: no newer checkpoint at {checkpoint} since the segment started ({_stamp(started)}){ignored}"
        )
        outcome = "no-progress"
    elif requeues >= max_requeues:
        detail = (
            f"out of requeues: the time limit came after {requeues} requeue(s) (max_requeues={max_requeues}){ignored}"
        )
        outcome = "out-of-requeues"
    else:
        # recorded before asking: Slurm stops this run as it requeues the job, and may kill this wrapper (SIGKILL
        # KillWait seconds after SIGTERM) before a record written afterwards; a failed requeue overwrites it below
        detail = (
            f"time limit near ({when}); checkpoint saved; requeued ({requeues + 1} of at most {max_requeues}){ignored}"
        )
        records.add(dict(end, outcome="requeued", detail=detail))
        say(f"segment {segment} of job {job} ended at {_stamp(ended)}: {detail}")
        result = subprocess.run(  # an array task by its own key: the array's id would requeue every task
            ["scontrol", "requeue", job],
            capture_output=True,
            text=True,
        )
        if result.returncode == 0:
            return 0
        outcome = "requeue-failed"
        detail = f"scontrol requeue failed: {result.stderr.strip() or result.returncode}"
    records.add(dict(end, outcome=outcome, detail=detail))
    say(f"segment {segment} of job {job} ended at {_stamp(ended)}: the chain ends, {detail}")
    return code if code not in (0, None) and code > 0 else 1


def shim_source() -> str:
    """This file's code without its docstring, for a job script to run with ``python3 -I -S -c``."""
    from airflow_provider_gpusched.core.contain import carried_source

    return carried_source(__file__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
