"""What the tests start outside their own processes (the Slurm test clusters, the stack and the fleet, sshd, the MLflow
server), recorded so that nothing is left running after the suite, however it ends (issue 76: Ctrl-C after 45
minutes left four Slurm clusters, the stack tier's scheduler, dag-processor and triggerer and the MLflow server
running; a developer's machine fills up with them, and the next run may collide with them).

Each fixture that starts a service records it here (:func:`register`): its process group to signal, or the command
that stops it, and its owner: the process that runs the suite (``scripts/test.sh``'s shell, ``$GPUSCHED_TEST_OWNER``;
else pytest's main process). Its teardown stops it and removes the record (:func:`stopped`). Then:

* ``scripts/test.sh`` stops what its run left when it exits, however it exits (a failure, Ctrl-C, a ``kill``):
  ``python -m tests.services reap --owner PID`` from its EXIT trap; pytest's main process does the same for its own
  at the end of its session (``pytest`` run by hand);
* a run killed outright (``kill -9``, a CI job's timeout) runs no trap: ``scripts/test.sh`` stops what any earlier
  run left before it starts (``python -m tests.services reap``: every record whose owner is no longer running; a run
  that is still going, from another shell, keeps its services).

Records are files in ``.test-services/`` of the checkout (private: 0700), one per service.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DIR = REPO / ".test-services"
OWNER_ENV = "GPUSCHED_TEST_OWNER"


def owner() -> int:
    """The process that runs the suite: scripts/test.sh's shell, else pytest's main process."""
    value = os.environ.get(OWNER_ENV, "")
    if value.isdigit():
        return int(value)
    return os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()


#: what a stop command needs of the environment it was recorded with (nothing else is kept: no secret of a CI job)
KEPT_ENV = ("PATH", "HOME", "LANG", "USER")
KEPT_PREFIXES = ("GPUSCHED_", "SLURM")


def boot_id() -> str:
    """This boot of the machine: a record of another boot names processes long gone (their pids may be anyone's)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat's field 22): a pid reused by another
    process has another start. None when there is no such process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def register(
    name: str, *, pgid: int | None = None, stop: Sequence[str] = (), env: dict[str, str] | None = None
) -> Path:
    """Record a service the tests started: its process group ``pgid`` (its leader's start too: signalled, SIGTERM
    then SIGKILL, only while that same leader runs) and/or the command ``stop`` that stops it (run with what it
    needs of ``env``, else of this environment). Returns the record's path."""
    DIR.mkdir(mode=0o700, exist_ok=True)
    os.chmod(DIR, 0o700)  # (made by an older version, or by hand: the records name what root will signal)
    path = DIR / f"{name}-{uuid.uuid4().hex[:8]}.json"
    source = env if env is not None else dict(os.environ)
    kept = {k: v for k, v in source.items() if k in KEPT_ENV or k.startswith(KEPT_PREFIXES)}
    record = {
        "name": name,
        "owner": owner(),
        "owner_started": started(owner()),
        "boot": boot_id(),
        "pgid": pgid,
        "leader_started": started(pgid) if pgid else None,
        "stop": list(stop),
        "env": kept,
        "at": time.time(),
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(record, out)
    return path


def stopped(path: Path) -> None:
    """The service of record ``path`` was stopped by its fixture: forget it."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def records() -> list[tuple[Path, dict]]:
    out = []
    for path in sorted(DIR.glob("*.json")) if DIR.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            record = None
        if isinstance(record, dict) and isinstance(record.get("name"), str):
            out.append((path, record))
        else:
            stopped(path)  # (half written by a process killed while writing it: nothing to stop by it)
    return out


def alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (an exited child not reaped yet) runs nothing
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop(record: dict, grace: float = 10.0) -> None:
    """Stop one service: its stop command, then its process group (SIGTERM, SIGKILL after ``grace``) while its
    leader is the process recorded. Nothing of a record made before this boot runs (its pids are anyone's now)."""
    if record.get("boot") != boot_id():
        return
    if record.get("stop"):
        env = record.get("env") if isinstance(record.get("env"), dict) else {}
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(record["stop"], env=env, capture_output=True, timeout=300, cwd=REPO)
    pgid = record.get("pgid")
    leader = record.get("leader_started")
    if isinstance(pgid, int) and pgid > 1 and pgid != os.getpgid(0) and leader is not None and started(pgid) == leader:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _group_alive(pgid):
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def reap(of_owner: int | None = None) -> list[str]:
    """Stop the services of the records of ``of_owner`` (None: of every owner no longer running); returns what was
    stopped, a line each."""
    said = []
    for path, record in records():
        if of_owner is not None:
            mine = record.get("owner") == of_owner
        else:  # an owner gone, or its pid reused by another process since (another start), or of another boot
            holder = record.get("owner")
            mine = (
                record.get("boot") != boot_id()
                or not alive(holder)
                or (isinstance(holder, int) and started(holder) != record.get("owner_started"))
            )
        if not mine:
            continue
        stop(record)
        stopped(path)
        said.append(f"{record['name']} (started by process {record.get('owner')})")
    return said


def main(argv: Sequence[str]) -> int:
    """``reap``: every record whose owner is gone; ``reap --owner PID``: those of PID."""
    args = list(argv)
    if not args or args[0] != "reap" or (len(args) not in (1, 3)) or (len(args) == 3 and args[1] != "--owner"):
        print("usage: python -m tests.services reap [--owner PID]", file=sys.stderr)
        return 2
    of_owner = int(args[2]) if len(args) == 3 else None
    for line in reap(of_owner):
        print(f"[gpusched] stopped what the tests left running: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
