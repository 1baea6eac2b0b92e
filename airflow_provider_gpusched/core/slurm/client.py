"""SlurmClient: submit, track, cancel and read the output of Slurm jobs through the CLI.

Tracking many jobs is cheap: :meth:`SlurmClient.statuses` asks ``squeue`` about all of them in one
call; only jobs that left the queue (or just finished) are looked up in the completion record, again
in one call (``sacct`` with slurmdbd, or the ``jobcomp/filetxt`` file, read incrementally).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_gpusched.core.checks import is_int
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.job_shape import gres_gpu_count
from airflow_provider_gpusched.core.slurm.job import COMMENT_PREFIX, SlurmJobSpec, parse_job_comment
from airflow_provider_gpusched.core.slurm.states import (
    JobPhase,
    JobStatus,
    JobTracker,
    aggregate_array,
    classify_state,
    normalize_state,
    parse_duration,
    parse_exit_code,
)
from airflow_provider_gpusched.core.slurm.transport import (
    CommandResult,
    SlurmCommandError,
    SlurmTransport,
    SlurmUnavailableError,
)
from airflow_provider_gpusched.core.text import printable

log = logging.getLogger(__name__)

# squeue --Format fields, each followed by "|" (Name last: it may itself contain "|")
_SQUEUE_FIELDS = (
    "JobID",
    "ArrayJobID",
    "ArrayTaskID",
    "State",
    "Reason",
    "RestartCnt",
    "Partition",
    "NodeList",
    "TimeUsed",
    "Name",
)
SQUEUE_FORMAT = ",".join(f"{f}:|" for f in _SQUEUE_FIELDS)
_SACCT_FIELDS = ("JobIDRaw", "JobID", "State", "ExitCode", "Partition", "NodeList", "ElapsedRaw", "JobName")
_JOBCOMP_KEY = re.compile(r"(?:^| )([A-Za-z][A-Za-z0-9_]*)=")
_INVALID_JOB_ID = "invalid job id specified"
#: every state of a job that has not finished (squeue -t)
_LIVE_STATES = (
    "PENDING,RUNNING,CONFIGURING,COMPLETING,SUSPENDED,REQUEUED,REQUEUE_HOLD,REQUEUE_FED,RESV_DEL_HOLD,"
    "SPECIAL_EXIT,STOPPED,SIGNALING,STAGE_OUT,RESIZING"
)


_JOB_ID = re.compile(r"^\d+(_\d+)?$")
#: what sbatch (and slurmrestd) say when no node of the partition could ever hold the job: said with the sizes of
#: the partition's nodes (:meth:`SlurmClient.too_big_hint`), which Slurm leaves out
TOO_BIG = ("requested node configuration is not available", "memory specification can not be satisfied")


@dataclass(frozen=True)
class NodeSize:
    """One node as sinfo (or slurmrestd's nodes endpoint) describes it: what a job may ask of it."""

    name: str
    partitions: tuple[str, ...]
    cpus: int
    memory_mb: int
    gpus: int


def partition_option(argv: Sequence[str]) -> str | None:
    """The partition an sbatch argv names (``--partition=P``, ``--partition P``, ``-p P``, ``-pP``), or None."""
    found = None
    for i, arg in enumerate(argv):
        if arg.startswith("--partition="):
            found = arg.split("=", 1)[1]
        elif arg in ("--partition", "-p") and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith("-p") and not arg.startswith("--") and len(arg) > 2:
            found = arg[2:]
    return found


def too_big_words(spec: SlurmJobSpec, argv: Sequence[str], nodes: Sequence[NodeSize], default: str | None) -> str:
    """What the job's partition offers on one node, and what of it the job asks for beyond that ('' when the
    partition is unknown): the words added to Slurm's "Requested node configuration is not available"."""
    partition = spec.partition or partition_option(argv) or default
    members = [n for n in nodes if partition is None or partition in n.partitions]
    if not members:
        return ""
    gpus, cpus, memory = (max(getattr(n, k) for n in members) for k in ("gpus", "cpus", "memory_mb"))
    where = f"partition {partition!r}" if partition else "this cluster"
    text = (
        f" — {where} has {len(members)} node(s); the largest has {gpus} GPU(s), {cpus} CPUs and {memory} MB of "
        f"memory ({', '.join(n.name for n in members if n.gpus == gpus)})"
    )
    asks = []
    if spec.gpus_on_each_node > gpus:
        asks.append(f"{spec.gpus_on_each_node} GPUs on each node")
    if spec.cpus_per_task:
        per_node_cpus = spec.cpus_per_task * (spec.ntasks_per_node or 1)
    else:
        per_node_cpus = (spec.cpus_per_gpu or 0) * spec.gpus_on_each_node
    if per_node_cpus > cpus:
        asks.append(f"{per_node_cpus} CPUs on each node")
    if spec.mem is not None and spec._mem_mb > memory:
        asks.append(f"{spec._mem_mb} MB of memory on each node")
    if is_int(spec.nodes) and spec.nodes > len(members):
        asks.append(f"{spec.nodes} nodes")
    if asks:
        text += "; this job asks for " + " and ".join(asks)
    return text


def check_job_ids(job_ids: Iterable[str], argument: str = "job_ids") -> list[str]:
    """Job ids as Slurm commands take them: ``123`` or an array task ``123_4``. Anything else (``--me``,
    ``-oX``, ``1;rm``) is refused, so a value can never become an option of scancel/squeue/scontrol."""
    ids = [str(j) for j in job_ids]
    for job_id in ids:
        if not _JOB_ID.match(job_id):
            raise InvalidArgumentError(argument, job_id, "a Slurm job id such as 123 or an array task such as 123_4")
    return ids


@dataclass
class SubmittedJob:
    job_id: str
    cluster: str | None = None


@dataclass
class AccountingInfo:
    """How this cluster keeps records of finished jobs, and its array limit (read once from ``scontrol show
    config``)."""

    storage_type: str = ""
    jobcomp_type: str = ""
    jobcomp_loc: str = ""
    min_job_age: int = 300
    max_array_size: int = 1001  # Slurm's default: array indices go up to MaxArraySize - 1

    @property
    def has_sacct(self) -> bool:
        return bool(self.storage_type) and not self.storage_type.endswith("/none")

    @property
    def has_jobcomp_file(self) -> bool:
        return self.jobcomp_type.endswith("/filetxt") and bool(self.jobcomp_loc)


class JobCompletionFile:
    """Slurm's jobcomp file (``JobCompType=jobcomp/filetxt``) where accounting has no ``sacct``: read on from
    where it was last read (a half-written last line is read next time, a rotated file from its start), here or
    through the transport's ``tail``; the newest record of each job (and array task) kept."""

    def __init__(self) -> None:
        self._offset = 0
        self.records: dict[str, dict[str, str]] = {}

    def _read(self, runner: SlurmTransport, path: str) -> None:
        if runner.is_local:
            try:
                size = os.path.getsize(path)
            except OSError:
                return
            if size < self._offset:  # the file was rotated
                self._offset = 0
            with open(path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        else:
            data = runner.run(["tail", "-c", f"+{self._offset + 1}", "--", path]).stdout.encode()
        complete = data[: data.rfind(b"\n") + 1]  # a half-written last line is read next time
        self._offset += len(complete)
        for line in jobcomp_records(complete.decode(errors="replace")):
            record = parse_jobcomp_line(line)
            if "JobId" not in record or not record.get("JobState"):
                log.warning("ignoring a completion record without a job id or state: %r", line[:300])
                continue
            if record.get("ArrayJobId") and record.get("ArrayTaskId"):
                key = f"{record['ArrayJobId']}_{record['ArrayTaskId']}"
            else:
                key = record["JobId"]
            self.records[key] = record  # later runs of a requeued job win

    def statuses(self, runner: SlurmTransport, path: str, ids: list[str]) -> dict[str, JobStatus]:
        """The final states of jobs ``ids`` (and their array tasks) the file holds so far."""
        self._read(runner, path)
        wanted = set(ids)
        records = {}
        for key, rec in self.records.items():
            if key.split("_")[0] not in wanted:
                continue
            records[key] = JobStatus.from_accounting(
                key,
                rec.get("JobState", ""),
                rec.get("ExitCode"),
                "jobcomp",
                partition=rec.get("Partition", ""),
                nodes=rec.get("NodeList", ""),
                name=rec.get("Name", ""),
                elapsed=jobcomp_elapsed(rec),
            )
        return records


@dataclass
class SlurmClient:
    """Slurm through its command-line tools, here or over ssh (:class:`~.rest.SlurmRestClient`: through slurmrestd;
    :func:`~.connect.client_for` picks the one for a transport)."""

    runner: SlurmTransport = field(default_factory=SlurmTransport)

    #: the call that reads every job's status, as ``runner.calls`` counts it
    status_call = "squeue"

    _accounting: AccountingInfo | None = field(default=None, init=False, repr=False)
    #: the jobcomp file, followed where accounting has no sacct
    _completions: JobCompletionFile = field(default_factory=lambda: JobCompletionFile(), init=False, repr=False)

    # -- submission -------------------------------------------------------------------------------
    def submit(self, spec: SlurmJobSpec) -> SubmittedJob:
        """``sbatch --parsable [options]`` with the script on standard input; returns the job id.

        The script never touches a file system: no path another user could create or replace between
        writing and submitting, and its ``environment`` values (API keys) are in no file to read or leave
        behind. Errors name sbatch's reason."""
        if self.runner.is_local:
            self._check_paths(spec)
        script = spec.render_script()
        argv = ["sbatch", *spec.sbatch_argv()]
        result = self._run_sbatch(argv, script, spec.array, spec)
        text = result.stdout.strip().splitlines()
        if not text:
            raise SlurmCommandError(argv, 0, f"sbatch printed no job id: {result.stderr.strip()}")
        job_id, _, cluster = text[-1].strip().partition(";")
        if not job_id.isdigit():
            raise SlurmCommandError(argv, 0, f"sbatch printed {text[-1]!r}, expected a job id")
        return SubmittedJob(job_id=job_id, cluster=cluster or None)

    @staticmethod
    def _check_paths(spec: SlurmJobSpec) -> None:
        """Fail before submitting when the output/error file's directory or the working directory is
        missing (Slurm would start the job, fail to open the file and report only "exit code 0")."""
        base = spec.working_dir or os.getcwd()
        if spec.working_dir and "%" not in spec.working_dir and not os.path.isdir(spec.working_dir):
            raise InvalidArgumentError("working_dir", spec.working_dir, "an existing directory")
        for name, path in (("output_path", spec.output), ("error_path", spec.error)):
            if not path:
                continue
            directory = os.path.dirname(os.path.join(base, path)) or base
            if "%" in directory:
                continue  # Slurm fills it in per job; nothing to check here
            if not os.path.isdir(directory):
                raise InvalidArgumentError(name, path, f"a file in an existing directory ({directory} does not exist)")
            if not os.access(directory, os.W_OK | os.X_OK):
                raise InvalidArgumentError(name, path, f"a file in a directory this user can write ({directory})")

    def _run_sbatch(
        self, argv: list[str], script: str | None, array: str | None = None, spec: SlurmJobSpec | None = None
    ) -> CommandResult:
        try:
            return self.runner.run(argv, input=script)
        except SlurmUnavailableError:
            raise
        except SlurmCommandError as exc:
            reason = exc.stderr.replace("sbatch: error: ", "").strip()
            if array and "invalid job array specification" in reason.lower():
                reason += self._array_limit_hint(array)
            if spec is not None and any(words in reason.lower() for words in TOO_BIG):
                reason += self.too_big_hint(spec, argv)
            raise SlurmCommandError(
                argv, exc.returncode, f"Slurm rejected the job: {reason} (sbatch options: {' '.join(argv[1:])})"
            ) from exc

    def _array_limit_hint(self, array: str) -> str:
        """Why Slurm refused an array, when it is its size: Slurm only says "Invalid job array specification"."""
        try:
            limit = self.accounting().max_array_size
        except GpuschedError:
            return ""
        highest = max((int(n) for n in re.findall(r"\d+", array.split("%")[0])), default=0)
        if highest < limit:
            return ""
        return (
            f" — array {array!r} goes up to index {highest}, and this cluster's MaxArraySize is {limit} "
            f"(indices 0 to {limit - 1}); split it into arrays of at most {limit} tasks (a batched Slurm sweep: "
            f"chunk_size <= {limit})"
        )

    def too_big_hint(self, spec: SlurmJobSpec, argv: Sequence[str]) -> str:
        """For a job Slurm refused as too big for any node: what the largest node of its partition has ('' when the
        nodes cannot be read: the refusal is said as it is)."""
        try:
            nodes, default = self.node_sizes()
        except GpuschedError as exc:
            log.info("cannot read the nodes' sizes for the refusal's words: %s", exc)
            return ""
        return too_big_words(spec, argv, nodes, default)

    def node_sizes(self) -> tuple[list[NodeSize], str | None]:
        """Every node's CPUs, memory and GPUs (one ``sinfo`` call), and the default partition."""
        merged: dict[str, NodeSize] = {}
        default = None
        for line in self.runner.run(["sinfo", "-h", "-N", "-o", "%N|%P|%c|%m|%G"]).stdout.splitlines():
            cols = line.strip().split("|")
            if len(cols) != 5:
                continue
            name, part, cpus, memory, gres = cols
            if part.endswith("*"):
                part = default = part.rstrip("*")
            known = merged.get(name)
            merged[name] = NodeSize(
                name=name,
                partitions=(*(known.partitions if known else ()), part),
                cpus=int(cpus) if cpus.isdigit() else 0,
                memory_mb=int(memory) if memory.isdigit() else 0,
                gpus=gres_gpu_count(gres),
            )
        return list(merged.values()), default

    # -- status -----------------------------------------------------------------------------------
    def accounting(self) -> AccountingInfo:
        if self._accounting is None:
            out = self.runner.run(["scontrol", "show", "config"]).stdout
            conf = {}
            for line in out.splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    conf[key.strip()] = value.strip()
            age = re.match(r"\d+", conf.get("MinJobAge", "300"))
            arrays = re.match(r"\d+", conf.get("MaxArraySize", "1001"))
            self._accounting = AccountingInfo(
                storage_type=conf.get("AccountingStorageType", ""),
                jobcomp_type=conf.get("JobCompType", ""),
                jobcomp_loc=conf.get("JobCompLoc", ""),
                min_job_age=int(age.group()) if age else 300,
                max_array_size=int(arrays.group()) if arrays else 1001,
            )
        return self._accounting

    def squeue(self, job_ids: Iterable[str]) -> list[JobStatus]:
        """One ``squeue`` call for all ``job_ids`` (array jobs expand to one entry per task)."""
        ids = sorted({j.split("_")[0] for j in check_job_ids(job_ids)})
        if not ids:
            return []
        argv = ["squeue", "-h", "-r", "-t", "all", "-j", ",".join(ids), "-O", SQUEUE_FORMAT]
        result = self.runner.run(argv, check=False)
        if result.returncode != 0:
            if _INVALID_JOB_ID in result.stderr.lower():
                return []  # none of them is known any more
            result.check()  # raises the right error (transient or not)
        statuses = []
        for line in result.stdout.splitlines():
            if not line.strip():
                continue
            parts = line.rstrip("\n")
            parts = parts[:-1] if parts.endswith("|") else parts
            cols = parts.split("|", len(_SQUEUE_FIELDS) - 1)
            if len(cols) < len(_SQUEUE_FIELDS):
                log.warning("ignoring unexpected squeue line %r", line)
                continue
            raw_id, array_id, task_id, state, reason, restarts, partition, nodes, used, name = cols
            is_array = task_id not in ("N/A", "", "(null)")
            state = normalize_state(state)
            statuses.append(
                JobStatus(
                    job_id=f"{array_id}_{task_id}" if is_array else raw_id,
                    phase=classify_state(state),
                    state=state,
                    reason=printable(reason),
                    restarts=_cli_count(restarts) or 0,
                    partition=printable(partition),
                    nodes=nodes,
                    name=printable(name),
                    elapsed=parse_duration(used),
                    array_job_id=array_id if is_array else None,
                    array_task_id=task_id if is_array else None,
                    source="squeue",
                )
            )
        return statuses

    def completion_records(self, job_ids: Iterable[str]) -> dict[str, JobStatus]:
        """Final states of jobs, keyed like :meth:`squeue` keys them (``ID`` or ``ARRAYID_TASK``)."""
        ids = sorted({j.split("_")[0] for j in check_job_ids(job_ids)})
        if not ids:
            return {}
        acct = self.accounting()
        if acct.has_sacct:
            return self._sacct(ids)
        if acct.has_jobcomp_file:
            return self._completions.statuses(self.runner, self.accounting().jobcomp_loc, ids)
        return {}

    def _sacct(self, ids: list[str]) -> dict[str, JobStatus]:
        argv = ["sacct", "-P", "-n", "-X", "-j", ",".join(ids), "-o", ",".join(_SACCT_FIELDS)]
        out = self.runner.run(argv).stdout
        records: dict[str, JobStatus] = {}
        for line in out.splitlines():
            cols = line.split("|", len(_SACCT_FIELDS) - 1)
            if len(cols) < len(_SACCT_FIELDS):
                continue
            raw_id, job_id, state, exit_code, partition, nodes, elapsed, name = cols
            records[job_id] = JobStatus.from_accounting(
                job_id,
                state,
                exit_code,
                "sacct",
                partition=partition,
                nodes=nodes,
                name=name,
                elapsed=float(elapsed) if elapsed.isdigit() else None,
            )
        return records

    def _scontrol_exit_code(self, job_id: str) -> tuple[int | None, int | None]:
        result = self.runner.run(["scontrol", "-o", "show", "job", check_job_ids([job_id])[0]], check=False)
        match = re.search(r"(?:^| )ExitCode=(\S+)", result.stdout)
        return parse_exit_code(match.group(1)) if match else (None, None)

    def statuses(self, job_ids: Sequence[str], array_sizes: Mapping[str, int] | None = None) -> dict[str, JobStatus]:
        """The status of every job in ``job_ids``: one ``squeue`` call, plus one completion-record
        lookup only when some job has finished or left the queue. Array jobs (ids in ``array_sizes``,
        or any id whose tasks show up) get one aggregated status with the tasks in ``.tasks``."""
        array_sizes = dict(array_sizes or {})
        wanted = check_job_ids(job_ids)
        live = self.squeue(wanted)
        by_id: dict[str, JobStatus] = {s.job_id: s for s in live}
        finished = {s.job_id for s in live if s.is_terminal}
        groups: dict[str, dict[str, JobStatus]] = {}
        for s in live:
            if s.array_job_id:
                groups.setdefault(s.array_job_id, {})[s.job_id] = s
        missing = [j for j in wanted if j not in by_id and j not in groups]
        need_record = (
            finished
            | set(missing)
            | {j for j in wanted if j in groups and any(t.is_terminal for t in groups[j].values())}
        )
        if need_record:
            records = self.completion_records(need_record)
            for key, rec in records.items():
                current = by_id.get(key)
                if current is not None and not current.is_terminal:
                    continue  # requeued: the old run's record is history
                if current is not None:
                    rec.restarts = current.restarts
                by_id[key] = rec
                if rec.array_job_id:
                    groups.setdefault(rec.array_job_id, {})[key] = rec
            for key in finished:  # finished in squeue but no record (no accounting): ask scontrol
                status = by_id[key]
                if status.source == "squeue" and status.exit_code is None:
                    status.exit_code, status.signal = self._scontrol_exit_code(key)
        result: dict[str, JobStatus] = {}
        for job_id in wanted:
            if job_id in groups or job_id in array_sizes:
                result[job_id] = aggregate_array(job_id, groups.get(job_id, {}), array_sizes.get(job_id))
            elif job_id in by_id:
                result[job_id] = by_id[job_id]
            else:
                result[job_id] = JobStatus(job_id=job_id, phase=JobPhase.NOT_FOUND, state="NOT_FOUND", source="none")
        return result

    def status(self, job_id: str, array_size: int | None = None) -> JobStatus:
        return self.statuses([job_id], {job_id: array_size} if array_size else None)[job_id]

    # -- lookup, cancel, output ---------------------------------------------------------------------
    def find_live_jobs(self, comment_prefix: str) -> list[tuple[str, str]]:
        """Unfinished jobs of this user whose comment starts with ``comment_prefix``: ``[(id, comment)]``."""
        argv = ["squeue", "--me", "-h", "-t", _LIVE_STATES, "-O", "JobID:|,ArrayJobID:|,ArrayTaskID:|,Comment:|"]
        found: dict[str, str] = {}
        for line in self.runner.run(argv).stdout.splitlines():
            cols = line.rstrip("|").split("|", 3)
            if len(cols) == 4 and cols[3].startswith(comment_prefix):
                master = cols[1] if cols[2] not in ("N/A", "") else cols[0]
                found.setdefault(master, cols[3])
        return sorted(found.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0)

    def provider_jobs(self) -> list[dict[str, Any]]:
        """This user's unfinished jobs that this provider submitted (their comment starts with ``gpusched:``),
        in one ``squeue`` call: ``job_id`` (``ARRAY_TASK`` for a started array task), ``state``, ``reason``,
        ``restarts``, ``partition``, ``nodes`` (its node list), ``node_count`` (nodes held, or asked for while
        pending), ``elapsed``, ``output`` (the ``--output`` pattern), ``comment``, ``name``."""
        fields = (
            "JobID",
            "ArrayJobID",
            "ArrayTaskID",
            "State",
            "Reason",
            "RestartCnt",
            "Partition",
            "NodeList",
            "TimeUsed",
            "STDOUT",
            "NumNodes",
            "Comment",
            "Name",
        )
        argv = ["squeue", "--me", "-h", "-t", _LIVE_STATES, "-O", ",".join(f"{f}:|" for f in fields)]
        jobs = []
        for line in self.runner.run(argv).stdout.splitlines():
            text = line.rstrip("\n")
            cols = (text[:-1] if text.endswith("|") else text).split("|", len(fields) - 1)
            if len(cols) != len(fields) or not cols[11].startswith(COMMENT_PREFIX):
                continue
            raw_id, array_id, task_id, state, reason, restarts, partition, nodes, used, output, count, comment, name = (
                cols
            )
            is_array = task_id not in ("N/A", "", "(null)")
            jobs.append(
                {
                    "job_id": f"{array_id}_{task_id}" if is_array else raw_id,
                    "state": normalize_state(state),
                    "reason": printable(reason),
                    "restarts": _cli_count(restarts) or 0,
                    "partition": partition,
                    "nodes": "" if nodes in ("", "(null)") else nodes,
                    "elapsed": parse_duration(used),
                    "output": output,
                    "comment": comment,
                    "node_count": _cli_count(count.strip()),
                    "fields": parse_job_comment(comment),
                    "name": printable(name),
                }
            )
        return jobs

    def output_path(self, job_id: str) -> str | None:
        """Where a (pending or running) job writes its output, from ``scontrol show job`` (None if unknown)."""
        result = self.runner.run(["scontrol", "-o", "show", "job", check_job_ids([job_id])[0]], check=False)
        match = re.search(r"(?:^| )StdOut=(\S+)", result.stdout)
        return match.group(1) if match and result.returncode == 0 else None

    def cancel(self, job_ids: Iterable[str], signal: str | None = None) -> None:
        """``scancel [--signal=SIG --full] ids`` (unknown ids are not an error)."""
        ids = check_job_ids(job_ids)
        if not ids:
            return
        argv = ["scancel"]
        if signal:
            if not re.match(r"^[A-Z0-9]+$", str(signal)):
                raise InvalidArgumentError("signal", signal, "a signal name or number such as 'TERM', 'USR1', '15'")
            argv += [f"--signal={signal}", "--full"]
        self.runner.run([*argv, "--", *ids])

    def partitions(self) -> dict[str, dict[str, Any]]:
        """Every partition: ``state`` (up/down...), ``default``, ``gpus`` (nodes x GPUs in their gres)."""
        out: dict[str, dict[str, Any]] = {}
        for line in self.runner.run(["sinfo", "-h", "-o", "%P|%a|%D|%G"]).stdout.splitlines():
            cols = line.strip().split("|")
            if len(cols) != 4:
                continue
            name = cols[0].rstrip("*")
            part = out.setdefault(name, {"state": cols[1], "default": cols[0].endswith("*"), "gpus": 0})
            part["gpus"] += int(cols[2]) * gres_gpu_count(cols[3]) if cols[2].isdigit() else 0
        return out

    def check_connection(self) -> str:
        """Slurm answers: a line that says where and what it has (raises the command's error otherwise)."""
        where = "the local Slurm commands" if self.runner.is_local else f"ssh {self.runner.target}"
        parts = self.partitions()
        return f"{where}: " + "; ".join(
            f"{n}{'*' if p['default'] else ''} {p['state']} {p['gpus']} GPUs" for n, p in parts.items()
        )

    def partition_gpus(self, partition: str | None = None) -> int:
        """GPUs in ``partition`` (the default partition if None): nodes x GPUs in each node's gres."""
        argv = ["sinfo", "-h", "-o", "%D|%G|%P"] + (["-p", partition] if partition else [])
        out = self.runner.run(argv).stdout
        total = 0
        for line in out.splitlines():
            cols = line.strip().split("|")
            if len(cols) != 3 or (partition is None and not cols[2].endswith("*")):
                continue
            total += int(cols[0]) * gres_gpu_count(cols[1])
        if not out.strip():
            raise InvalidArgumentError("partition", partition, "a partition sinfo knows")
        return total

    def tail(self, path: str, lines: int = 50) -> str:
        """The last ``lines`` lines of a job's output file ('' if it does not exist yet)."""
        if not path:
            return ""
        if self.runner.is_local:
            from airflow_provider_gpusched.core.safe_files import open_regular

            try:  # a regular file only: a FIFO planted at the path would block the read forever
                with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as fh:
                    fh.seek(0, os.SEEK_END)
                    size = fh.tell()
                    fh.seek(max(0, size - 256 * 1024))
                    data = fh.read().decode(errors="replace")
            except OSError:
                return ""
            return "\n".join(data.splitlines()[-lines:])
        result = self.runner.run(["tail", "-n", str(lines), "--", path], check=False)
        return result.stdout.rstrip("\n") if result.returncode == 0 else ""

    def read_text(self, path: str, max_bytes: int = 1 << 20, *, tail: bool = False) -> str | None:
        """A small file's text (its first ``max_bytes``; ``tail``: its last ``max_bytes``, from the first whole
        line in them), here or through the login host; None if it does not exist or cannot be read (a regular file
        only: a FIFO planted at the path would block the read)."""
        size = max_bytes + 1 if tail else max_bytes  # a byte more: whether the first line may be cut
        if self.runner.is_local:
            from airflow_provider_gpusched.core.safe_files import open_regular

            try:
                with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as fh:
                    start = fh.seek(max(0, os.fstat(fh.fileno()).st_size - size)) if tail else 0
                    data = fh.read(size)
            except OSError:
                return None
            if start > 0:
                data = data.split(b"\n", 1)[1] if b"\n" in data else data[1:]
            return data.decode(errors="replace")
        result = self.runner.run(["tail" if tail else "head", "-c", str(size), "--", path], check=False)
        if result.returncode != 0:
            return None
        text = result.stdout
        if tail and len(text) > max_bytes:  # (a cut first line of multi-byte text may stay: named as no record)
            text = text.split("\n", 1)[1] if "\n" in text else text[1:]
        return text

    def follow(
        self,
        job_id: str,
        *,
        poll_interval: float = 5.0,
        timeout: float | None = None,
        array_size: int | None = None,
        not_found_timeout: float = 300.0,
        on_line: Callable[[str], None] | None = None,
        on_poll: Callable[[JobStatus], None] | None = None,
        chain: bool = False,
    ) -> JobTracker:
        """Block until the job finishes (scripts, the blocking operator mode); return its tracker.
        State changes and requeues go to ``on_line``; ``on_poll`` is told every status seen (the operator shows
        the job's new output lines then). Slurm being unreachable is retried with backoff
        (up to 60 s), never reported as the job failing."""
        tracker = JobTracker(job_id, not_found_timeout=not_found_timeout, chain=chain)
        deadline = time.monotonic() + timeout if timeout else None
        backoff = poll_interval
        while True:
            try:
                status = self.status(job_id, array_size)
                backoff = poll_interval
            except SlurmUnavailableError as exc:
                log.warning("Slurm unreachable (%s); retrying in %.0fs", exc, backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, 60.0)
                continue
            for line in tracker.update(status):
                if on_line:
                    on_line(line)
            if on_poll:
                on_poll(status)
            if tracker.done:
                return tracker
            if deadline and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} did not finish within {timeout}s (now {status.describe()})")
            time.sleep(poll_interval)

    def wait(self, job_id: str, **kwargs: Any) -> JobStatus:
        """:meth:`follow`, returning the final status."""
        return self.follow(job_id, **kwargs).final_status()


def jobcomp_elapsed(record: Mapping[str, str]) -> float | None:
    """Seconds between a completion record's ``StartTime`` and ``EndTime`` (ISO times; None if either is
    missing or unreadable, e.g. ``Unknown`` for a job cancelled while pending)."""
    from datetime import datetime

    try:
        start = datetime.fromisoformat(record.get("StartTime", ""))
        end = datetime.fromisoformat(record.get("EndTime", ""))
    except ValueError:
        return None
    return max(0.0, (end - start).total_seconds())


def jobcomp_records(text: str) -> list[str]:
    """The records of a ``jobcomp/filetxt`` chunk: a record starts with ``JobId=``; a line that does not is
    the rest of the one before (a job name with a newline in it), joined back with the newline."""
    records: list[str] = []
    for line in text.split("\n"):
        if line.startswith("JobId=") or not records:
            records.append(line)
        else:
            records[-1] += "\n" + line
    return [r for r in records if r.strip()]


def parse_jobcomp_line(line: str) -> dict[str, str]:
    """A ``jobcomp/filetxt`` line (``JobId=5 Name=my job JobState=COMPLETED ...``) as a dict.
    Values may contain spaces; a new field starts at `` Key=``."""
    matches = list(_JOBCOMP_KEY.finditer(line.strip()))
    record = {}
    text = line.strip()
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        record[m.group(1)] = text[m.end() : end]
    return record


def _cli_count(text: str, limit: int = 1 << 32) -> int | None:
    """A count the Slurm CLI printed: 1-10 ASCII digits up to ``limit``, else None (a 5000-digit or non-ASCII
    "count" is no count: ``int()`` would raise deep in a poll, as slurmrestd's client refuses it)."""
    if re.fullmatch(r"[0-9]{1,10}", text) is None:
        return None
    value = int(text)
    return value if value <= limit else None
