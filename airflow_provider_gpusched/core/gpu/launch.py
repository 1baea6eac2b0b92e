"""Starting a GPU child process and stopping all of it.

The child runs in its own process group (``start_new_session``) with ``CUDA_VISIBLE_DEVICES`` set to its
lease's GPUs, a working directory, and its output (stdout and stderr together) written to a log file and
passed line by line to a callback (the Airflow task log). Stopping sends one SIGTERM to every process of the
work (through the shim), waits ``grace`` seconds, then SIGKILLs the group and every descendant: no orphan keeps
GPU memory.

The child runs under a containment shim (``contain.py``, a child subreaper): whatever the work starts stays the
shim's descendant even if it leaves the session and clears its environment (``setsid env -i``, a double fork, a
daemon), and the shim stops it when the work ends. Behind it, a net for a shim that was killed itself: the
processes of the child's session and those whose environment carries the lease id (``GPUSCHED_LEASE_ID``) are
stopped the same way (:meth:`GPUChild.stop_leftovers`) before the lease is released.
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_provider_gpusched.core.gpu.lease_store import Lease, process_alive

#: the containment shim every child runs under (a standalone script: ``python -I -S`` starts it in milliseconds)
CONTAIN_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "contain.py")
#: the variable that marks every process of a lease (inherited by whatever the child starts)
LEASE_ENV = "GPUSCHED_LEASE_ID"

#: Framework settings that make packing several processes on one GPU work (each only where unset).
SHARED_GPU_ENV = {
    "XLA_PYTHON_CLIENT_PREALLOCATE": "false",  # JAX would take 75% of the GPU at start
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",  # TensorFlow would take all of it
}


def gpu_environment(
    lease: Lease,
    gpu_totals: Mapping[int, int],
    base: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA numbers GPUs like NVML
    env["CUDA_VISIBLE_DEVICES"] = lease.cuda_visible_devices
    env[LEASE_ENV] = lease.lease_id
    env["GPUSCHED_GPU_UUIDS"] = ",".join(lease.uuids)
    if lease.simulated:
        env["GPUSCHED_GPUS_SIMULATED"] = "1"
    if lease.cpus:  # the reserved CPUs (the child is pinned to them), and as many threads for OpenMP/BLAS
        env["GPUSCHED_CPUS"] = ",".join(map(str, lease.cpus))
        env.setdefault("OMP_NUM_THREADS", str(len(lease.cpus)))
    if not lease.whole and lease.memory:
        per_gpu = next(iter(lease.memory.values()))
        env["GPUSCHED_GPU_MEMORY_BYTES"] = str(per_gpu)
        total = min(gpu_totals.get(i, per_gpu) for i in lease.gpus)
        # for torch.cuda.set_per_process_memory_fraction(float(os.environ["GPUSCHED_GPU_MEMORY_FRACTION"]))
        env["GPUSCHED_GPU_MEMORY_FRACTION"] = f"{min(1.0, per_gpu / total):.4f}"
        for key, value in SHARED_GPU_ENV.items():
            env.setdefault(key, value)
    return env


class GPUChild:
    """One running child. ``argv`` is run as is; a shell command needs ``shell=True`` said explicitly."""

    def __init__(
        self,
        argv: Sequence[str] | str,
        *,
        env: Mapping[str, str],
        cwd: str | None,
        log_path: str,
        lease: Lease | None = None,
        shell: bool = False,
        on_line: Callable[[str], None] | None = None,
        tail_lines: int = 200,
        extra_fds: Sequence[int] = (),
        grace: float = 10.0,
    ) -> None:
        if shell:
            if not isinstance(argv, str):
                raise TypeError("shell=True takes one command string")
            argv = ["/bin/bash", "-c", argv]
        elif isinstance(argv, str):
            raise TypeError("a command string needs shell=True; give an argv list to run a program directly")
        self.argv = [str(a) for a in argv]
        self.env = dict(env)
        self.cwd = cwd
        self.log_path = log_path
        self.lease = lease
        self.on_line = on_line
        self.extra_fds = tuple(extra_fds)  # kept open in the child (a two-stage task's channel)
        self.grace = grace  # how long the shim waits for what the work left after it ended
        self.tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self.proc: subprocess.Popen[Any] | None = None
        self._reader: threading.Thread | None = None
        self.started_at = 0.0
        self.stopped_by_us = False
        self._pidfd: int | None = None

    def start(self) -> GPUChild:
        os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
        if self.cwd:
            os.makedirs(self.cwd, exist_ok=True)
        pass_fds = ((self.lease.fd,) if self.lease is not None and self.lease.fd is not None else ()) + self.extra_fds
        cpus = list(self.lease.cpus) if self.lease is not None and self.lease.cpus else None
        self.started_at = time.monotonic()
        # pinned to the lease's CPUs before it runs anything (one system call between fork and exec): what it
        # starts inherits them
        shim = [sys.executable, "-I", "-S", CONTAIN_SCRIPT, str(self.grace), ",".join(map(str, pass_fds)), "--"]
        self.proc = subprocess.Popen(
            shim + self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
            pass_fds=pass_fds,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        self._reader = threading.Thread(target=self._read, name=f"gpu-child-{self.proc.pid}", daemon=True)
        self._reader.start()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with open(self.log_path, "ab") as log:
            for raw in iter(self.proc.stdout.readline, b""):
                log.write(raw)
                log.flush()
                line = raw.decode(errors="replace").rstrip("\n")
                self.tail.append(line)
                if self.on_line:
                    with contextlib.suppress(Exception):  # logging must never kill the reader
                        self.on_line(line)

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status (negative: killed by that signal), or None if still running after ``timeout``.

        With a timeout, the exit is seen at once through a pidfd (Linux 5.3+) rather than by
        ``Popen.wait``'s sleep-and-poll loop, which notices an exit up to 50 ms late."""
        assert self.proc is not None
        if timeout is not None and self.proc.returncode is None and not self._exited_within(timeout):
            return None
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self._close_pidfd()
        if self._reader:
            self._reader.join(timeout=5)
        return code

    def _exited_within(self, timeout: float) -> bool:
        """False if the child surely still runs after ``timeout`` s; True if it exited (or if this cannot
        be told without ``Popen.wait``)."""
        if self._pidfd is None:
            try:
                self._pidfd = os.pidfd_open(self.pid)
            except (AttributeError, OSError):  # no pidfd here, or the child is already reaped
                self._pidfd = -1
        if self._pidfd < 0:
            return True
        ready, _, _ = select.select([self._pidfd], [], [], max(0.0, timeout))
        return bool(ready)

    def _close_pidfd(self) -> None:
        if self._pidfd is not None and self._pidfd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = -2  # closed: Popen.wait from now on (the child is reaped anyway)

    def owns(self, pid: int) -> bool:
        """Whether ``pid`` is the child or one of its descendants. The child leads its own session, so a
        descendant normally shares it (one getsid call); only a process that left the session (setsid) is
        looked up by its ancestors."""
        if pid == self.pid:
            return True
        try:
            if os.getsid(pid) == self.pid:
                return True
            import psutil

            return any(parent.pid == self.pid for parent in psutil.Process(pid).parents())
        except Exception:  # noqa: BLE001 - gone, or not ours to inspect
            return False

    def descendants(self) -> list[int]:
        try:
            import psutil

            return [c.pid for c in psutil.Process(self.pid).children(recursive=True)]
        except Exception:  # noqa: BLE001 - the child is gone
            return []

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM every process of the work, each once; SIGKILL the whole process group and every descendant after
        ``grace`` seconds. Whatever the child leaves once it has exited is stopped too (:meth:`stop_leftovers`).

        The SIGTERM goes to the shim, which passes it on to every descendant (it is their subreaper). Sending it to
        the process group as well would reach the work twice, and a second SIGTERM interrupts the handler that
        checkpoints on the first (a handler that raises SystemExit raises it again inside the work's own cleanup).
        Only when the shim is gone does the group get it directly."""
        if self.proc is None:
            return None
        if self.proc.poll() is not None:
            self.stop_leftovers(grace)
            return self.proc.returncode
        self.stopped_by_us = True
        family = self.descendants()
        try:
            os.kill(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            self._signal_all(signal.SIGTERM, family)
        code = self.wait(timeout=grace)
        self._signal_all(signal.SIGKILL, sorted(set(family) | set(self.descendants())))
        if code is None:
            code = self.wait(timeout=10)
        self.stop_leftovers(grace)
        return code

    def stop_leftovers(self, grace: float = 10.0) -> int:
        """After the child exited: SIGTERM the processes it left (:func:`leftover_processes`), SIGKILL those
        still there after ``grace`` seconds; how many there were (also said in the child's log and tail)."""
        if self.proc is None:
            return 0
        left = leftover_processes(self.proc.pid, self.env.get(LEASE_ENV))
        if not left:
            return 0
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(process_alive(pid) for pid in left):
            time.sleep(0.05)
        for pid in left:
            if process_alive(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        self.say(
            f"[gpusched] the work left {len(left)} process(es) running after it ended "
            f"({', '.join(map(str, left[:10]))}); stopped them before its GPUs are given out again"
        )
        return len(left)

    def say(self, line: str) -> None:
        """A line of ours in the child's output: its tail, its log file and the callback (the task log)."""
        self.tail.append(line)
        with contextlib.suppress(OSError), open(self.log_path, "a", encoding="utf-8") as log:
            log.write(line + "\n")
        if self.on_line:
            with contextlib.suppress(Exception):
                self.on_line(line)

    def _signal_all(self, sig: int, pids: Sequence[int]) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)  # the child's process group (its pid), even if the child itself is gone
        for pid in pids:  # descendants that left the group (setsid, double fork)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def leftover_processes(session: int, lease_id: str | None) -> list[int]:
    """This user's live processes that belong to a child that has exited: the members of its session
    (``session``: the child's pid, which leads it) and, for those that left it (``setsid``, a double fork),
    the processes whose environment carries ``GPUSCHED_LEASE_ID=<lease_id>``. Never this process or its
    ancestors. Reads ``/proc`` (Linux)."""
    mine = {os.getpid()}
    with contextlib.suppress(Exception):
        import psutil

        mine.update(p.pid for p in psutil.Process().parents())
    uid = os.getuid()
    # the child has exited: a live process with its pid now is another one, and then no process of the child's
    # session is left (Linux gives a pid out again only once no session or group of that id lives), so a session of
    # that id is somebody else's (pid_max is 32,768 on many hosts: ids come round within minutes of busy work)
    theirs = process_alive(session)
    needle = f"\0{LEASE_ENV}={lease_id}\0".encode() if lease_id else None
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit() or int(name) in mine:
            continue
        pid = int(name)
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid or not process_alive(pid):
                continue
            if not theirs and os.getsid(pid) == session:
                found.append(pid)
                continue
            if needle is None:
                continue
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read(1 << 20)
        except OSError:
            continue
        if needle in b"\0" + env + b"\0":
            found.append(pid)
    return sorted(found)
