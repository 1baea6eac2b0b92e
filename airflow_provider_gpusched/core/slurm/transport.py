"""Running the Slurm command-line tools: here, or on a login host through ``ssh host --``.

Commands are argument lists, never shell strings built from user values. Through ssh, the remote
side joins the arguments with spaces and hands them to a shell, so each argument is quoted with
:func:`shlex.quote` first: values with spaces, quotes or ``;`` reach the program verbatim.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_gpusched.core.checks import is_int
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError

_HOST = re.compile(r"^[A-Za-z0-9_\[][A-Za-z0-9_.:\[\]%-]*$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")

# Messages that mean "slurmctld (or the login host) is unreachable right now", not "your job is bad".
_TRANSIENT_MARKERS = (
    "unable to contact slurm controller",
    "connect failure",
    "connection refused",
    "socket timed out",
    "zero bytes were transmitted",
    "slurm_receive_msg",
    "temporarily unavailable",
    "communication connection failure",
    "slurmctld not responding",
    "resource temporarily unavailable",
    "timed out",
)


#: a runner's target when the Slurm CLI is on this host (an ssh runner's target is its host)
LOCAL_TARGET = "local"


class SlurmCommandError(GpuschedError):
    """A Slurm command failed for a reason that retrying will not fix (bad partition, bad option...)."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str, stdout: str = "") -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        self.stdout = stdout.strip()
        detail = self.stderr or self.stdout or "no output"
        super().__init__(f"{argv[0]} exited with {returncode}: {detail}")


class SlurmUnavailableError(SlurmCommandError):
    """Slurm could not be reached (slurmctld restarting, network, ssh): try again later."""


@dataclass
class CommandResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    via_ssh: bool = False

    def check(self) -> CommandResult:
        """Raise the right error for a failed command — without running it again (an unreachable controller
        would make a second call wait out the whole timeout once more)."""
        if self.returncode != 0:
            if is_transient_failure(self.returncode, self.stderr, via_ssh=self.via_ssh):
                raise SlurmUnavailableError(self.argv, self.returncode, self.stderr, self.stdout)
            raise SlurmCommandError(self.argv, self.returncode, self.stderr, self.stdout)
        return self


def is_transient_failure(returncode: int, stderr: str, *, via_ssh: bool = False) -> bool:
    if via_ssh and returncode == 255:  # ssh itself failed
        return True
    text = stderr.lower()
    return any(marker in text for marker in _TRANSIENT_MARKERS)


@dataclass
class SlurmTransport:
    """Runs Slurm commands on this host.

    ``slurm_conf`` sets ``SLURM_CONF`` for the commands (a cluster whose config is not in the default
    place, such as the project's test cluster). ``calls`` counts the commands run, by program name.
    """

    slurm_conf: str | None = None
    timeout: float = 60.0
    calls: Counter[Any] = field(default_factory=Counter, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    @property
    def target(self) -> str:
        return LOCAL_TARGET

    @property
    def is_local(self) -> bool:
        """Whether the Slurm commands run on this host (the CLI here), not over ssh."""
        return self.target == LOCAL_TARGET

    def wrap(self, argv: Sequence[str]) -> list[str]:
        return list(argv)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        return env

    def run(
        self, argv: Sequence[str], *, input: str | None = None, check: bool = True, timeout: float | None = None
    ) -> CommandResult:
        argv = [str(a) for a in argv]
        with self._lock:
            self.calls[argv[0]] += 1
        full = self.wrap(argv)
        via_ssh = full[0] == "ssh"
        try:
            proc = subprocess.run(
                full,
                input=input,
                capture_output=True,
                text=True,
                timeout=timeout or self.timeout,
                env=self.env(),
                check=False,
            )
        except FileNotFoundError as exc:
            raise SlurmCommandError(
                argv,
                127,
                f"{full[0]}: command not found; is Slurm installed "
                f"on this host (or set a login host on the connection)?",
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmUnavailableError(argv, -1, f"timed out after {exc.timeout:.0f}s") from exc
        result = CommandResult(argv, proc.returncode, proc.stdout, proc.stderr, via_ssh)
        if check:
            result.check()
        return result

    def run_bytes(self, argv: Sequence[str], *, timeout: float | None = None) -> tuple[int, bytes, str]:
        """Run a command whose output is bytes (a file's content): exit status, stdout, stderr. Failures to start
        or finish raise as :meth:`run` does."""
        argv = [str(a) for a in argv]
        full = self.wrap(argv)
        try:
            proc = subprocess.run(
                full, capture_output=True, timeout=timeout or self.timeout, env=self.env(), check=False
            )
        except FileNotFoundError as exc:
            raise SlurmCommandError(argv, 127, f"{full[0]}: command not found") from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmUnavailableError(argv, -1, f"timed out after {exc.timeout:.0f}s") from exc
        return proc.returncode, proc.stdout, proc.stderr.decode(errors="replace")

    def describe(self) -> dict[str, Any]:
        """Everything needed to build an equal runner elsewhere (the triggerer)."""
        return {"slurm_conf": self.slurm_conf, "timeout": self.timeout}


@dataclass
class SSHTransport(SlurmTransport):
    """Runs Slurm commands on a login host: ``ssh [options] [-p port] -- [user@]host 'argv'...``."""

    host: str = ""
    user: str | None = None
    port: int | None = None
    ssh_options: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # a host such as "-oProxyCommand=..." would be an ssh option that runs a local command
        if not isinstance(self.host, str) or not _HOST.match(self.host):
            raise InvalidArgumentError(
                "host", self.host, "a host name or address (letters, digits, '.', '-', ':', '_'; not starting with '-')"
            )
        if self.user is not None and (not isinstance(self.user, str) or not _USER.match(self.user)):
            raise InvalidArgumentError(
                "login", self.user, "a user name (letters, digits, '_', '.', '-'; not starting with '-')"
            )
        if self.port is not None and (not is_int(self.port) or not 0 < self.port < 65536):
            raise InvalidArgumentError("port", self.port, "a TCP port 1-65535")
        if isinstance(self.ssh_options, str) or not all(isinstance(o, str) for o in self.ssh_options):
            raise InvalidArgumentError("ssh_options", self.ssh_options, "a list of ssh arguments")

    @property
    def target(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}"

    def wrap(self, argv: Sequence[str]) -> list[str]:
        cmd = ["ssh", "-o", "BatchMode=yes", *self.ssh_options]
        if self.port:
            cmd += ["-p", str(self.port)]
        remote = [shlex.quote(str(a)) for a in argv]
        if self.slurm_conf:
            remote = ["env", shlex.quote(f"SLURM_CONF={self.slurm_conf}"), *remote]
        return [*cmd, "--", self.target, *remote]  # "--": the destination is never read as an option

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "host": self.host,
            "user": self.user,
            "port": self.port,
            "ssh_options": list(self.ssh_options),
        }
