"""How a distributed start's ranks start on Slurm: a bash function ``gpusched_launch`` in the job script (nothing
of this package is needed on the compute nodes for a command; Python functions and sweep trials use it too).

It runs in the batch script, on the job's first node: ``MASTER_ADDR`` is that node, ``MASTER_PORT`` a port
nobody listens on there, from one derived from the job id (two jobs sharing a node never pick the same one);
``srun --kill-on-bad-exit`` ends every rank when one fails and ``srun --wait`` stops those still running
``rank_exit_grace`` seconds after the first one ended (core/distributed.py says what each mode starts).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from airflow_provider_gpusched.core.checks import is_int
from airflow_provider_gpusched.core.contain import shim_source
from airflow_provider_gpusched.core.distributed import (
    DEFAULT_RANK_EXIT_GRACE,
    LAUNCH_NAME,
    RANK_NAME,
    check_grace,
    check_mode,
)
from airflow_provider_gpusched.core.errors import InvalidArgumentError

#: where MASTER_PORT is looked for on Slurm nodes: below Linux's ephemeral range (32768-60999), so a port that an
#: outgoing connection holds for a moment is never chosen
PORT_BASE, PORT_SPAN = 20000, 12000
# srun's stderr goes through gpusched_srun_said (to stderr, line by line) so that a rank stopped by --wait fails the
# job for certain: srun itself may exit 0 when the stopped rank's end reaches it late (seen under load)
_SAID = "2>&1 1>&3 3>&- 4>&- 5>&- | gpusched_srun_said"


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
    start = _start_line(mode, nproc_per_node, f"srun --kill-on-bad-exit=1 --wait={wait}", torchrun)
    return "\n".join(
        [
            f"# gpusched: a distributed start ({mode}, {nproc_per_node} rank(s) per node) over every node of the job",
            *_free_port_function(),
            *_srun_said_function(),
            f"gpusched_shim={shlex.quote(shim_source())}",
            *_launch_function(mode, nproc_per_node, start, wait),
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


def _start_line(mode: str, nproc_per_node: int, srun: str, torchrun: Sequence[str]) -> str:
    """The srun that starts the ranks: one process per GPU (``srun``), or one torchrun per node. Each rank (srun)
    or each node's torchrun runs under the containment shim: what a rank forks off (setsid nohup ...) ends with
    it, whatever Slurm's ProctrackType (core/contain.py)."""
    if mode == "srun":
        # one wrapper per rank, the command after it as arguments: nothing of the command is ever parsed by a shell
        rank_env = (
            'export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE="$SLURM_NTASKS" '
            f'LOCAL_WORLD_SIZE={nproc_per_node} NODE_RANK="$SLURM_NODEID" GROUP_RANK="$SLURM_NODEID" '
            'GROUP_WORLD_SIZE="$SLURM_JOB_NUM_NODES"; exec "$@"'
        )
        return (
            f'  {srun} --ntasks-per-node={nproc_per_node} -- "${{shim[@]}}" bash -c {shlex.quote(rank_env)} '
            f'{RANK_NAME} "$@" {_SAID}'
        )
    return (
        f'  {srun} --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 -- '
        f'"${{shim[@]}}" {shlex.join(torchrun)} --nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node={nproc_per_node} '
        f'--rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" --rdzv-id="$SLURM_JOB_ID" '
        f'--max-restarts=0 --no-python -- "$@" {_SAID}'
    )


def _free_port_function() -> list[str]:
    """``gpusched_free_port``: a TCP port nobody listens on here, from one derived from the job id."""
    return [
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
    ]


def _srun_said_function() -> list[str]:
    """``gpusched_srun_said``: srun's stderr passed on, with a note on descriptor 4 when --wait stopped ranks."""
    return [
        "gpusched_srun_said() {  # srun's stderr, passed on; notes on descriptor 4 that --wait stopped ranks",
        "  local line",
        '  while IFS= read -r line || [ -n "$line" ]; do',
        "    printf '%s\\n' \"$line\" >&2",
        "    case \"$line\" in 'srun: First task exited '*) echo stopped >&4 ;; esac",
        "  done",
        "}",
    ]


def _launch_function(mode: str, nproc_per_node: int, start: str, wait: int) -> list[str]:
    """``gpusched_launch``: the rendezvous set, the ranks started (``start``), and a job stopped by --wait failed."""
    return [
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
