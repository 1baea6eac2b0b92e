"""What the UI's Slurm job view shows: the record a Slurm task publishes through Airflow (XCom
:data:`SLURM_JOB_XCOM`) when it submits its job and again when the job ends, optionally refreshed by a live,
shared and cached status poll (:class:`CachedStatuses`) where the api-server can reach Slurm.

The record says only *where* the job runs (``via``: ``local`` or ``user@host``), never how to run a command there:
anyone allowed to write XCom could forge a record, so the api-server polls only through its own local Slurm
configuration, with the job id checked to be digits. Fields are checked when read back (:func:`read_job_record`)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from typing_extensions import NotRequired, TypedDict

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.records import open_view
from airflow_provider_gpusched.core.safe_files import BadRecordError
from airflow_provider_gpusched.core.slurm.states import JobStatus, array_task_order
from airflow_provider_gpusched.core.slurm.transport import LOCAL_TARGET

SLURM_JOB_XCOM = "gpusched_slurm_job"


#: how a requeue's line ended before issue 76 (core/slurm/states.py JobTracker)
_STILL_WAITING = "; still waiting for it to complete"


def via(runner_description: Mapping[str, Any]) -> str:
    """Where a runner sends Slurm commands, for people: ``local`` or ``[user@]host[:port]``."""
    host = runner_description.get("host")
    if not host:
        return LOCAL_TARGET
    user, port = runner_description.get("user"), runner_description.get("port")
    return f"{user + '@' if user else ''}{host}{f':{port}' if port else ''}"


def job_record(
    job_id: str,
    *,
    output_path: str,
    runner: Mapping[str, Any],
    array: str | None = None,
    submitted: float | None = None,
    status: JobStatus | None = None,
    preemptions: int = 0,
    preemption_events: list[str] | None = None,
    tail: str = "",
    tail_path: str = "",
    problem: str | None = None,
    chain_records: str = "",
    segments: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The record published at submission (``status`` None) and when the job ended (``final``). A time-limit
    chain's job says where its segments are recorded (``chain_records``), and at its end what they were."""
    record: dict[str, Any] = {
        "job_id": str(job_id),
        "output_path": output_path,
        "via": via(runner),
        "array": array or "",
        "submitted": submitted if submitted is not None else time.time(),
        "final": status is not None or bool(problem),
        "status": status.to_dict() if status is not None else None,
        "preemptions": int(preemptions),
        "preemption_events": list(preemption_events or [])[-20:],
        "tail": tail[-20000:],
        "tail_path": tail_path,
        "problem": problem or "",
    }
    if chain_records:
        record["chain_records"] = chain_records
        record["segments"] = list(segments or [])[-1000:]
    return record


def claim_output_folder(folder: str, dag_id: str) -> str:
    """Record that a task of DAG ``dag_id`` keeps its Slurm job's files (output, a chain's records) in its task folder
    ``folder`` (under ``[gpusched] slurm_output_dir``): ``dags.json``, the record a sweep folder keeps
    (core/sweep/records/store.py). The UI reads a task folder's files only under a DAG it lists (:func:`folder_refusal`).
    Folder names are one to one (settings.path_part: no two DAG ids share one); a folder that lists another DAG all
    the same (written by hand, or by a version whose names were not) is refused (:class:`GpuschedError`): its DAG's
    readers would see this job's files. Returns '' or why the record could not be written (the job still runs; the
    UI shows its output once it ends, from its record)."""
    from airflow_provider_gpusched.core.safe_files import write_json_atomic
    from airflow_provider_gpusched.core.sweep.records.store import DAGS_FILE, folder_dags

    dags = folder_dags(folder) or []
    if dag_id in dags:
        return ""
    if dags:
        raise GpuschedError(
            f"the task folder {folder} is DAG {dags[0]!r}'s (its {DAGS_FILE}), and DAG {dag_id!r} maps to it too: "
            f"each DAG's readers would see the other's job output. Remove the folder if DAG {dags[0]!r} no longer "
            f"needs it (a folder of an older version, whose folder names two DAG ids could share), else give one of "
            f"the DAGs another id"
        )
    try:
        write_json_atomic(os.path.join(folder, DAGS_FILE), {"dags": [dag_id]})
    except OSError as exc:
        return (
            f"cannot write {os.path.join(folder, DAGS_FILE)} ({exc.strerror or exc}): the UI will not show this "
            f"job's output while it runs"
        )
    return ""


def folder_refusal(folder: str, dag_id: str, root: str) -> str:
    """Why the files in task folder ``folder`` are not shown under DAG ``dag_id`` ('' when they are): only a folder
    under ``root`` (``[gpusched] slurm_output_dir``) whose ``dags.json`` lists that DAG (:func:`claim_output_folder`;
    core/sweep/records/store.py :func:`~airflow_provider_gpusched.core.sweep.records.store.folder_refusal`)."""
    from airflow_provider_gpusched.core.sweep.records.store import DAGS_FILE
    from airflow_provider_gpusched.core.sweep.records.store import folder_refusal as refusal

    return refusal(
        folder,
        dag_id,
        root,
        outside="its task folder {folder} is not under [gpusched] slurm_output_dir ({root})",
        unlisted=(
            "its task folder {folder} does not list DAG {dag_id} (its "
            + DAGS_FILE
            + ", written when the job is submitted): its files are not shown here"
        ),
    )


def read_job_record(data: Any, source: str) -> dict[str, Any]:
    def bad(key: str, expected: str) -> BadRecordError:
        return BadRecordError(f"{source}: key {key!r}: expected {expected}")

    if not isinstance(data, dict):
        raise BadRecordError(f"{source}: expected a JSON object, got {type(data).__name__}")
    job_id = data.get("job_id")
    if not isinstance(job_id, str) or not job_id.replace("_", "").isdigit():
        raise bad("job_id", "a Slurm job id")
    for key in ("output_path", "array", "tail", "tail_path", "problem", "chain_records"):
        if not isinstance(data.get(key, ""), str):
            raise bad(key, "a string")
    if not isinstance(data.get("via"), str):
        raise bad("via", "a string")
    if not isinstance(data.get("final"), bool):
        raise bad("final", "true or false")
    status = data.get("status")
    if status is not None:
        try:
            data = {**data, "status": JobStatus.from_dict(status).to_dict()}
        except (TypeError, ValueError, KeyError):
            raise bad("status", "a job status as JobStatus.to_dict() writes it") from None
    if "segments" in data:
        from airflow_provider_gpusched.core.slurm.chain import SEGMENT

        segments = SEGMENT.read_list(data["segments"], f"{source}: key 'segments'", max_items=1000)
        data = {**data, "segments": [s.to_dict() for s in segments]}
    checked: dict[str, Any] = data
    return checked


@open_view
class ArrayTaskView(TypedDict):
    task: str | None
    state: str | None
    exit_code: int | None
    nodes: str
    elapsed: float | None
    requeues: int


@open_view
class SegmentView(TypedDict):
    """A time-limit chain's segment (core/slurm/chain.py Segment)."""

    job: str
    segment: int
    node: str | None
    started: float | None
    ended: float | None
    outcome: str | None
    detail: str | None
    signalled: NotRequired[float | None]


@open_view
class JobView(TypedDict):
    """A task instance's Slurm job (:func:`job_view`), as the Slurm tab gets it."""

    job_id: str
    output_path: str
    array: str | None
    via: str  # the transport: this host's CLI or ssh to a login node
    submitted: float | None
    final: bool
    source: str  # where the status comes from: live (cached) or recorded
    preemptions: int
    preemption_events: list[str]
    problem: str
    state: str
    phase: str | None
    exit_code: int | None
    nodes: str
    partition: str
    requeues: int
    elapsed: float | None
    reason: str
    tasks: list[ArrayTaskView]  # an array's tasks
    tails: dict[str, str]  # array task id or "" -> its output's tail
    tail_path: str
    signal: NotRequired[int | None]
    segments: NotRequired[list[SegmentView]]  # a time-limit chain's
    tail_source: NotRequired[str]
    task_state: NotRequired[str]
    found: NotRequired[bool]


def job_view(
    record: Mapping[str, Any], live: JobStatus | None = None, tails: Mapping[str, str] | None = None
) -> JobView:
    """JSON for the page: the newest status (live if given and the record is not final), one row per array task,
    and output tails (``tails``: array task id or "" -> text; falls back to the recorded tail)."""
    status = record.get("status")
    source = "recorded at the end of the job" if status else "recorded at submission"
    if live is not None and not record.get("final"):
        status, source = live.to_dict(), f"live ({live.source}, cached)"
    view: dict[str, Any] = {
        "job_id": record["job_id"],
        "output_path": record["output_path"],
        "array": record["array"],
        "via": record["via"],
        "submitted": record.get("submitted"),
        "final": record["final"],
        "source": source,
        "preemptions": record.get("preemptions", 0),
        # records written before issue 76 end each line with "; still waiting for it to complete", which the tab
        # showed after the job had completed: the line says what happened, and only that
        "preemption_events": [str(line).removesuffix(_STILL_WAITING) for line in record.get("preemption_events", [])],
        "problem": record.get("problem", ""),
    }
    if "segments" in record:
        view["segments"] = list(record["segments"])
    if status is None:
        view.update(
            state="SUBMITTED",
            phase="pending",
            exit_code=None,
            nodes="",
            partition="",
            requeues=0,
            elapsed=None,
            reason="",
            tasks=[],
        )
    else:
        tasks = status.get("tasks") or {}
        # an array's own status has no node or partition: its tasks have
        nodes = status.get("nodes") or ",".join(sorted({t.get("nodes") for t in tasks.values() if t.get("nodes")}))
        partition = status.get("partition") or ",".join(
            sorted({t.get("partition") for t in tasks.values() if t.get("partition")})
        )
        view.update(
            state=status.get("state") or status.get("phase", "").upper(),
            phase=status.get("phase"),
            exit_code=status.get("exit_code"),
            signal=status.get("signal"),
            nodes=nodes,
            partition=partition,
            requeues=max(int(status.get("restarts") or 0), int(record.get("preemptions") or 0)),
            elapsed=status.get("elapsed"),
            reason=status.get("reason", ""),
            tasks=[
                {
                    "key": k,
                    "task": tasks[k].get("array_task_id"),
                    "state": tasks[k].get("state"),
                    "exit_code": tasks[k].get("exit_code"),
                    "nodes": tasks[k].get("nodes", ""),
                    "elapsed": tasks[k].get("elapsed"),
                    "requeues": tasks[k].get("restarts", 0),
                }
                for k in sorted(tasks, key=array_task_order)
            ],
        )
    tails = dict(tails or {})
    if not tails and record.get("tail"):
        tails = {"": record["tail"]}
    view["tails"] = tails
    view["tail_path"] = record.get("tail_path", "")
    return cast(JobView, view)


class CachedStatuses:
    """Live job statuses for the UI: every job id asked for within ``ttl`` seconds is answered from one poll per
    cluster (``statuses(job_ids)`` of a client), however many pages are open — never a Slurm call per view."""

    def __init__(self, ttl: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.clock = ttl, clock
        self._lock = threading.Lock()
        self._known: dict[str, dict[str, tuple[float, JobStatus | None]]] = {}  # cluster -> id -> (polled, status)
        self._asked: dict[str, dict[str, float]] = {}  # cluster -> id -> when a page last asked for it
        self.polls = 0

    def get(self, cluster: str, job_id: str, client_factory: Callable[[], Any]) -> JobStatus | None:
        with self._lock:
            jobs = self._known.setdefault(cluster, {})
            asked = self._asked.setdefault(cluster, {})
            now = self.clock()
            asked[job_id] = now
            hit = jobs.get(job_id)
            if hit is not None and now - hit[0] < self.ttl:
                return hit[1]
            # one poll for this job and every other job of the cluster somebody looked at recently
            wanted = sorted(j for j, t in asked.items() if now - t < 10 * self.ttl)
            self.polls += 1
            try:
                found = client_factory().statuses(wanted)
            except Exception:  # noqa: BLE001 - Slurm unreachable from here: the page shows the record
                found = {}
            for j in wanted:
                jobs[j] = (now, found.get(j))
            for j in [j for j, t in asked.items() if now - t > 10 * self.ttl]:
                del asked[j]
                jobs.pop(j, None)
            return jobs[job_id][1]
