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

The Slurm start is a bash function (:func:`slurm_launch_function`) in the job script: nothing of this package is
needed on the compute nodes for a command. Python functions and sweep trials use the same function.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from airflow_provider_gpusched.core.checks import is_int, is_number
from airflow_provider_gpusched.core.contain import shim_source
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError

MODES = ("torchrun", "srun")
#: seconds the other ranks may run on after the first one ended (srun --wait)
DEFAULT_RANK_EXIT_GRACE = 300.0
#: where MASTER_PORT is looked for on Slurm nodes: below Linux's ephemeral range (32768-60999), so a port that an
#: outgoing connection holds for a moment is never chosen
PORT_BASE, PORT_SPAN = 20000, 12000
#: the name the launch function and the rank wrapper show in process lists
LAUNCH_NAME = "gpusched-launch"
RANK_NAME = "gpusched-rank"


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


# -- on Slurm: one bash function in the job script -------------------------------------------------------------
def slurm_launch_function(
    mode: str,
    nproc_per_node: int,
    rank_exit_grace: float = DEFAULT_RANK_EXIT_GRACE,
    torchrun: Sequence[str] = ("torchrun",),
) -> str:
    """A bash function ``gpusched_launch`` that starts its arguments (the command, verbatim) as the ranks of a
    distributed start over every node of the job. It runs in the batch script, on the job's first node."""
    check_mode(mode)
    if mode is None:
        raise InvalidArgumentError("distributed", mode, "'torchrun' or 'srun'")
    if not is_int(nproc_per_node) or nproc_per_node < 1:
        raise InvalidArgumentError("nproc_per_node", nproc_per_node, "a whole number >= 1")
    wait = int(round(check_grace(rank_exit_grace)))
    wait = max(wait, 1) if rank_exit_grace > 0 else 0
    srun = f"srun --kill-on-bad-exit=1 --wait={wait}"
    # one wrapper per rank, the command after it as arguments: nothing of the command is ever parsed by a shell
    rank_env = (
        'export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE="$SLURM_NTASKS" '
        f'LOCAL_WORLD_SIZE={nproc_per_node} NODE_RANK="$SLURM_NODEID" GROUP_RANK="$SLURM_NODEID" '
        'GROUP_WORLD_SIZE="$SLURM_JOB_NUM_NODES"; exec "$@"'
    )
    # srun's stderr goes through gpusched_srun_said (to stderr, line by line) so that a rank stopped by --wait fails
    # the job for certain: srun itself may exit 0 when the stopped rank's end reaches it late (seen under load)
    said = "2>&1 1>&3 3>&- 4>&- 5>&- | gpusched_srun_said"
    # each rank (srun) or each node's torchrun under the containment shim: what a rank forks off (setsid nohup ...)
    # ends with it, whatever Slurm's ProctrackType (core/contain.py)
    if mode == "srun":
        start = (
            f'  {srun} --ntasks-per-node={nproc_per_node} -- "${{shim[@]}}" bash -c {shlex.quote(rank_env)} {RANK_NAME} "$@" '
            f"{said}"
        )
    else:
        start = (
            f'  {srun} --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 -- '
            f'"${{shim[@]}}" {shlex.join(torchrun)} --nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node={nproc_per_node} '
            f'--rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" --rdzv-id="$SLURM_JOB_ID" '
            f'--max-restarts=0 --no-python -- "$@" {said}'
        )
    return "\n".join(
        [
            f"# gpusched: a distributed start ({mode}, {nproc_per_node} rank(s) per node) over every node of the job",
            "gpusched_free_port() {  # a TCP port nobody listens on here, from one derived from the job id",
            f"  local base=$(( ${{SLURM_JOB_ID:-$$}} % {PORT_SPAN} )) used=' ' f local_ state rest i p",
            "  for f in /proc/net/tcp /proc/net/tcp6; do",
            '    [ -r "$f" ] || continue',
            "    while read -r _ local_ _ state rest; do",
            '      [ "$state" = 0A ] && used+="$((16#${local_##*:})) "',
            '    done < "$f"',
            "  done",
            f"  for ((i = 0; i < {PORT_SPAN}; i++)); do",
            f"    p=$(( {PORT_BASE} + (base + i) % {PORT_SPAN} ))",
            '    case "$used" in *" $p "*) ;; *) echo "$p"; return ;; esac',
            "  done",
            f"  echo $(( {PORT_BASE} + base ))",
            "}",
            "gpusched_srun_said() {  # srun's stderr, passed on; notes on descriptor 4 that --wait stopped ranks",
            "  local line",
            '  while IFS= read -r line || [ -n "$line" ]; do',
            "    printf '%s\\n' \"$line\" >&2",
            "    case \"$line\" in 'srun: First task exited '*) echo stopped >&4 ;; esac",
            "  done",
            "}",
            f"gpusched_shim={shlex.quote(shim_source())}",
            "gpusched_launch() {",
            "  local first said rc note= shim=()",
            "  command -v python3 >/dev/null 2>&1 && shim=(python3 -I -S -c \"$gpusched_shim\" 10 '' --)",
            # the note file is unlinked as soon as it is open: nothing is left behind, whatever ends the job (scancel)
            '  said="$(mktemp "${TMPDIR:-/tmp}/gpusched-srun.XXXXXXXX")" || return 1',
            '  exec 4>"$said" 5<"$said"',
            '  rm -f -- "$said"',
            '  first="$(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null | head -n 1)"',
            '  export MASTER_ADDR="${first:-$(hostname)}"',
            '  export MASTER_PORT="$(gpusched_free_port)"',
            f'  echo "[gpusched] {mode} start: $SLURM_JOB_NUM_NODES node(s) ($SLURM_JOB_NODELIST) x {nproc_per_node} '
            'rank(s), rendezvous $MASTER_ADDR:$MASTER_PORT" >&2',
            "  exec 3>&1",
            start,
            "  rc=${PIPESTATUS[0]}",
            "  exec 3>&- 4>&-",
            "  IFS= read -r note <&5 || true",
            "  exec 5<&-",
            '  if [ "$rc" = 0 ] && [ -n "$note" ]; then',
            f'    echo "[gpusched] rank(s) still running {wait}s after the first rank ended were stopped (rank_exit_grace); '
            'the job fails" >&2',
            "    rc=1",
            "  fi",
            '  return "$rc"',
            "}",
        ]
    )


def slurm_launch_argv(
    mode: str,
    argv: Sequence[str],
    nproc_per_node: int,
    rank_exit_grace: float = DEFAULT_RANK_EXIT_GRACE,
    torchrun: Sequence[str] = ("torchrun",),
) -> list[str]:
    """``argv`` started as ranks from inside a Slurm allocation (a sweep's trial runner): bash running
    :func:`slurm_launch_function`, the command passed as arguments."""
    script = slurm_launch_function(mode, nproc_per_node, rank_exit_grace, torchrun) + '\ngpusched_launch "$@"\n'
    return ["bash", "-c", script, LAUNCH_NAME, *[str(a) for a in argv]]


# -- on local GPUs ------------------------------------------------------------------------------------------------
def torchrun_command(env: Mapping[str, str] | None = None, python: str | None = None) -> list[str]:
    """``torchrun`` on the PATH the work will have, else ``python -m torch.distributed.run``."""
    path = (env or os.environ).get("PATH")
    found = shutil.which("torchrun", path=path)
    return [found] if found else [python or sys.executable, "-m", "torch.distributed.run"]


def local_launch_argv(
    mode: str,
    argv: Sequence[str],
    nproc: int,
    rank_exit_grace: float = DEFAULT_RANK_EXIT_GRACE,
    *,
    torchrun: Sequence[str] | None = None,
    python: str | None = None,
) -> list[str]:
    """``argv`` started as ``nproc`` ranks on this host (the GPUs of a lease): ``torchrun --standalone`` (a free
    rendezvous port of its own), or this module's launcher for ``"srun"``."""
    check_mode(mode)
    if not is_int(nproc) or nproc < 1:
        raise InvalidArgumentError("nproc", nproc, "a whole number >= 1")
    grace = check_grace(rank_exit_grace)
    argv = [str(a) for a in argv]
    if mode == "torchrun":
        return [
            *(torchrun or torchrun_command()),
            "--standalone",
            "--nnodes=1",
            f"--nproc-per-node={nproc}",
            "--max-restarts=0",
            "--no-python",
            "--",
            *argv,
        ]
    return [python or sys.executable, "-m", __name__, "ranks", f"--nproc={nproc}", f"--grace={grace:g}", "--", *argv]


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
