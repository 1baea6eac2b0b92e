"""What one piece of local-GPU work runs: a program, a shell command line or a Python call, with its environment,
checkpoint folder, distributed start, time limit and setup lines. The attempt loop (core/gpu/supervisor.py) starts
it once per attempt; the decision step (core/gpu/attempts.py) reads it for the failure message."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from airflow_provider_gpusched.core.checks import is_number
from airflow_provider_gpusched.core.distributed import DEFAULT_RANK_EXIT_GRACE, launcher_grace
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.gpu.ranks import local_launch_argv, torchrun_command


@dataclass
class Work:
    """What to run: ``argv`` (a list, run directly), ``shell_command`` (a string, run by bash: explicit),
    or ``call_dir`` (a Python call written with :func:`airflow_provider_gpusched.core.pyfunc.write_call`)."""

    argv: Sequence[str] | None = None
    shell_command: str | None = None
    call_dir: str | None = None
    python: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    #: kept across relaunches; the child finds it in ``$GPUSCHED_CHECKPOINT_DIR``. Work lost to a
    #: preemption is counted from the newest file written here.
    checkpoint_dir: str | None = None
    #: start it as one rank per leased GPU: "torchrun" or "srun" (core/distributed.py)
    distributed: str | None = None
    rank_exit_grace: float = DEFAULT_RANK_EXIT_GRACE
    #: seconds each start may run before it is stopped (SIGTERM, the grace period, SIGKILL) and fails as timed
    #: out, as Slurm stops a job at its --time; None: no limit
    time_limit: float | None = None
    #: shell lines run before the work, in the shell that then starts it (``source env.sh``, ``module load``), as
    #: a Slurm job script runs its setup lines; the work's arguments still reach it verbatim
    setup: Sequence[str] = ()

    def __post_init__(self) -> None:
        given = [x for x in (self.argv, self.shell_command, self.call_dir) if x is not None]
        if len(given) != 1:
            raise GpuschedError("give exactly one of argv (list), shell_command (string) or a Python callable")
        if self.argv is not None and (isinstance(self.argv, str) or not self.argv):
            raise GpuschedError(
                "argv must be a non-empty list; for a shell command line use shell_command "
                "(or bash_command on the operator)"
            )
        if self.time_limit is not None and (not is_number(self.time_limit) or not self.time_limit > 0):
            raise InvalidArgumentError("time_limit", self.time_limit, "seconds (a number > 0)")
        if isinstance(self.setup, str):
            self.setup = [self.setup]
        if not isinstance(self.setup, (list, tuple)) or not all(
            isinstance(x, str) and "\x00" not in x for x in self.setup
        ):
            raise InvalidArgumentError("setup", self.setup, "a list of shell lines")

    def child_argv(self, nproc: int = 1, env: Mapping[str, str] | None = None) -> tuple[list[str] | str, bool]:
        """What the child runs, and whether by a shell; a distributed start runs ``nproc`` ranks of it."""
        argv: list[str] | str
        if self.shell_command is not None:
            argv, shell = self.shell_command, True
        elif self.call_dir is not None:
            import sys

            argv, shell = (
                [self.python or sys.executable, "-m", "airflow_provider_gpusched.core.pyfunc", self.call_dir],
                False,
            )
        else:
            argv, shell = [str(a) for a in self.argv or ()], False  # exactly one of the three: __post_init__
        if self.distributed:
            if isinstance(argv, str):  # a shell command line
                argv, shell = ["/bin/bash", "-c", argv], False
            grace = launcher_grace(self.rank_exit_grace, python_call=self.call_dir is not None)
            argv = local_launch_argv(
                self.distributed, argv, nproc, grace, torchrun=torchrun_command(env, self.python), python=self.python
            )
        return self._after_setup(argv, shell)

    def _after_setup(self, argv: list[str] | str, shell: bool) -> tuple[list[str] | str, bool]:
        """``argv`` run by the shell that ran the setup lines first (once, before any rank starts)."""
        if not self.setup:
            return argv, shell
        lines = "\n".join(self.setup) + "\n"
        if isinstance(argv, str):  # a command line: the same shell goes on with it
            return lines + argv, True
        return ["/bin/bash", "-c", lines + 'exec "$@"', "gpusched-setup", *argv], False
