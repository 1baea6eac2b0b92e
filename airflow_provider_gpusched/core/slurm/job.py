"""What to submit: :class:`SlurmJobSpec` turns resources and a command into an sbatch script and argv.

Every user value reaches sbatch as its own argument (``--job-name=my job``), and the command in the
script is quoted with :func:`shlex.join`, so spaces, quotes and ``;`` are passed on verbatim. A command
given as one string is a shell command line on purpose (like ``bash_command``); give a list for argv.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Annotated, Any

from airflow_provider_gpusched.core import distributed as dist
from airflow_provider_gpusched.core.checks import is_int
from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.job_shape import SHAPE_FIELDS, check_shape, gpus_on_each_node
from airflow_provider_gpusched.core.records import Check, Settings, one_of, says
from airflow_provider_gpusched.core.slurm.chain import TimeLimitChain, time_limit_chain
from airflow_provider_gpusched.core.slurm.ranks import slurm_launch_function
from airflow_provider_gpusched.core.units import parse_bytes, slurm_time_limit, time_limit_seconds
from airflow_provider_gpusched.core.work_tag import WorkTag

_ARRAY = r"^(\d+(-\d+(:\d+)?)?)(,\d+(-\d+(:\d+)?)?)*(%\d+)?$"
_ARRAY_RE = re.compile(_ARRAY)
COMMENT_PREFIX = "gpusched:"
#: sbatch refuses a comment of more than about 1,020 characters ("parameter too long", Slurm 22.05)
MAX_COMMENT = 1000

#: a value that becomes an sbatch option or a Slurm record: no control characters (a newline in a job name splits
#: Slurm's completion record, and the job would look unfinished forever)
OptionText = Annotated[
    str, says("a string without control characters (newline, tab, ...)", pattern=r"^[^\x00-\x1f\x7f]*$")
]
#: a setup line that sets or unsets SLURM_RESTART_COUNT (said at submission beside a time-limit chain)
_SETS_RESTARTS = re.compile(r"\bSLURM_RESTART_COUNT=|\bunset\b.*\bSLURM_RESTART_COUNT\b")
_ENV_NAME = Annotated[str, says("an environment variable name", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


def _no_nul(value: Any) -> Any:
    if "\x00" in str(value):
        raise ValueError("a value without NUL characters")
    return value


def contain_prelude() -> list[str]:
    """The job script's first lines: it runs itself again under the containment shim (core/contain.py, its source
    carried in the script), so that a process the job forks off (``setsid nohup ... &``) ends with the job even
    where Slurm's ``ProctrackType`` is ``proctrack/linuxproc`` or ``pgid``, which lose such a process. Skipped where
    the node has no ``python3``."""
    from airflow_provider_gpusched.core.contain import shim_source

    return [
        f"gpusched_shim={shlex.quote(shim_source())}",
        # once per job: a job this one submits (sbatch passes the environment on) is contained again
        'if [ "${GPUSCHED_CONTAINED:-}" != "${SLURM_JOB_ID:-none}" ] && command -v python3 >/dev/null 2>&1; then',
        '  export GPUSCHED_CONTAINED="${SLURM_JOB_ID:-none}"',
        '  exec python3 -I -S -c "$gpusched_shim" 10 "" -- "$0" "$@"',
        "fi",
    ]


@dataclass
class SlurmJobSpec:
    """A batch job. ``command`` (argv list, or a shell command string) or ``script`` (a whole script body)."""

    command: Sequence[str] | str | None = None
    script: str | None = None
    job_name: OptionText | None = None
    partition: OptionText | None = None
    qos: OptionText | None = None
    account: OptionText | None = None
    gpus: Annotated[int, says("a whole number >= 0", ge=0)] | None = None
    gres: (
        Annotated[
            str,
            says(
                "a Slurm GRES list such as 'gpu:2' or 'gpu:a100:1'",
                pattern=r"^[A-Za-z0-9_]+(:[A-Za-z0-9_.-]+)*(,[A-Za-z0-9_]+(:[A-Za-z0-9_.-]+)*)*$",
            ),
        ]
        | None
    ) = None
    cpus_per_task: Annotated[int, says("a whole number >= 1", ge=1)] | None = None
    mem: int | str | None = None
    time_limit: int | str | timedelta | None = None
    array: Annotated[str, says("a Slurm array spec such as '0-9', '1,3,5', '0-15:4%2'", pattern=_ARRAY)] | None = None
    #: job shape: nodes (``2`` or a range ``"2-4"``), tasks per node, GPUs per node (``4`` or ``"a100:4"``) or per
    #: task, CPUs per GPU, a whole node to itself, node features, nodes to use or to avoid
    nodes: int | str | None = None
    ntasks_per_node: int | None = None
    gpus_per_node: int | str | None = None
    gpus_per_task: int | None = None
    cpus_per_gpu: int | None = None
    exclusive: bool | None = None
    constraint: str | None = None
    nodelist: str | Sequence[str] | None = None
    exclude: str | Sequence[str] | None = None
    #: start the command as ranks on every node: "torchrun" or "srun" (core/distributed.py)
    distributed: str | None = None
    rank_exit_grace: float = dist.DEFAULT_RANK_EXIT_GRACE
    #: how to start torchrun on the nodes (``distributed="torchrun"``)
    torchrun: Annotated[
        Sequence[Annotated[str, says("", min_length=1)]],
        says(
            "the command that starts torchrun, as a list such as ['torchrun'] or "
            "['python', '-m', 'torch.distributed.run']",
            min_length=1,
        ),
    ] = ("torchrun",)
    nice: Annotated[int, says("an integer")] | None = None
    requeue: bool | None = None
    open_mode: Annotated[str, says("'append', 'truncate' or None"), one_of(("append", "truncate"))] | None = "append"
    output: OptionText | None = None
    error: OptionText | None = None
    working_dir: OptionText | None = None
    environment: Annotated[
        Mapping[_ENV_NAME, Annotated[Any, says("a value without NUL characters", strict=None), Check(_no_nul)]],
        says("a mapping of variable name -> value"),
    ] = field(default_factory=dict)
    setup: Annotated[
        Sequence[Annotated[str, says("a shell line without NUL characters", pattern=r"^[^\x00]*$")]],
        says("a list of shell lines"),
    ] = field(default_factory=tuple)
    sbatch_args: Annotated[
        Sequence[
            Annotated[
                str,
                says(
                    "options starting with '-' (one list item each) without control characters",
                    pattern=r"^-[^\x00-\x1f\x7f]*$",
                ),
            ]
        ],
        says("a list of arguments such as ['--exclusive', '--constraint=a100']"),
    ] = field(default_factory=tuple)
    comment: OptionText | None = None
    shell: OptionText = "/bin/bash"
    #: go on past the time limit from a checkpoint (core/slurm/chain.py): True, a mapping of its settings or a
    #: TimeLimitChain; ``chain_records``: the folder (seen from the nodes) where its segments are recorded
    time_limit_chain: Any = None
    chain_records: OptionText | None = None

    def __post_init__(self) -> None:
        self.validate()

    # -- validation -------------------------------------------------------------------------------
    def validate(self) -> None:
        if self.environment is None:
            self.environment = {}
        if self.setup is None:
            self.setup = ()
        if isinstance(self.setup, str):
            self.setup = [self.setup]
        if self.sbatch_args is None:
            self.sbatch_args = ()
        _SETTINGS.check(self)  # each setting's type and bounds (their annotations)
        if (self.command is None) == (self.script is None):
            raise InvalidArgumentError(
                "command/script",
                (self.command, self.script),
                "exactly one of command (argv list or shell string) or script",
            )
        if isinstance(self.command, (list, tuple)):
            if not self.command or not all(isinstance(a, (str, int, float)) for a in self.command):
                raise InvalidArgumentError("command", self.command, "a non-empty list of strings")
        elif self.command is not None and (not isinstance(self.command, str) or not self.command.strip()):
            raise InvalidArgumentError("command", self.command, "a non-empty shell command string or argv list")
        if self.gres and self.gpus:
            raise InvalidArgumentError("gpus/gres", (self.gpus, self.gres), "either gpus or gres, not both")
        texts = [self.command] if isinstance(self.command, str) else list(self.command or [])
        if any("\x00" in str(t) for t in [*texts, self.script or ""]):
            raise InvalidArgumentError("command/script", "...", "text without NUL characters")
        self._validate_shape()
        # normalise the values sbatch needs in its own syntax (and fail early on bad ones)
        if self.mem is not None:
            self._mem_mb = max(1, -(-parse_bytes(self.mem, argument="mem") // 1024**2))
        if self.time_limit is not None:
            self._time = slurm_time_limit(self.time_limit)
        self._validate_chain()

    def _validate_chain(self) -> None:
        """A time-limit chain needs a command (the wrapper runs it), a checkpoint that proves progress, a folder for
        its records, requeues allowed, and a signal that comes inside the time limit."""
        chain = self.time_limit_chain = time_limit_chain(self.time_limit_chain)
        if chain is None:
            return
        if self.script is not None:
            raise InvalidArgumentError(
                "time_limit_chain", "script", "a command (argv list or shell string): the chain's wrapper runs it"
            )
        if self.distributed:
            raise InvalidArgumentError(
                "time_limit_chain", self.distributed, "a job without a distributed start (not supported yet)"
            )
        if not chain.checkpoint:
            raise InvalidArgumentError(
                "time_limit_chain.checkpoint",
                None,
                "the file or folder the job checkpoints to (a newer one proves a segment made progress)",
            )
        if not self.chain_records:
            raise InvalidArgumentError("chain_records", None, "a folder the compute nodes can write")
        if self.requeue is False:
            raise InvalidArgumentError("requeue", False, "True or None with time_limit_chain (it requeues the job)")
        chain.check_against(self._limit_minutes())

    def _limit_minutes(self) -> int | None:
        """The time limit in whole minutes, as Slurm keeps it (rounded up), or None without one."""
        seconds = time_limit_seconds(self.time_limit) if self.time_limit is not None else None
        return None if seconds is None else -(-seconds // 60)

    def chain_advice(self) -> str | None:
        """A time-limit chain's words for the task log when its time limit leaves a segment little time before the
        signal (:meth:`TimeLimitChain.timing_advice`), or when the job's environment or setup sets or unsets
        ``SLURM_RESTART_COUNT`` (its command then sees that value; the chain's cap does not), else None."""
        chain = self.time_limit_chain
        if not isinstance(chain, TimeLimitChain):
            return None
        words = [chain.timing_advice(self._limit_minutes())]
        if "SLURM_RESTART_COUNT" in self.environment or any(_SETS_RESTARTS.search(str(s)) for s in self.setup):
            words.append(
                "time_limit_chain: the job's environment or setup sets or unsets SLURM_RESTART_COUNT: the command "
                "sees that value, not Slurm's restart count; max_requeues still caps Slurm's own count, which the "
                "job script reads before the job's lines"
            )
        return "\n".join(w for w in words if w) or None

    def _validate_shape(self) -> None:
        """The job's shape (core/job_shape.py: each option refused by name), the distributed start, and the
        combinations Slurm would refuse late."""
        self.distributed = dist.check_mode(self.distributed)
        self.rank_exit_grace = dist.check_grace(self.rank_exit_grace)
        shape = check_shape(
            {f: getattr(self, f) for f in SHAPE_FIELDS},
            gpus=self.gpus,
            gres=self.gres,
            cpus_per_task=self.cpus_per_task,
            distributed=self.distributed,
        )
        self.nodelist, self.exclude = shape["nodelist"], shape["exclude"]
        if self.distributed and self.script is not None:
            raise InvalidArgumentError(
                "distributed",
                self.distributed,
                "a command (argv list or shell string), not a whole script: the command is what every rank runs",
            )

    @property
    def gpus_on_each_node(self) -> int:
        """GPUs the job asks for on each node (gpus_per_node, gpus or a gpu GRES; gpus_per_task x tasks)."""
        return gpus_on_each_node({f: getattr(self, f) for f in SHAPE_FIELDS}, self.gpus, self.gres)

    @property
    def nproc_per_node(self) -> int:
        """Ranks on each node of a distributed start: ``ntasks_per_node`` if given, else one per GPU (at least 1)."""
        return self.ntasks_per_node or max(1, self.gpus_on_each_node)

    # -- rendering --------------------------------------------------------------------------------
    def sbatch_argv(self) -> list[str]:
        """The sbatch options, one argument each (no shell involved)."""

        def given(value: object) -> object:  # options whose 0 or "" means "not asked for"
            return value or None

        valued = (  # --name=value, in this order, for each value that is set
            ("job-name", given(self.job_name)),
            ("partition", given(self.partition)),
            ("qos", given(self.qos)),
            ("account", given(self.account)),
            ("gres", f"gpu:{self.gpus}" if self.gpus else None),
            ("gres", given(self.gres)),
            ("cpus-per-task", given(self.cpus_per_task)),
            ("mem", f"{self._mem_mb}M" if self.mem is not None else None),
            ("time", self._time if self.time_limit is not None else None),
            ("array", self.array),
            ("nodes", self.nodes),
            ("ntasks-per-node", self.nproc_per_node if self.distributed or self.ntasks_per_node else None),
            ("gpus-per-node", self.gpus_per_node),
            ("gpus-per-task", given(self.gpus_per_task)),
            ("cpus-per-gpu", given(self.cpus_per_gpu)),
            ("constraint", given(self.constraint)),
            ("nodelist", given(self.nodelist)),
            ("exclude", given(self.exclude)),
            ("nice", self.nice),
        )
        args = ["--parsable", *(f"--{name}={value}" for name, value in valued if value is not None)]
        if self.exclusive:
            args.append("--exclusive")
        if self.requeue is True:
            args.append("--requeue")
        elif self.requeue is False:
            args.append("--no-requeue")
        for name, value in (
            ("open-mode", self.open_mode),
            ("output", self.output),
            ("error", self.error),
            ("chdir", self.working_dir),
            ("comment", self.comment),
        ):
            if value:
                args.append(f"--{name}={value}")
        if self.time_limit_chain is not None:
            args.extend(a for a in self.time_limit_chain.sbatch_args() if a not in args)
        args.extend(str(a) for a in self.sbatch_args)
        return args

    def render_script(self, *, batch_signal: bool = True) -> str:
        """The job script. ``batch_signal=False``: the transport cannot ask Slurm to signal the batch shell
        (``--signal=B:``; slurmrestd 22.05), so a time-limit chain's wrapper signals it itself, from the job's end
        time."""
        lines = [f"#!{self.shell}", "# generated by airflow-provider-gpusched"]
        if self.script is not None:
            body = self.script
            if body.startswith("#!"):  # the user's own shebang wins
                lines = [body.splitlines()[0], lines[1]]
                body = "\n".join(body.splitlines()[1:])
        if lines[0] == f"#!{self.shell}" and os.path.basename(self.shell) in ("bash", "sh", "dash", "zsh", "ksh"):
            lines.extend(contain_prelude())
        if self.time_limit_chain is not None:  # Slurm's restart count, before the job's own lines may change it
            lines.extend(TimeLimitChain.read_restarts())
        for key, value in self.environment.items():
            lines.append(f"export {key}={shlex.quote(str(value))}")
        lines.extend(str(s) for s in self.setup)
        command = self.command if self.command is not None else ()  # None only beside a script (__post_init__)
        if self.script is not None:
            lines.append(body)
        elif self.distributed:
            lines.append(
                slurm_launch_function(self.distributed, self.nproc_per_node, self.rank_exit_grace, self.torchrun)
            )
            argv = ["bash", "-c", command] if isinstance(command, str) else [str(a) for a in command]
            lines.append("gpusched_launch " + shlex.join(argv))
        elif self.time_limit_chain is not None:
            chain: TimeLimitChain = self.time_limit_chain
            argv = [self.shell, "-c", command] if isinstance(command, str) else [str(a) for a in command]
            assert self.chain_records is not None and chain.checkpoint  # (_validate_chain)
            lines.extend(chain.wrap(argv, self.chain_records, chain.checkpoint, self_signal=not batch_signal))
        elif isinstance(command, str):
            lines.append(command)
        else:
            lines.append(shlex.join(str(a) for a in command))
        return "\n".join(lines) + "\n"

    def with_defaults(self, **defaults: Any) -> SlurmJobSpec:
        """A copy where unset fields take ``defaults`` (a connection's partition, account...)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for key, value in defaults.items():
            if key == "sbatch_args":
                values[key] = [*value, *values[key]]
            elif values.get(key) in (None, "", (), []):
                values[key] = value
        return SlurmJobSpec(**values)


_SETTINGS = Settings(SlurmJobSpec)


def array_range(count: int, max_parallel: int | None = None) -> str:
    """The array spec for tasks ``0..count-1``, at most ``max_parallel`` at once: ``array_range(5, 2)`` -> ``'0-4%2'``."""
    if not is_int(count) or count < 1:
        raise InvalidArgumentError("array size", count, "a whole number >= 1")
    if max_parallel is not None and (not is_int(max_parallel) or max_parallel < 1):
        raise InvalidArgumentError("max_array_parallel", max_parallel, "a whole number >= 1")
    return f"0-{count - 1}" + (f"%{max_parallel}" if max_parallel else "")


def parse_array_indices(array: str) -> list[int]:
    """The task ids of an array spec: ``'0-6:2,9%2'`` -> ``[0, 2, 4, 6, 9]``."""
    if not _ARRAY_RE.match(str(array)):
        raise InvalidArgumentError("array", array, "a Slurm array spec such as '0-9', '1,3,5', '0-15:4%2'")
    body = str(array).split("%")[0]
    ids: set[int] = set()
    for part in body.split(","):
        rng, _, step = part.partition(":")
        lo, _, hi = rng.partition("-")
        start, end = int(lo), int(hi) if hi else int(lo)
        ids.update(range(start, end + 1, int(step) if step else 1))
    return sorted(ids)


def job_comment(
    key: str,
    try_number: int | None = None,
    *,
    task: str | None = None,
    work: str | None = None,
    run: str | None = None,
    tag: WorkTag | None = None,
) -> str:
    """The ``--comment`` that marks a job as submitted for a given task instance (see :func:`task_key`):
    ``gpusched:KEY[:task=T][:work=W][:run=R]:try=N``. ``task`` (:func:`task_family_key`) finds the same
    task's jobs in other DAG runs, ``work`` (:func:`work_key`) tells whether such a job does the same work,
    ``run`` is the DAG run (base64url) whose task state says whether anyone still waits for it; ``tag`` adds
    the DAG, task, map index, sweep and class for ``gpusched queue`` (:meth:`WorkTag.comment_fields`)."""
    parts = [f"{COMMENT_PREFIX}{key}"]
    if task:
        parts.append(f"task={task}")
    if work:
        parts.append(f"work={work}")
    encoded = base64.urlsafe_b64encode(run.encode()).decode().rstrip("=") if run else ""
    if encoded and len(encoded) <= 400:  # keep comments short; such a run's orphans are simply not detected
        parts.append("run=" + encoded)
    if try_number is not None:
        parts.append(f"try={try_number}")
    for extra in tag.comment_fields() if tag is not None else ():
        if sum(len(p) + 1 for p in parts) + len(extra) <= MAX_COMMENT:  # what does not fit is left out
            parts.append(extra)
    return ":".join(parts)


def parse_job_comment(comment: str) -> dict[str, str]:
    """The fields of a :func:`job_comment` (``key``, and ``task``, ``work``, ``run``, ``try`` where present);
    ``{}`` for a comment this provider did not write."""
    if not comment.startswith(COMMENT_PREFIX):
        return {}
    key, *rest = comment[len(COMMENT_PREFIX) :].split(":")
    fields_ = {"key": key}
    for part in rest:
        name, sep, value = part.partition("=")
        if sep:
            fields_[name] = value
    if "run" in fields_:
        try:
            fields_["run"] = base64.urlsafe_b64decode(fields_["run"] + "=" * (-len(fields_["run"]) % 4)).decode()
        except (ValueError, UnicodeDecodeError):
            del fields_["run"]
    return fields_


def task_family_key(dag_id: str, task_id: str, map_index: int | None = -1) -> str:
    """The same task (and map index) in every DAG run: how a new run finds jobs an earlier run left behind."""
    raw = "\x1f".join([dag_id, task_id, str(-1 if map_index is None else map_index)])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def work_key(*parts: str) -> str:
    """A short hash of what a job does (its script and resources, or a sweep's trials): equal keys, same work."""
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def task_key(dag_id: str, run_id: str, task_id: str, map_index: int | None = -1) -> str:
    """A short, stable key for one task instance (all tries), safe inside a Slurm comment."""
    raw = "\x1f".join([dag_id, run_id, task_id, str(-1 if map_index is None else map_index)])
    return hashlib.sha256(raw.encode()).hexdigest()[:24]
