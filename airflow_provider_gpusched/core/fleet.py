"""A lab's GPU hosts as one pool: what each host publishes, and what the fleet can hold.

Airflow's own distributed executor (the EdgeExecutor, see docs/deploy.md) moves tasks to hosts; this module
adds only what it cannot know about GPUs:

* **Host records.** Each GPU host writes ``<fleet_dir>/hosts/<host>.json`` (its inventory, its live leases,
  when it looked), on its worker's heartbeat and whenever a task of ours takes or gives back GPUs. Only that
  host writes its file; the head node (board, CLI, triggers) only reads them, every record checked.
* **Lanes and memory tiers.** A request goes to a queue that only hosts able to hold it serve:
  ``gpu`` (or ``idle`` for fill-in work), plus ``-<tier>g`` when it asks for memory per GPU, the tier being the
  smallest common GPU size that holds it. A host's worker serves its lane and every tier up to its GPUs' size.
  The executor's concurrency slots (one per GPU, a task takes one per GPU it asks for) keep a host from being
  offered more GPUs than it has.
* **Room.** Whether a request fits on a host now, judged from the host's record with the same placement
  rules the host itself applies (core/gpu/placement.py). The host's own lease is what really decides.

Pure Python, no Airflow imports.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_gpusched.core.checks import is_int, is_number
from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.gpu.inventory import GPUInfo, GPUProcess
from airflow_provider_gpusched.core.gpu.placement import GPURequest, GPUUsage, LeaseView, gpu_usage, place
from airflow_provider_gpusched.core.host_name import this_host
from airflow_provider_gpusched.core.quota.book import QuotaBook, book_dir
from airflow_provider_gpusched.core.quota.config import QuotaConfig
from airflow_provider_gpusched.core.quota.host import HostQuotas
from airflow_provider_gpusched.core.safe_files import (
    BadRecordError,
    ensure_private_dir,
    read_json_record,
    write_json_atomic,
)
from airflow_provider_gpusched.core.units import format_bytes

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager
    from airflow_provider_gpusched.core.queue import QueueEntry, StopOutcome
    from airflow_provider_gpusched.core.stops import StopRequest

RECORD_VERSION = 1
#: common GPU memory sizes (GiB): a memory request is routed to the smallest that holds it
MEMORY_TIERS_GIB = (8, 12, 16, 24, 32, 40, 48, 64, 80, 94, 96, 128, 141, 192)
#: a host whose record is older than this is not counted as able to take work now (it still shows as seen)
FRESH_FOR = 30.0
#: a record whose own time differs more than this from when its file was written (the file system's clock) comes
#: from a host whose clock is off: it is flagged and judged by when it was written
CLOCK_SLACK = 60.0
#: how long a host that stopped publishing is still listed (as gone) by the board and the CLI
REMEMBER_FOR = 24 * 3600.0
LANES = ("gpu", "idle")
#: XCom of a local GPU task in a fleet: the hosts its try was taken by, in order (one unless it moved)
FLEET_HOSTS_XCOM = "gpusched_fleet_hosts"
#: a host's name in the fleet (its record, its own queue, its leases on the board): it goes into file and queue names
_HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
GIB = 1 << 30


def _check_host_name(host: Any) -> None:
    """A host's name goes into file names and queue names: letters, digits, '.', '_', '-'."""
    if not isinstance(host, str) or not _HOST_NAME.match(host):
        raise InvalidArgumentError("host", host, "a host name of letters, digits, '.', '_' or '-'")


def _check_lane(lane: Any) -> None:
    if lane not in LANES:
        raise InvalidArgumentError("lane", lane, f"one of {', '.join(LANES)}")


#: above the last tier, tiers are every multiple of this many GiB
BIG_TIER_STEP_GIB = 64


def memory_tier(gpu_memory: int) -> int:
    """The smallest tier (GiB) of at least ``gpu_memory`` bytes (above every listed tier: the next multiple of
    64 GiB, which hosts with GPUs that big serve too)."""
    for tier in MEMORY_TIERS_GIB:
        if tier * GIB >= gpu_memory:
            return tier
    return -(-gpu_memory // (BIG_TIER_STEP_GIB * GIB)) * BIG_TIER_STEP_GIB


def queue_for(request: GPURequest, lane: str = "gpu") -> str:
    """The executor queue for ``request``: its lane, and its memory tier when it asks for memory per GPU."""
    _check_lane(lane)
    return lane if request.gpu_memory is None else f"{lane}-{memory_tier(request.gpu_memory)}g"


def host_queues(gpus: Iterable[GPUInfo], lane: str = "gpu", host: str = "") -> list[str]:
    """The queues a host's worker for ``lane`` serves: the lane, and every tier its largest GPU holds; with
    ``host``, also :func:`host_queue` (work pinned to this host, such as a pipeline stage placed here)."""
    largest = max((g.memory_total for g in gpus), default=0)
    tiers = [t for t in MEMORY_TIERS_GIB if t * GIB <= largest]
    tiers += [t for t in range(BIG_TIER_STEP_GIB, largest // GIB + 1, BIG_TIER_STEP_GIB) if t > MEMORY_TIERS_GIB[-1]]
    return [lane] + [f"{lane}-{t}g" for t in tiers] + ([host_queue(host, lane)] if host else [])


def host_queue(host: str, lane: str = "gpu") -> str:
    """The queue only ``host``'s worker for ``lane`` serves: ``gpu-on-<host>``."""
    _check_host_name(host)
    _check_lane(lane)
    return f"{lane}-on-{host}"


def map_hosts(
    wanted: Iterable[str], fleet_hosts: Iterable[str], mapping: dict[str, Any] | None = None
) -> dict[str, str]:
    """Which fleet host stands for each host another tool named (the partitioner's ``devices.yml`` hosts):
    ``mapping`` first (each value must be a fleet host), then a host of the same name, then the fleet's hosts in
    turn, in the order the names first appear (so two named hosts may share one fleet host when the fleet is
    smaller). :class:`InvalidArgumentError` names a bad mapping or an empty fleet."""
    hosts = sorted(set(fleet_hosts))
    mapping = dict(mapping or {})
    for name, host in mapping.items():
        if not isinstance(name, str) or not isinstance(host, str) or host not in hosts:
            raise InvalidArgumentError(
                f"host mapping[{name!r}]", host, f"one of the fleet's hosts ({', '.join(hosts) or 'none published'})"
            )
    if not hosts:
        raise InvalidArgumentError("fleet", "no host", "at least one GPU host that published a record")
    result: dict[str, str] = {}
    turn = 0
    for name in wanted:
        if name in result:
            continue
        if name in mapping:
            result[name] = mapping[name]
        elif name in hosts:
            result[name] = name
        else:
            result[name] = hosts[turn % len(hosts)]
            turn += 1
    return result


@dataclass
class HostLease:
    """A live lease as its host published it."""

    lease_id: str
    gpus: list[int]
    memory: dict[int, int]
    whole: bool
    job_class: str
    owner: str
    created: float
    work: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "lease_id": self.lease_id,
            "gpus": list(self.gpus),
            "memory": {str(k): v for k, v in self.memory.items()},
            "whole": self.whole,
            "job_class": self.job_class,
            "owner": self.owner,
            "created": self.created,
            "work": dict(self.work),
        }


@dataclass
class HostRecord:
    """One GPU host as it last published itself."""

    host: str
    time: float
    source: str  # "nvml" or "simulated"
    gpus: list[GPUInfo]
    leases: list[HostLease]
    #: GPUs that processes of others hold (no lease of ours): the host takes no work while all are
    foreign_busy: list[int] = field(default_factory=list)
    address: str = ""
    #: when its file was written, by the clock of the file system the reader shares (None: not read from a file)
    written: float | None = None

    @property
    def clock_off(self) -> float:
        """How far the host's clock is ahead (> 0) or behind (< 0) of the file system's, when by more than
        :data:`CLOCK_SLACK`; 0.0 otherwise."""
        if self.written is None or abs(self.time - self.written) <= CLOCK_SLACK:
            return 0.0
        return self.time - self.written

    @property
    def seen(self) -> float:
        """When the host last published, as the reader judges it: the record's own time, or, from a host whose
        clock is off, when its file was written (a dead host with a fast clock would look up for as long as its
        clock is ahead)."""
        return self.written if self.clock_off and self.written is not None else self.time

    def age(self, now: float | None = None) -> float:
        return (now or time.time()) - self.seen

    def fresh(self, now: float | None = None) -> bool:
        return self.age(now) <= FRESH_FOR

    def clock_note(self) -> str:
        off = self.clock_off
        if not off:
            return ""
        return (
            f"{self.host}'s clock is {abs(off):.0f}s {'ahead of' if off > 0 else 'behind'} the fleet directory's: "
            f"judged by when its record was written; fix its time sync (NTP)"
        )

    def sizes(self) -> str:
        """``4x80GiB`` (or ``1x24GiB+1x48GiB`` for mixed GPUs)."""
        counts: dict[int, int] = {}
        for g in self.gpus:
            counts[g.memory_total] = counts.get(g.memory_total, 0) + 1
        return "+".join(f"{n}x{format_bytes(size)}" for size, n in sorted(counts.items())) or "no GPUs"

    def usage(self) -> dict[int, GPUUsage]:
        return gpu_usage(self.gpus, [LeaseView(memory=dict(lease.memory), whole=lease.whole) for lease in self.leases])

    def room_for(self, request: GPURequest) -> str:
        """'' if ``request`` fits on this host by its record, else why not."""
        if not self.can_hold(request):
            return f"never fits here ({self.sizes()})"
        placement, why = place(request, self.usage())
        return "" if placement is not None else why

    def can_hold(self, request: GPURequest) -> bool:
        try:
            request.check_possible(self.gpus)
        except InvalidArgumentError:
            return False
        return True

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": RECORD_VERSION,
            "host": self.host,
            "time": self.time,
            "source": self.source,
            "address": self.address,
            "gpus": [g.to_dict() for g in self.gpus],
            "leases": [lease.to_dict() for lease in self.leases],
            "foreign_busy": list(self.foreign_busy),
        }


def _check(cond: bool, source: str, key: str, expected: str, value: Any) -> None:
    if not cond:
        raise BadRecordError(f"{source}: key {key!r}: expected {expected}, got {value!r:.80}")


def read_host_record(data: Any, source: str) -> HostRecord:
    """A host record read back from disk, every field checked (:class:`BadRecordError` names file and key)."""
    if not isinstance(data, dict):
        raise BadRecordError(f"{source}: expected a JSON object, got {type(data).__name__}")
    _check(data.get("version") == RECORD_VERSION, source, "version", str(RECORD_VERSION), data.get("version"))
    host: Any = data.get("host")  # each field checked before it is used
    _check(isinstance(host, str) and bool(_HOST_NAME.match(host)), source, "host", "a host name", host)
    _check(is_number(data.get("time")), source, "time", "a time in seconds", data.get("time"))
    _check(data.get("source") in ("nvml", "simulated"), source, "source", "'nvml' or 'simulated'", data.get("source"))
    _check(isinstance(data.get("address", ""), str), source, "address", "a string", data.get("address"))
    raw_gpus: Any = data.get("gpus")
    _check(isinstance(raw_gpus, list) and len(raw_gpus) <= 64, source, "gpus", "a list of GPUs", raw_gpus)
    gpus = []
    for i, g in enumerate(raw_gpus):
        key = f"gpus[{i}]"
        _check(isinstance(g, dict), source, key, "an object", g)
        for name in ("index", "memory_total", "memory_used"):
            _check(is_int(g.get(name)) and g[name] >= 0, source, f"{key}.{name}", "a whole number >= 0", g.get(name))
        for name in ("uuid", "name"):
            _check(isinstance(g.get(name), str), source, f"{key}.{name}", "a string", g.get(name))
        procs = g.get("processes", [])
        _check(
            isinstance(procs, list) and all(isinstance(p, dict) and is_int(p.get("pid")) for p in procs),
            source,
            f"{key}.processes",
            "a list of {pid, used_memory}",
            procs,
        )
        gpus.append(
            GPUInfo(
                index=g["index"],
                uuid=g["uuid"],
                name=g["name"],
                memory_total=g["memory_total"],
                memory_used=g["memory_used"],
                utilization=g.get("utilization") if is_int(g.get("utilization")) else None,
                processes=[
                    GPUProcess(p["pid"], p.get("used_memory") if is_int(p.get("used_memory")) else None) for p in procs
                ],
                simulated=bool(g.get("simulated", False)),
            )
        )
    indices = {g.index for g in gpus}
    raw_leases: Any = data.get("leases")
    _check(isinstance(raw_leases, list), source, "leases", "a list of leases", raw_leases)
    leases = []
    for i, lease in enumerate(raw_leases):
        key = f"leases[{i}]"
        _check(isinstance(lease, dict), source, key, "an object", lease)
        _check(isinstance(lease.get("lease_id"), str), source, f"{key}.lease_id", "a string", lease.get("lease_id"))
        _check(
            isinstance(lease.get("gpus"), list) and all(is_int(x) and x in indices for x in lease["gpus"]),
            source,
            f"{key}.gpus",
            "indices of the host's GPUs",
            lease.get("gpus"),
        )
        memory = lease.get("memory")
        _check(
            isinstance(memory, dict)
            and all(
                isinstance(k, str) and k.isdigit() and int(k) in indices and is_int(v) and v >= 0
                for k, v in memory.items()
            ),
            source,
            f"{key}.memory",
            "GPU index -> reserved bytes",
            memory,
        )
        _check(isinstance(lease.get("whole"), bool), source, f"{key}.whole", "true or false", lease.get("whole"))
        for name in ("job_class", "owner"):
            _check(isinstance(lease.get(name), str), source, f"{key}.{name}", "a string", lease.get(name))
        _check(is_number(lease.get("created")), source, f"{key}.created", "a time", lease.get("created"))
        _check(isinstance(lease.get("work", {}), dict), source, f"{key}.work", "an object", lease.get("work"))
        leases.append(
            HostLease(
                lease["lease_id"],
                list(lease["gpus"]),
                {int(k): v for k, v in memory.items()},
                lease["whole"],
                lease["job_class"],
                lease["owner"],
                float(lease["created"]),
                dict(lease.get("work", {})),
            )
        )
    busy = data.get("foreign_busy", [])
    _check(isinstance(busy, list) and all(is_int(x) for x in busy), source, "foreign_busy", "a list of indices", busy)
    return HostRecord(host, float(data["time"]), data["source"], gpus, leases, list(busy), data.get("address", ""))


def hosts_dir(fleet_dir: str) -> str:
    return os.path.join(fleet_dir, "hosts")


def record_of(manager: LeaseManager, host: str, address: str = "") -> HostRecord:
    """This host's record from its lease manager (:class:`~..gpu.leases.LeaseManager`): one look at its GPUs
    and live leases, as every task of ours on the host sees them."""
    gpus, leases = manager.snapshot()
    usage = gpu_usage(gpus, manager.store.views(gpus, leases))
    foreign = [i for i, u in usage.items() if u.leases == 0 and u.foreign_processes > 0]
    return HostRecord(
        host=host,
        time=time.time(),
        source=manager.inventory.source,
        gpus=gpus,
        leases=[
            HostLease(
                lease.lease_id,
                list(lease.gpus),
                dict(lease.memory),
                lease.whole,
                lease.job_class,
                lease.owner,
                lease.created,
                dict(lease.work),
            )
            for lease in leases
        ],
        foreign_busy=foreign,
        address=address,
    )


def publish(fleet_dir: str, record: HostRecord, *, shared: bool = False) -> str:
    """Write this host's record (0644: the head node's processes read it; it holds no secret). ``shared``:
    the fleet directory is a group directory (several Unix users' workers), as for the lease directory."""
    _check_host_name(record.host)
    ensure_private_dir(fleet_dir, shared=shared, what="fleet directory")
    folder = ensure_private_dir(hosts_dir(fleet_dir), shared=shared, what="fleet host records directory")
    path = os.path.join(folder, f"{record.host}.json")
    write_json_atomic(path, record.to_dict(), mode=0o644)
    return path


@dataclass
class FleetView:
    """Every host that published a record, with the records that could not be read."""

    hosts: list[HostRecord]
    unreadable: list[tuple[str, str]] = field(default_factory=list)

    def fresh(self, now: float | None = None) -> list[HostRecord]:
        now = now or time.time()
        return [h for h in self.hosts if h.fresh(now)]

    def sizes(self) -> str:
        return ", ".join(f"{h.host} {h.sizes()}" for h in self.hosts) or "no host has published a record"

    def refuse_impossible(self, request: GPURequest) -> None:
        """Raise :class:`InvalidArgumentError` if no host of the fleet can ever hold ``request``."""
        if not self.hosts:
            return  # nothing known yet: the host the task lands on decides
        if not any(h.can_hold(request) for h in self.hosts):
            raise InvalidArgumentError(
                "request", request.describe(), f"something one host of the fleet can hold (hosts: {self.sizes()})"
            )

    def room(self, request: GPURequest, now: float | None = None) -> tuple[list[str], str]:
        """The fresh hosts where ``request`` fits now, and (when none) why not, host by host."""
        fits, why = [], []
        for h in self.fresh(now):
            if h.foreign_busy and len(h.foreign_busy) >= len(h.gpus):
                why.append(f"{h.host}: every GPU held by processes of others")
                continue
            reason = h.room_for(request)
            (why.append(f"{h.host}: {reason}") if reason else fits.append(h.host))
        if not fits and not why:
            why.append(f"no host published a record in the last {FRESH_FOR:.0f}s")
        return fits, "; ".join(why)


def _read_host_files(
    folder: str, read: Callable[[Any, str], Any], max_bytes: int
) -> tuple[list[Any], list[tuple[str, str]]]:
    """Every ``<host>.json`` in ``folder`` read back by ``read(data, path)``: the records, and ``(path, why)`` for
    each file that could not be read or names another host than its file's name."""
    try:
        names = sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    records, bad = [], []
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        path = os.path.join(folder, name)
        try:
            record = read(read_json_record(path, max_bytes=max_bytes), path)
        except (BadRecordError, OSError, ValueError) as exc:
            bad.append((path, str(exc) if str(exc).startswith(path) else f"{path}: {exc}"))
            continue
        host = record["host"] if isinstance(record, dict) else record.host
        if host != name[:-5]:
            bad.append((path, f"{path}: key 'host': expected {name[:-5]!r} (the file's name), got {host!r}"))
            continue
        if isinstance(record, HostRecord):
            with contextlib.suppress(OSError):
                record.written = os.stat(path).st_mtime
        records.append(record)
    return records, bad


def read_fleet(fleet_dir: str, now: float | None = None) -> FleetView:
    """Every host record under ``fleet_dir`` seen in the last day, newest first by host name."""
    now = now or time.time()
    records, bad = _read_host_files(hosts_dir(fleet_dir), read_host_record, 4 << 20)
    bad += [(hosts_dir(fleet_dir), r.clock_note()) for r in records if r.clock_off]
    return FleetView([r for r in records if r.age(now) <= REMEMBER_FOR], bad)


# -- measured GPU use (core/gpu/telemetry.py): each host's sampler writes its ring, the head node reads them -----
def telemetry_dir(fleet_dir: str) -> str:
    return os.path.join(fleet_dir, "telemetry")


def publish_telemetry(fleet_dir: str, record: dict[str, Any], *, shared: bool = False) -> str:
    """Write a host's telemetry ring (:meth:`~.gpu.telemetry.TelemetryRing.to_dict`) where the head node reads it
    (0644: GPU figures and process ids, no secret). Only that host's sampler writes its file."""
    host = record.get("host", "")
    _check_host_name(host)
    ensure_private_dir(fleet_dir, shared=shared, what="fleet directory")
    folder = ensure_private_dir(telemetry_dir(fleet_dir), shared=shared, what="fleet telemetry directory")
    path = os.path.join(folder, f"{host}.json")
    write_json_atomic(path, record, mode=0o644)
    return path


def read_fleet_telemetry(fleet_dir: str, now: float | None = None) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every host's telemetry ring that has a sample from the last :data:`~.gpu.telemetry.WINDOW` seconds (host ->
    checked record), and why any file could not be read."""
    from airflow_provider_gpusched.core.gpu.telemetry import WINDOW, read_telemetry_record

    now = now or time.time()
    records, bad = _read_host_files(telemetry_dir(fleet_dir), read_telemetry_record, 8 << 20)
    fresh = {r["host"]: r for r in records if now - max((g["time"] for g in r["gpus"].values()), default=0.0) <= WINDOW}
    return fresh, [why for _path, why in bad]


# -- the head node's `gpusched queue` over the fleet ------------------------------------------------------
def stops_dir(fleet_dir: str, host: str) -> str:
    """Where the head node asks ``host``'s holders to stop work (``<lease id>.stop``, a StopRequest record)."""
    return os.path.join(fleet_dir, "stops", host)


def orders_dir(fleet_dir: str) -> str:
    """The fleet's stop orders: every host's operators refuse to start work they cover."""
    return os.path.join(fleet_dir, "stop-orders")


def join(manager: LeaseManager, fleet_dir: str, host: str | None = None) -> None:
    """Make a host's lease manager heed the head node: stop requests in :func:`stops_dir` and the fleet's stop
    orders (:func:`orders_dir`), besides its own lease directory's."""
    manager.store.fleet_stops = stops_dir(fleet_dir, host or this_host())
    manager.fleet_orders = orders_dir(fleet_dir)


def queue_entries(view: FleetView, fleet_dir: str, now: float | None = None) -> tuple[list[QueueEntry], list[str]]:
    """Every lease the fleet's hosts published, as ``gpusched queue`` lists work (backend ``local``, with its
    host). A host whose record is stale has its leases listed ``orphaned``: it or its worker is down."""
    from airflow_provider_gpusched.core.queue import QueueEntry
    from airflow_provider_gpusched.core.work_tag import WorkTag

    now = now or time.time()
    entries: list[QueueEntry] = []
    problems: list[str] = []
    for record in view.hosts:
        asked: set[str] = set()
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            asked = {n[:-5] for n in os.listdir(stops_dir(fleet_dir, record.host)) if n.endswith(".stop")}
        for lease in record.leases:
            try:
                tag = WorkTag.from_dict(lease.work, f"{record.host}'s fleet record: lease {lease.lease_id}")
            except BadRecordError as exc:
                problems.append(str(exc))
                tag = WorkTag()
            if not record.fresh(now):
                state, reason = "orphaned", f"{record.host} has published nothing for {record.age(now):.0f}s"
            elif lease.lease_id in asked:
                state, reason = "stopping", "asked by the head node"
            else:
                state, reason = "running", ""
            entries.append(
                QueueEntry(
                    backend="local",
                    id=lease.lease_id,
                    tag=tag,
                    state=state,
                    elapsed=round(now - lease.created, 1),
                    host=record.host,
                    where=f"{record.host} GPU " + ",".join(map(str, lease.gpus)),
                    reason=reason,
                    job_name=lease.owner,
                )
            )
    problems += [why for _path, why in view.unreadable]
    return entries, problems


def stop_on_hosts(
    fleet_dir: str,
    entries: Iterable[QueueEntry],
    request: StopRequest,
    *,
    shared: bool = False,
    wait: float = 30.0,
    poll: float = 0.5,
) -> list[StopOutcome]:
    """Ask each entry's host (:func:`queue_entries`) to stop it: a stop request in :func:`stops_dir`, which the
    lease's holder there acts on within a second exactly as for a local ``gpusched queue stop`` (SIGTERM to its
    child, the class's grace period, SIGKILL; the task fails saying who stopped it). Waits up to ``wait``
    seconds for the hosts' records to drop the leases. The head node kills nothing itself: a host that does not
    answer is reported (``still running``), to be stopped on the host."""
    from airflow_provider_gpusched.core.queue import StopOutcome

    entries = list(entries)
    outcomes: dict[str, StopOutcome] = {}
    for entry in entries:
        if not re.fullmatch(r"[0-9a-f]{16}", entry.id) or not _HOST_NAME.match(entry.host):
            outcomes[entry.id] = StopOutcome(entry, "failed", "not a lease of a fleet host")
            continue
        folder = ensure_private_dir(os.path.join(fleet_dir, "stops"), shared=shared, what="fleet stop requests")
        folder = ensure_private_dir(os.path.join(folder, entry.host), shared=shared, what="fleet stop requests")
        write_json_atomic(os.path.join(folder, entry.id + ".stop"), request.to_dict(), mode=0o660 if shared else 0o600)
    asked = [e for e in entries if e.id not in outcomes]
    deadline = time.monotonic() + wait
    while asked:
        view = read_fleet(fleet_dir)
        live = {(h.host, lease.lease_id) for h in view.hosts for lease in h.leases}
        for entry in list(asked):
            if (entry.host, entry.id) not in live:
                outcomes[entry.id] = StopOutcome(entry, "stopped", f"{entry.host} stopped it and gave its GPUs back")
                asked.remove(entry)
        if not asked or time.monotonic() >= deadline:
            break
        time.sleep(poll)
    for entry in asked:
        outcomes[entry.id] = StopOutcome(
            entry,
            "still running",
            (
                f"{entry.host} has not given its GPUs back within {wait:.0f}s (its holder stops the work once it sees "
                f"the request; on the host, `gpusched queue stop {entry.id}` forces it)"
            ),
        )
    return [outcomes[e.id] for e in entries]


# -- team quotas (core/quota): one book for the fleet, quotas shares of every host's GPUs -----------------------
#: seconds the fleet's capacity (read from the hosts' records) is reused before it is read again
QUOTA_CAPACITY_FOR = 10.0


def fleet_capacity(fleet_dir: str, resource: str, own: float = 0.0, own_host: str = "") -> float:
    """The fleet's GPUs (or GPU memory): every host that published a record in the last day, a host that died
    included (a group's quota does not shrink because a host is down), and this host's ``own`` if it has not
    published yet."""
    counting = QuotaConfig(resource=resource)
    total, seen = 0.0, False
    for record in read_fleet(fleet_dir).hosts:
        total += counting.capacity_of(record.gpus)
        seen |= record.host == own_host
    return total + (0.0 if seen else own)


def fleet_host_known(fleet_dir: str, own_host: str = "") -> Callable[[str], bool]:
    """Whether a host exists in the fleet: it published a record (``hosts/<host>.json``), or it is ``own_host``.
    Only such hosts' quota claims and waiting marks count (core/quota/book.py's ``QuotaBook.host_known``)."""
    folder = hosts_dir(fleet_dir)
    return lambda host: host == own_host or os.path.isfile(os.path.join(folder, host + ".json"))


def fleet_host_capacities(fleet_dir: str, resource: str) -> Callable[[], dict[str, float]]:
    """What each host that published a record has (its GPUs, or their memory with ``resource: gpu_memory``), read
    anew at each look: a host's quota claims count together for at most that (``QuotaBook.host_capacities``)."""
    counting = QuotaConfig(resource=resource)
    return lambda: {r.host: counting.capacity_of(r.gpus) for r in read_fleet(fleet_dir).hosts}


def open_quota_book(
    config: QuotaConfig, fleet_dir: str, state_dir: str, *, shared: bool = False, gpus: Iterable[Any] = ()
) -> tuple[QuotaBook, float]:
    """The quota book a reader (the CLI, the board) looks at, and what the quotas are shares of: the fleet's
    (``<fleet_dir>/quota``, every host's GPUs; the claims of hosts that published a record) or one host's
    (``<state_dir>/quota``, ``gpus``)."""
    book = QuotaBook(book_dir(fleet_dir, state_dir), config, shared=shared)
    if not fleet_dir:
        return book, config.capacity_of(gpus)
    book.host_known = fleet_host_known(fleet_dir)
    book.host_capacities = fleet_host_capacities(fleet_dir, config.resource)
    return book, fleet_capacity(fleet_dir, config.resource)


def attach_quotas(manager: LeaseManager, config: QuotaConfig, fleet_dir: str = "", host: str = "") -> QuotaBook:
    """Admit ``manager``'s normal-class work under ``config``: build the book and this host's gate on it
    (core/quota/host.py) and give the gate to the manager; returns the book."""
    book = QuotaBook(book_dir(fleet_dir, manager.state_dir), config, shared=manager.shared)
    me = host or this_host()
    if not fleet_dir:
        manager.use_quotas(HostQuotas(book, me, manager.inventory.gpus))
        return book
    cached: list[float] = [0.0, -1e9]

    def capacity() -> float:
        if time.monotonic() - cached[1] > QUOTA_CAPACITY_FOR:
            own = config.capacity_of(manager.inventory.gpus())
            cached[:] = [fleet_capacity(fleet_dir, config.resource, own, me), time.monotonic()]
        return cached[0]

    book.host_known = fleet_host_known(fleet_dir, me)
    book.host_capacities = fleet_host_capacities(fleet_dir, config.resource)
    manager.use_quotas(HostQuotas(book, me, manager.inventory.gpus, capacity))
    return book
