"""Distributed starts: one piece of work as several processes (ranks), on one host or across Slurm nodes.

Two ways to start the ranks, named as HPC users name them:

``"torchrun"``
    one ``torchrun`` per node (through ``srun`` on Slurm, one task per node), which starts ``nproc_per_node``
    ranks there; the nodes meet at a c10d rendezvous on the job's first node. On local GPUs: one
    ``torchrun --standalone`` over the GPUs of the lease.
``"srun"``
    one process per GPU, started by ``srun`` (Slurm), or by this module's own launcher on local GPUs (there is no
    srun there), each with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``NODE_RANK``
    (= ``GROUP_RANK``), ``GROUP_WORLD_SIZE`` (nodes), ``MASTER_ADDR`` and ``MASTER_PORT`` set: what
    ``torch.distributed.init_process_group("nccl")`` (``env://``) reads.

Either way:

* ``MASTER_ADDR`` is the job's first node (``scontrol show hostnames $SLURM_JOB_NODELIST``), where the batch
  script runs; ``MASTER_PORT`` a port nobody listens on there, starting from one derived from the job id, so two
  jobs sharing a node never pick the same one (locally: a port the kernel hands out);
* a rank that fails ends the others at once (``srun --kill-on-bad-exit``, torchrun's own rule);
* a rank still running ``rank_exit_grace`` seconds after the first one ended is stopped (``srun --wait``), so a
  rank that hangs after the others have finished does not hold the job until its time limit. 0: wait for ever.

This module holds what every backend shares: the modes, their checks, what a rank is told (:class:`RankInfo`) and
gpusched's own rank launcher (``python -m airflow_provider_gpusched.core.distributed ranks``, srun's rules where
there is no srun). How a backend starts the ranks lives in its package: on Slurm a bash function in the job script
(core/slurm/ranks.py: nothing of this package is needed on the compute nodes), on this host's GPUs torchrun or the
launcher (core/gpu/ranks.py).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from airflow_provider_gpusched.core.checks import is_number
from airflow_provider_gpusched.core.deprecation import moved_names
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError

MODES = ("torchrun", "srun")
#: seconds the other ranks may run on after the first one ended (srun --wait)
DEFAULT_RANK_EXIT_GRACE = 300.0
#: the name the launch function and the rank wrapper show in process lists
LAUNCH_NAME = "gpusched-launch"
RANK_NAME = "gpusched-rank"

#: how each backend starts the ranks lives in its own package now; the old names still import
__getattr__ = moved_names(
    __name__,
    {
        "PORT_BASE": "airflow_provider_gpusched.core.slurm.ranks:PORT_BASE",
        "PORT_SPAN": "airflow_provider_gpusched.core.slurm.ranks:PORT_SPAN",
        "slurm_launch_function": "airflow_provider_gpusched.core.slurm.ranks:slurm_launch_function",
        "slurm_launch_argv": "airflow_provider_gpusched.core.slurm.ranks:slurm_launch_argv",
        "torchrun_command": "airflow_provider_gpusched.core.gpu.ranks:torchrun_command",
        "local_launch_argv": "airflow_provider_gpusched.core.gpu.ranks:local_launch_argv",
    },
)


def check_mode(value: object, argument: str = "distributed") -> str | None:
    """``None``, ``"torchrun"`` or ``"srun"``; anything else is refused naming ``argument``."""
    if value is None:
        return None
    if not isinstance(value, str) or value not in MODES:
        raise InvalidArgumentError(
            argument,
            value,
            "None, 'torchrun' (one torchrun per node) or 'srun' (one "
            "process per GPU, with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)",
        )
    return value


def check_grace(value: object, argument: str = "rank_exit_grace") -> float:
    """Seconds (a number >= 0; 0: no limit)."""
    if not is_number(value) or value != value or value < 0 or value == float("inf"):
        raise InvalidArgumentError(argument, value, "seconds (a number >= 0; 0 waits for every rank for ever)")
    return float(value)


def launcher_grace(rank_exit_grace: float, python_call: bool) -> float:
    """The launcher's own limit (srun --wait, or gpusched's ranks launcher): for a Python call a little after the
    ranks' own (core/pyfunc.py), so that a hung rank stops itself first and says where it was."""
    return rank_exit_grace + 15 if python_call and rank_exit_grace > 0 else rank_exit_grace


# -- what a rank is told ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RankInfo:
    """This process's place in a distributed start (from the variables torchrun, or gpusched's srun start, set)."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    master_addr: str
    master_port: int
    hostname: str

    @property
    def is_main(self) -> bool:
        """Rank 0: the one whose return value becomes the task's XCom."""
        return self.rank == 0

    def describe(self) -> str:
        return (
            f"rank {self.rank} of {self.world_size} on {self.hostname} (node {self.node_rank} of {self.num_nodes}, "
            f"local rank {self.local_rank})"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RankInfo | None:
        """None when ``RANK`` / ``WORLD_SIZE`` are not set (not a distributed start)."""
        env = os.environ if env is None else env

        def number(*names: str, default: int | None = None) -> int:
            for name in names:
                value = env.get(name, "")
                if value.strip().lstrip("-").isdigit():
                    return int(value)
            if default is None:
                raise KeyError(names[0])
            return default

        try:
            rank, world = number("RANK"), number("WORLD_SIZE")
        except KeyError:
            return None
        return cls(
            rank=rank,
            local_rank=number("LOCAL_RANK", default=0),
            world_size=world,
            local_world_size=number("LOCAL_WORLD_SIZE", default=world),
            node_rank=number("NODE_RANK", "GROUP_RANK", default=0),
            num_nodes=number("GROUP_WORLD_SIZE", default=1),
            master_addr=env.get("MASTER_ADDR", ""),
            master_port=number("MASTER_PORT", default=0),
            hostname=socket.gethostname(),
        )


def rank_info() -> RankInfo:
    """This rank's :class:`RankInfo`; an error that says so outside a distributed start."""
    info = RankInfo.from_env()
    if info is None:
        raise GpuschedError(
            "not in a distributed start: RANK and WORLD_SIZE are not set (give the task "
            "distributed='torchrun' or 'srun')"
        )
    return info


# -- gpusched's own rank launcher: what srun does, where there is no srun (this host's GPUs) ----------------------
def free_local_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def run_ranks(argv: Sequence[str], nproc: int, grace: float, *, out: TextIO | None = None, poll: float = 0.1) -> int:
    """Start ``argv`` ``nproc`` times with the rank variables set and watch them as ``srun --kill-on-bad-exit
    --wait`` does: a rank that fails stops the others; ranks still running ``grace`` seconds after the first one
    ended are stopped. SIGTERM/SIGINT are passed on to every rank. Returns the exit status (the first failure's)."""
    out = out or sys.stderr
    port = free_local_port()
    procs: list[subprocess.Popen[Any]] = []
    base = dict(os.environ)
    for rank in range(nproc):
        env = {
            **base,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc),
            "NODE_RANK": "0",
            "GROUP_RANK": "0",
            "GROUP_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        procs.append(subprocess.Popen(list(argv), env=env))
    print(
        f"[gpusched] srun start: {nproc} rank(s) on {socket.gethostname()}, rendezvous 127.0.0.1:{port}",
        file=out,
        flush=True,
    )

    def forward(signum: int, _frame: object) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)

    def stop_all(why: str) -> None:
        print(f"[gpusched] {why}", file=out, flush=True)
        for p in procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            time.sleep(0.05)
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    first_end: tuple[float, int] | None = None
    while True:
        codes = [p.poll() for p in procs]
        failed = next(((r, c) for r, c in enumerate(codes) if c is not None and c != 0), None)
        if failed is not None:
            rank, code = failed
            if any(c is None for c in codes):
                stop_all(f"rank {rank} exited with {code}; stopping the other ranks")
            return code if code > 0 else 128 - code
        if all(c == 0 for c in codes):
            return 0
        if first_end is None:
            ended = next((r for r, c in enumerate(codes) if c is not None), None)
            if ended is not None:
                first_end = (time.monotonic(), ended)
        elif grace > 0 and time.monotonic() - first_end[0] > grace:
            left = [r for r, c in enumerate(codes) if c is None]
            stop_all(
                f"rank(s) {', '.join(map(str, left))} still running {grace:g} s after rank {first_end[1]} "
                f"ended (rank_exit_grace); stopping them"
            )
            return 1
        time.sleep(poll)


_RANKS_USAGE = f"usage: python -m {__name__} ranks --nproc=N [--grace=SECONDS] -- COMMAND [ARG...]"


def main(args: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if args is None else args)
    if not args or args[0] != "ranks" or "--" not in args:
        print(_RANKS_USAGE, file=sys.stderr)
        return 2
    split = args.index("--")
    options, command = args[1:split], args[split + 1 :]
    nproc, grace = None, DEFAULT_RANK_EXIT_GRACE
    for option in options:
        name, _, value = option.partition("=")
        if name == "--nproc" and re.fullmatch(r"[1-9]\d*", value):
            nproc = int(value)
        elif name == "--grace" and re.fullmatch(r"\d+(\.\d+)?", value):
            grace = float(value)
        else:
            print(f"gpusched ranks: bad option {option!r}\n{_RANKS_USAGE}", file=sys.stderr)
            return 2
    if nproc is None or not command:
        print(_RANKS_USAGE, file=sys.stderr)
        return 2
    try:
        return run_ranks(command, nproc, grace)
    except OSError as exc:
        print(f"gpusched ranks: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
