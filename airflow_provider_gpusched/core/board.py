"""The GPU board: per host and GPU, what is leased by which task and class, what is free, who is yielding, what
normal work waits, and GPU time per class over a window — built from records, not from this host's files.

The api-server that shows the board usually runs on another machine than the GPU workers, so each local-GPU task
*publishes* what the board needs through Airflow (its XCom): its host's inventory and its lease while it holds one
(:func:`lease_record`), and its GPU time when it ends. The board reads those records back; every one is validated
(:func:`read_lease_record`, against the bounds of core/gpu/published.py) and a bad one is reported, never trusted.

It sits above the gpu package (it reads the fleet's host records and the quotas' view too: core/fleet.py,
core/quota/report.py); core/gpu/board.py is its old name, kept as a deprecated alias."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, cast

from typing_extensions import NotRequired, TypedDict

from airflow_provider_gpusched.core.checks import is_finite_number
from airflow_provider_gpusched.core.gpu.accounting import accounting_totals, gpu_share
from airflow_provider_gpusched.core.gpu.inventory import GPUInfo
from airflow_provider_gpusched.core.gpu.published import MAX_GPU_MEMORY, MAX_HOST_GPUS, MAX_NAME
from airflow_provider_gpusched.core.gpu.telemetry import lease_memory, measured_gpus, over_reservation
from airflow_provider_gpusched.core.quota.report import QuotaView
from airflow_provider_gpusched.core.records import (
    IndexKey,
    RecordType,
    Seconds,
    Timestamp,
    open_view,
    record_class,
    says,
)
from airflow_provider_gpusched.core.safe_files import BadRecordError

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.fleet import HostRecord

WINDOWS = {"hour": 3600.0, "day": 86400.0}
#: the XCom keys under which a local-GPU task publishes its lease, that it waits for GPUs, and its GPU time
LEASE_XCOM = "gpusched_lease"
#: the leases a task holds now when it holds several or in turn (a batched runner, an asynchronous sweep's worker): a
#: list of :data:`LEASE_XCOM` records, published on each tick, [] once it holds none; the board reads it from
#: running tasks, so their leases show while held even where the api-server cannot read the host's lease directory
HELD_LEASES_XCOM = "gpusched_held_leases"
#: the most leases one such record may list
MAX_HELD_LEASES = 256
WAIT_XCOM = "gpusched_wait"
GPU_TIME_XCOM = "gpu_time"


Name = Annotated[str, says(f"a non-empty string of at most {MAX_NAME} characters", min_length=1, max_length=MAX_NAME)]
HostGPUIndex = Annotated[int, says(f"a GPU index below {MAX_HOST_GPUS}", ge=0, lt=MAX_HOST_GPUS)]
GPUBytes = Annotated[int, says("bytes of GPU memory (at most 16 TiB)", ge=0, le=MAX_GPU_MEMORY)]


@record_class
@dataclass
class BoardGPU:
    """A GPU of a host, as the board lists it."""

    index: HostGPUIndex
    uuid: Annotated[str, says("a GPU UUID", max_length=MAX_NAME)]
    name: Annotated[str, says("a GPU model name", max_length=MAX_NAME)]
    memory_total: GPUBytes
    simulated: Annotated[bool, says("true or false")]


@record_class
@dataclass
class BoardLease:
    """One task's lease as it published it (XCom :data:`LEASE_XCOM`, written by :func:`lease_record`)."""

    host: Name
    lease_id: Name
    gpus: Annotated[
        list[HostGPUIndex],
        says(
            f"a non-empty list of at most {MAX_HOST_GPUS} GPU indices below {MAX_HOST_GPUS}",
            strict=None,
            min_length=1,
            max_length=MAX_HOST_GPUS,
        ),
    ]
    memory: Annotated[
        dict[IndexKey, GPUBytes],
        says("an object of GPU index -> reserved bytes", strict=None, max_length=MAX_HOST_GPUS),
    ]
    whole: Annotated[bool, says("true or false")]
    job_class: Name
    started: Annotated[Timestamp, says("a time stamp", strict=None)]
    dag_id: Name
    run_id: Name
    task_id: Name
    map_index: Annotated[int, says("an integer")] = -1
    priority: Annotated[int, says("an integer")] = 0
    #: the normal work this (idle) lease was asked to yield to
    yielding_to: Annotated[str, says("a string", max_length=500)] = ""
    inventory: Annotated[
        list[BoardGPU], says(f"a list of at most {MAX_HOST_GPUS} GPUs", strict=None, max_length=MAX_HOST_GPUS)
    ] = field(default_factory=list)
    #: the quota group it counts for (docs/quotas.md); '' without quotas
    group: Annotated[str, says("a string", max_length=MAX_NAME)] = ""


BOARD_LEASE = RecordType(BoardLease, name="published lease")


def lease_record(
    host: str,
    lease_view: dict[str, Any],
    gpus: Iterable[GPUInfo],
    *,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int = -1,
    yielding_to: str = "",
) -> dict[str, Any]:
    """The record a task publishes while it holds a lease (``lease_view``: the lease's own fields)."""
    return BOARD_LEASE.dump(
        BoardLease(
            host=host,
            lease_id=lease_view["lease_id"],
            gpus=list(lease_view["gpus"]),
            memory={int(k): int(v) for k, v in lease_view["memory"].items()},
            whole=bool(lease_view["whole"]),
            job_class=lease_view.get("job_class", "normal"),
            priority=int(lease_view.get("priority", 0)),
            started=float(lease_view.get("created", time.time())),
            dag_id=dag_id,
            run_id=run_id,
            task_id=task_id,
            map_index=map_index,
            yielding_to=yielding_to,
            inventory=[BoardGPU(g.index, g.uuid, g.name, g.memory_total, g.simulated) for g in gpus],
            group=str((lease_view.get("work") or {}).get("group", ""))[:MAX_NAME],
        )
    )


def read_lease_record(data: Any, source: str) -> BoardLease:
    """A published lease record, checked field by field; :class:`BadRecordError` names ``source`` and the key."""
    return BOARD_LEASE.read(data, source)


def read_held_leases_record(data: Any, source: str) -> list[BoardLease]:
    """A published :data:`HELD_LEASES_XCOM` record: a list of at most :data:`MAX_HELD_LEASES` lease records, each
    checked (:class:`BadRecordError` names ``source``, the position and the key)."""
    if not isinstance(data, list) or len(data) > MAX_HELD_LEASES:
        raise BadRecordError(f"{source}: expected a list of at most {MAX_HELD_LEASES} lease records")
    return [read_lease_record(item, f"{source}[{i}]") for i, item in enumerate(data)]


@dataclass
class KnownHost:
    """A GPU host the board lists even when no task holds a lease on it: the api-server's own host (its inventory
    read now) or a host whose tasks published their inventory lately (``seen``: how the board knows it)."""

    host: str
    inventory: list[BoardGPU]
    seen: str
    #: a fleet host (docs/fleet.md): when it last published its record, whether that is recent enough to count it
    #: as up, and the GPUs that processes of others hold
    fleet: dict[str, Any] | None = None


def fleet_known_host(record: HostRecord, now: float) -> KnownHost:
    """A fleet host's published record (:class:`~airflow_provider_gpusched.core.fleet.HostRecord`) as the board
    lists it: its whole inventory, whether it is up, the GPUs that others hold."""
    age = max(0.0, record.age(now))
    fresh = record.fresh(now)
    seen = (
        f"its fleet record, {age:.0f}s old"
        if fresh
        else f"its fleet record: NO RECORD FOR {age:.0f}s, the host or its worker is down"
    )
    if record.clock_off:
        seen += f" ({record.clock_note()})"
    return KnownHost(
        record.host,
        [
            BoardGPU(g.index, g.uuid, g.name, g.memory_total, g.simulated or record.source == "simulated")
            for g in record.gpus
        ],
        seen,
        fleet={
            "published": record.seen,
            "age": round(age, 1),
            "up": fresh,
            "clock_off": round(record.clock_off, 1),
            "foreign_busy": list(record.foreign_busy),
            "leases": len(record.leases),
            "address": record.address,
        },
    )


_LEASE_ID = re.compile(r"\b[0-9a-f]{16}\b")


def explain_wait(why: str, names: dict[str, str]) -> dict[str, Any]:
    """A wait reason as the board shows it: the first clause as ``reason``, the others as ``details``, and each
    lease id replaced by the task that holds it (``names``: lease id -> task), else ``lease <first 8 digits>``."""
    text = _LEASE_ID.sub(lambda m: names.get(m.group(0), f"lease {m.group(0)[:8]}"), why or "")
    parts = [part.strip() for part in text.split("; ") if part.strip()]
    return {"reason": parts[0] if parts else "no reason recorded", "details": parts[1:]}


@record_class
@dataclass
class WaitRecord:
    """What a task publishes when it starts waiting for GPUs (XCom :data:`WAIT_XCOM`)."""

    host: Name
    request: Name  # what it asks for, in words
    job_class: Name
    dag_id: Name
    run_id: Name
    task_id: Name
    since: Annotated[Timestamp, says("a time stamp", strict=None)]
    priority: Annotated[int, says("an integer")] = 0
    map_index: Annotated[int, says("an integer")] = -1
    why: Annotated[str, says("a string of at most 2000 characters", max_length=2000)] = ""


WAIT = RecordType(WaitRecord, name="published wait")


def wait_record(
    host: str,
    request: str,
    job_class: str,
    priority: int,
    why: str,
    since: float,
    *,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int = -1,
) -> dict[str, Any]:
    """The record a task publishes when it starts waiting for GPUs (``request``: what it asks for, in words)."""
    return WAIT.dump(
        WaitRecord(
            host=host,
            request=request,
            job_class=job_class,
            priority=int(priority),
            why=why[:500],
            since=float(since),
            dag_id=dag_id,
            run_id=run_id,
            task_id=task_id,
            map_index=map_index,
        )
    )


def read_wait_record(data: Any, source: str) -> dict[str, Any]:
    """A published wait record, checked (as the board's data: a dict)."""
    return WAIT.dump(WAIT.read(data, source))


NonNegativeSeconds = Annotated[float, says("a non-negative number", strict=None, ge=0)]


@record_class
@dataclass
class GPUTimeRecord:
    """A task's GPU time, published when it ends (XCom :data:`GPU_TIME_XCOM`): a ledger record of the board's
    per-class GPU time (``time``: when the task ended; absent in records of older versions, then the task's end)."""

    job_class: Annotated[str, says("a job class name", max_length=MAX_NAME)]
    gpu_seconds: Annotated[Seconds, says("a non-negative number", strict=None)] = 0.0
    lost_gpu_seconds: Annotated[Seconds, says("a non-negative number", strict=None)] = 0.0
    preemptions: Annotated[int, says("an integer")] = 0
    time: Annotated[Timestamp | None, says("a time stamp", strict=None)] = None
    #: what happened to it: each preemption, in words
    events: Annotated[
        list[Annotated[str, says("a string", max_length=2000)]],
        says("a list of at most 1000 strings", strict=None, max_length=1000),
    ] = field(default_factory=list)


GPU_TIME = RecordType(GPUTimeRecord, name="published GPU time")


def gpu_time_record(job_class: str, ended: float, history: Mapping[str, Any]) -> dict[str, Any]:
    """The record a local-GPU task publishes when it ends (``history``: its preemption history's counts)."""
    return GPU_TIME.dump(
        GPUTimeRecord(
            job_class=job_class,
            time=ended,
            gpu_seconds=float(history.get("gpu_seconds", 0.0)),
            lost_gpu_seconds=float(history.get("lost_gpu_seconds", 0.0)),
            preemptions=int(history.get("preemptions", 0)),
            events=[str(e)[:2000] for e in history.get("events", ())][-1000:],
        )
    )


def read_gpu_time_record(data: Any, source: str, ended: float | None = None) -> dict[str, Any]:
    """A task's published GPU time as a ledger record (``time``: when the task ended)."""
    got = GPU_TIME.read(data, source)
    if got.time is None:
        if ended is None:
            raise BadRecordError(f"{source}: key 'time': expected a time stamp, got None")
        got.time = float(ended)
    return GPU_TIME.dump(got)


def _task_name(dag_id: str, task_id: str, map_index: int) -> str:
    if not task_id:
        return dag_id or "(a DAG you cannot see)"
    return f"{dag_id} › {task_id}" + (f"[{map_index}]" if map_index >= 0 else "")


def _add_measured(gpus: list[dict[str, Any]], record: Mapping[str, Any], names: Mapping[str, str], now: float) -> None:
    """Each GPU's measured use from its host's telemetry record (core/gpu/telemetry.py), each lease's measured
    memory on it and whether that is over what it reserved, and who each process on it belongs to."""
    measured = measured_gpus(record, now)
    for gpu in gpus:
        m = measured.get(gpu["index"])
        if m is None:
            continue
        for p in m["processes"]:
            p["task"] = names.get(p["lease_id"], "") if p["ours"] else ""
        gpu["measured"] = m
        for lease in gpu["leases"]:
            used = lease_memory(m["processes"], lease["lease_id"])
            lease["memory_used"] = used
            lease["over_reservation"] = over_reservation(used, lease["memory"], lease["whole"])


# -- the board as the api-server answers it (GET /gpusched/api/gpus: its response model) -------------------------


@open_view
class BoardLeaseView(TypedDict):
    """A lease on one GPU of the board."""

    lease_id: str
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    job_class: str
    priority: int
    started: float
    seconds: float
    whole: bool
    memory: int  # bytes reserved on this GPU
    yielding_to: str
    memory_used: NotRequired[int | None]  # measured (telemetry)
    over_reservation: NotRequired[bool]
    group: NotRequired[str]  # the quota group (docs/quotas.md)
    quota: NotRequired[str]  # "within" its group's quota, or "borrowed" (reclaimable)


@open_view
class GPUProcessView(TypedDict):
    """A process on a GPU, as its host's telemetry saw it (``ours``: a lease of this provider's)."""

    pid: int
    user: NotRequired[str | None]
    used_memory: NotRequired[int | None]
    lease_id: NotRequired[str | None]
    ours: bool
    unattributed: bool


@open_view
class MeasuredView(TypedDict):
    """What a GPU is measured doing (core/gpu/telemetry.measured_gpus): the newest figures and the recent series
    (``[time, utilisation %, memory used, temperature, power]`` rows)."""

    time: float
    age: float
    stale: bool
    utilization: float | None
    memory_used: int
    memory_total: int
    temperature: float | None
    power_watts: float | None
    simulated: bool
    series: list[list[float | None]]
    processes: list[GPUProcessView]
    others: int
    others_memory: int
    resolution: float
    window: float


@open_view
class FleetHostRecord(TypedDict):
    """A fleet host's published record, as the board shows it."""

    published: float
    age: float
    up: bool
    clock_off: float
    foreign_busy: list[int]
    leases: int
    address: str | None


@open_view
class BoardGPUView(TypedDict):
    index: int
    uuid: str
    name: str
    memory_total: int
    simulated: bool
    memory_leased: int
    whole_taken: bool
    leases: list[BoardLeaseView]
    held_by_others: bool  # a process of another user holds it (a fleet host's record says)
    memory_free: int
    measured: NotRequired[MeasuredView]  # what telemetry measured: core/gpu/telemetry.measured_gpus


@open_view
class HostTelemetryView(TypedDict):
    source: str
    sampled_by: str
    error: str
    resolution: float
    window: float


@open_view
class BoardHostView(TypedDict):
    host: str
    simulated: bool
    gpus: list[BoardGPUView]
    seen: str  # how the board knows the host
    fleet: FleetHostRecord | None  # a fleet host's record
    telemetry: HostTelemetryView | None


@open_view
class WaitView(TypedDict):
    """A task waiting for GPUs: its published wait record (:class:`WaitRecord`) and its reason split."""

    host: str
    request: str
    job_class: str
    dag_id: str
    run_id: str
    task_id: str
    since: float
    priority: int
    map_index: int
    why: str
    reason: str
    details: list[str]
    state: NotRequired[str]


@open_view
class ClassTime(TypedDict):
    attempts: int
    gpu_seconds: float
    lost_gpu_seconds: float
    preemptions: int
    running: NotRequired[int]


@open_view
class BoardView(TypedDict):
    """The GPU board (:func:`build_board`), as ``GET /gpusched/api/gpus`` answers it."""

    generated: float
    hosts: list[BoardHostView]
    waiting: list[WaitView]
    waiting_shared: list[str]  # what every waiting task says alike, said once
    gpu_time: dict[str, dict[str, ClassTime]]  # window ("hour", "day") -> job class -> totals
    problems: list[str]  # records that were refused, and why
    cut: NotRequired[list[str]]  # what the answer left out (too many leases, hosts...)
    api_server_host: NotRequired[str]
    #: team quotas (core/quota/report.QuotaView): each group's quota, use, borrowed, lent, who waits on whom
    quotas: NotRequired[QuotaView | None]


def build_board(
    leases: Iterable[BoardLease],
    *,
    waiting: Iterable[dict[str, Any]] = (),
    ledger: Iterable[dict[str, Any]] = (),
    problems: Iterable[str] = (),
    now: float | None = None,
    known_hosts: Iterable[KnownHost] = (),
    telemetry: Mapping[str, Mapping[str, Any]] | None = None,
    quotas: Mapping[str, Any] | None = None,
) -> BoardView:
    """The board as JSON-ready data: hosts (sorted) with their GPUs, each GPU's leases and memory leased/free
    (``known_hosts`` are listed too, their GPUs free unless a lease says otherwise); the work waiting, each
    reason split by :func:`explain_wait` and the details every waiting task shares said once
    (``waiting_shared``); GPU time per class over the last hour and day (``ledger``: accounting records with
    ``time``, ``job_class``, ``gpu_seconds``, ``lost_gpu_seconds``, ``preempted``); records that were refused.
    ``telemetry`` (host -> its checked telemetry record, with ``sampled_by`` and ``error``) adds what each GPU is
    measured doing (``measured``) and flags a lease whose processes use more memory than it reserved. ``quotas``
    (a :class:`~airflow_provider_gpusched.core.quota.report.QuotaView` as a dict) adds each lease's group and
    whether it runs within its quota or borrowed, and the groups' table."""
    quota_leases = (quotas or {}).get("leases", {})
    now = time.time() if now is None else now
    hosts: dict[str, dict[int, dict[str, Any]]] = {}
    seen: dict[str, str] = {}
    fleet: dict[str, dict[str, Any]] = {}
    leases_seen = list(leases)
    for lease in leases_seen:
        _place_lease(hosts, seen, lease, quota_leases, now)
    for known in known_hosts:
        _place_known_host(hosts, seen, fleet, known)
    board_hosts = _host_rows(hosts, seen, fleet)
    names = {lease.lease_id: _task_name(lease.dag_id, lease.task_id, lease.map_index) for lease in leases_seen}
    for entry in board_hosts:
        _add_telemetry(entry, (telemetry or {}).get(entry["host"]), names, now)
    waits, shared = _waits(waiting, names)
    gpu_time = _gpu_time(ledger, leases_seen, board_hosts, now)
    # the hosts, waits and totals are built up key by key: their shape is BoardView's (the api-server's response
    # model checks every answer against it)
    return {
        "generated": now,
        "hosts": cast("list[BoardHostView]", board_hosts),
        "waiting": cast("list[WaitView]", waits),
        "waiting_shared": shared,
        "gpu_time": cast("dict[str, dict[str, ClassTime]]", gpu_time),
        "problems": list(problems),
        "quotas": cast(QuotaView, dict(quotas)) if quotas is not None else None,
    }


def _place_lease(
    hosts: dict[str, dict[int, dict[str, Any]]],
    seen: dict[str, str],
    lease: BoardLease,
    quota_leases: Mapping[str, Any],
    now: float,
) -> None:
    """Put ``lease`` on its host's GPUs (``hosts``: host -> GPU index -> the GPU's entry), with its inventory."""
    seen[lease.host] = "running work"
    gpus = hosts.setdefault(lease.host, {})
    for g in lease.inventory:  # the newest record's inventory wins; a GPU no record names is unknown
        gpus.setdefault(g.index, {**asdict(g), "memory_leased": 0, "whole_taken": False, "leases": []})
    for index in lease.gpus:
        gpu = gpus.setdefault(
            index,
            {
                "index": index,
                "uuid": "",
                "name": "(not reported)",
                "memory_total": 0,
                "simulated": False,
                "memory_leased": 0,
                "whole_taken": False,
                "leases": [],
            },
        )
        gpu["memory_leased"] += lease.memory.get(index, 0)
        gpu["whole_taken"] |= lease.whole
        gpu["leases"].append(_lease_entry(lease, index, quota_leases, now))


def _lease_entry(lease: BoardLease, index: int, quota_leases: Mapping[str, Any], now: float) -> dict[str, Any]:
    """``lease`` on its GPU ``index``, as the board lists it (:class:`BoardLeaseView`)."""
    return {
        "lease_id": lease.lease_id,
        "dag_id": lease.dag_id,
        "run_id": lease.run_id,
        "task_id": lease.task_id,
        "map_index": lease.map_index,
        "job_class": lease.job_class,
        "priority": lease.priority,
        "started": lease.started,
        "seconds": max(0.0, now - lease.started),
        "whole": lease.whole,
        "memory": lease.memory.get(index, 0),
        "yielding_to": lease.yielding_to,
        **({"group": lease.group} if lease.group else {}),
        **({"quota": quota_leases[lease.lease_id]["state"]} if lease.lease_id in quota_leases else {}),
    }


def _place_known_host(
    hosts: dict[str, dict[int, dict[str, Any]]],
    seen: dict[str, str],
    fleet: dict[str, dict[str, Any]],
    known: KnownHost,
) -> None:
    """Put ``known`` and its GPUs on the board; its own inventory outranks what its tasks published."""
    gpus = hosts.setdefault(known.host, {})
    if known.fleet is not None and known.host not in fleet:
        fleet[known.host] = known.fleet
        seen[known.host] = known.seen if known.host not in seen else f"{seen[known.host]}; {known.seen}"
    seen.setdefault(known.host, known.seen)
    # what the host says of itself (its fleet record, or the api-server reading its own GPUs) outranks what
    # its tasks said: a task's record cannot add GPUs to a known host or change theirs
    for g in known.inventory:
        gpu = gpus.setdefault(g.index, {"memory_leased": 0, "whole_taken": False, "leases": []})
        gpu.update(asdict(g))
    indices = {g.index for g in known.inventory}
    for index in [i for i, gpu in gpus.items() if i not in indices and not gpu["leases"]]:
        del gpus[index]  # a task's inventory names a GPU the host does not have


def _host_rows(
    hosts: dict[str, dict[int, dict[str, Any]]], seen: Mapping[str, str], fleet: Mapping[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The hosts, sorted, each with its GPUs in order: each GPU's free memory, its leases oldest first."""
    board_hosts: list[dict[str, Any]] = []
    for host in sorted(hosts):
        row = [hosts[host][i] for i in sorted(hosts[host])]
        others = set(fleet.get(host, {}).get("foreign_busy", ()))
        for gpu in row:
            gpu["held_by_others"] = gpu["index"] in others and not gpu["leases"]
            gpu["memory_free"] = (
                0 if gpu["whole_taken"] or gpu["held_by_others"] else max(0, gpu["memory_total"] - gpu["memory_leased"])
            )
            gpu["leases"].sort(key=lambda lease: lease["started"])
        board_hosts.append(
            {
                "host": host,
                "simulated": any(g["simulated"] for g in row),
                "gpus": row,
                "seen": seen[host],
                "fleet": fleet.get(host),
            }
        )
    return board_hosts


def _add_telemetry(
    entry: dict[str, Any], record: Mapping[str, Any] | None, names: Mapping[str, str], now: float
) -> None:
    """A host's telemetry (``record``, None without one) on its board entry, and what its GPUs are measured doing."""
    entry["telemetry"] = None
    if record is not None:
        entry["telemetry"] = {
            "source": record["source"],
            "sampled_by": record.get("sampled_by", ""),
            "error": record.get("error", ""),
            "resolution": record["resolution"],
            "window": record["window"],
        }
        _add_measured(entry["gpus"], record, names, now)


def _waits(waiting: Iterable[dict[str, Any]], names: dict[str, str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The waiting work, each reason split (:func:`explain_wait`), and the details every waiting task shares."""
    waits = []
    for record in waiting:
        waits.append({**record, **explain_wait(record.get("why", ""), names)})
    shared: list[str] = []
    if len(waits) > 1:  # what every waiting task says alike (the state of the GPUs) is said once, above them
        shared = [d for d in waits[0]["details"] if all(d in w["details"] for w in waits[1:])]
        for w in waits:
            w["details"] = [d for d in w["details"] if d not in shared]
    return waits, shared


def _gpu_time(
    ledger: Iterable[dict[str, Any]], leases: list[BoardLease], board_hosts: list[dict[str, Any]], now: float
) -> dict[str, dict[str, Any]]:
    """GPU time per class over each window (:data:`WINDOWS`): the ledger's records, and the leases held now."""
    records = [r for r in ledger if is_finite_number(r.get("time"))]
    sizes = {(h["host"], g["index"]): g["memory_total"] for h in board_hosts for g in h["gpus"]}
    shares = {
        lease.lease_id: gpu_share(
            lease.gpus, lease.memory, lease.whole, {i: sizes.get((lease.host, i), 0) for i in lease.gpus}
        )
        for lease in leases
    }
    gpu_time = {}
    for name, seconds in WINDOWS.items():
        totals = accounting_totals(r for r in records if r["time"] >= now - seconds)
        for lease in leases:  # work still running counts with its time inside the window so far
            t = totals.setdefault(
                lease.job_class, {"attempts": 0, "gpu_seconds": 0.0, "lost_gpu_seconds": 0.0, "preemptions": 0}
            )
            # as the ledger will count it when it ends: a memory slice is its share of the GPU
            t["gpu_seconds"] += max(0.0, min(now - lease.started, seconds)) * shares[lease.lease_id]
            t.setdefault("running", 0)
            t["running"] += 1
        gpu_time[name] = totals
    return gpu_time
