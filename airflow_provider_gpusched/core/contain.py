"""The containment shim that local GPU children and Slurm jobs run under: no process the work starts outlives it.

``python -I -S contain.py GRACE FDS -- argv...`` makes itself a *child subreaper* (Linux ``prctl``), starts
``argv`` and waits. A process the work starts and orphans — ``cmd &``, ``setsid``, ``env -i``/``env -u`` (no lease
id left in its environment), a double fork, a daemon that clears its environment — is re-parented to this shim,
not to init, so it stays its descendant whatever it does to its session or environment. When the work exits, the
shim stops every descendant still there (SIGTERM, unless it passed one on already: never a second; then SIGKILL
after ``GRACE`` seconds), says so on its output
(the task log), and exits as the work did (the same code, or killed by the same signal). SIGTERM, SIGINT, SIGHUP, SIGQUIT
and SIGUSR1/2 sent to the shim are passed to every descendant.

Standalone on purpose (the standard library only, no import of the package, Python 3.6 syntax): it starts in about 20
ms with ``-I -S``, and a Slurm job script carries its source (:func:`shim_source`) to compute nodes that
may not have this package. Where ``prctl`` is missing (not Linux), it still runs the work and stops what it can find by ancestry;
the launcher's search by session and lease id (``launch.leftover_processes``) stays the net behind it.
"""

import contextlib
import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
#: signals the shim passes to every descendant rather than acting on
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def descendants(root: int) -> "list[int]":  # quoted: never evaluated, so Python 3.6 runs it
    """Every live process below ``root`` (read from /proc: parent links)."""
    children = {}  # type: dict[int, list[int]]
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields and fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            found.append(pid)
            todo.append(pid)
    return found


def _signal(pids: "list[int]", sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _reap() -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: "list[str]") -> int:
    grace = float(argv[0])
    fds = tuple(int(fd) for fd in argv[1].split(",") if fd)
    command = argv[3:] if argv[2:3] == ["--"] else argv[2:]
    contained = become_subreaper()
    me = os.getpid()
    termed = set()  # type: set[int]  # passed a SIGTERM already: not sent another when the work ends

    def pass_on(signum: int, _frame: object) -> None:
        family = descendants(me)
        if signum == signal.SIGTERM:
            termed.update(family)
        _signal(family, signum)

    for sig in PASSED_ON:
        signal.signal(sig, pass_on)
    try:
        pid = os.fork()
    except OSError as exc:
        print(f"[gpusched] cannot start {command[0]!r}: {exc}", flush=True)
        return 127
    if pid == 0:
        for sig in PASSED_ON:
            signal.signal(sig, signal.SIG_DFL)
        for fd in fds:
            os.set_inheritable(fd, True)
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            os.write(2, f"[gpusched] cannot run {command[0]!r}: {exc}\n".encode())
            os._exit(127)
    while True:  # every orphan is re-parented here: reap them all, note the work's own status
        try:
            done, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            status = 0
            break
        if done == pid:
            break
    try:  # orphans are re-parented to this shim: with no child left, nothing is left (no /proc scan)
        others = os.waitpid(-1, os.WNOHANG)[0] >= 0
    except ChildProcessError:
        others = False
    left = descendants(me) if others or not contained else []
    if left:
        _signal([pid for pid in left if pid not in termed], signal.SIGTERM)  # one SIGTERM each, never a second
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            _reap()
            if not descendants(me):
                break
            time.sleep(0.05)
        late = descendants(me)
        _signal(late, signal.SIGKILL)
        while descendants(me):
            _reap()
            time.sleep(0.01)
        _reap()
        how = "contained: re-parented to the task's shim" if contained else "found by ancestry"
        print(
            f"[gpusched] the work left {len(left)} process(es) running after it ended "
            f"({', '.join(map(str, left[:10]))}; {how}); stopped them before its GPUs are given out again",
            flush=True,
        )
    if os.WIFSIGNALED(status):
        killed_by = os.WTERMSIG(status)
        if killed_by not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(killed_by, signal.SIG_DFL)
        os.kill(me, killed_by)
        return 128 + killed_by
    return os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8


def shim_source() -> str:
    """This file's code without its docstring, for a job script to run with ``python3 -I -S -c``."""
    return carried_source(__file__)


def carried_source(path: str) -> str:
    """A standalone module's code (``path``: its docstring first, ``def shim_source`` after the code a job runs),
    without its docstring, blank lines and comment lines, ending in a call of its ``main``."""
    with open(path) as fh:
        text = fh.read()
    code = text.split('"""', 2)[2].split("\ndef shim_source", 1)[0]
    lines = [line for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return "\n".join(lines) + "\nsys.exit(main(sys.argv[1:]))\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
