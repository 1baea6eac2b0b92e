"""Measured GPU use: what each GPU is doing, not what tasks reserved.

A GPU host samples each GPU every :data:`RESOLUTION` seconds (NVML's utilisation, memory in use, temperature and
power; a simulated inventory's made-up figures, marked simulated) and the processes on it, each attributed to the
lease of ours it belongs to or marked as not ours (with its Unix user where the host says). A
:class:`TelemetryRing` keeps the last :data:`WINDOW` seconds of samples, bounded: at most
``WINDOW / RESOLUTION + 1`` rows per GPU and :data:`MAX_PROCESSES` processes per GPU, whatever the host runs.

The ring travels as a JSON record (:meth:`TelemetryRing.to_dict`) to where the api-server reads it without access
to the host (a fleet host's record, docs/fleet.md), and is read back field by field
(:func:`read_telemetry_record`). :func:`measured_gpus` turns one into what the GPU board draws, flagging a lease
whose processes use more GPU memory than it reserved (:func:`over_reservation`).

Pure Python, no Airflow imports.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

from airflow_provider_gpusched.core.gpu.inventory import GPUInfo
from airflow_provider_gpusched.core.records import Float, IndexKey, Int, RecordType, record_class, says
from airflow_provider_gpusched.core.safe_files import BadRecordError

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager

RECORD_VERSION: Literal[1] = 1
#: seconds between samples
RESOLUTION = 10.0
#: seconds of samples kept
WINDOW = 600.0
#: processes kept per GPU (the largest users of memory first)
MAX_PROCESSES = 32
#: a sample older than this is not "now" (the host stopped sampling)
STALE_AFTER = 3 * RESOLUTION


Bytes = Annotated[int, says("bytes", ge=0)]


@record_class
@dataclass
class ProcessUse:
    """A process on a GPU: its memory there (None where the driver does not say), the lease of ours it belongs to
    ('' when not ours), its Unix user ('' when unknown)."""

    pid: Annotated[int, says("a process id", gt=0)]
    used_memory: Bytes | None
    lease_id: Annotated[str, says("a lease id", max_length=64)] = ""
    user: Annotated[str, says("a user name", max_length=64)] = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: one sample as a ring keeps it: ``[time, utilization 0-100 or null, memory used, temperature or null, watts or null]``
Row = Annotated[
    tuple[
        Float,
        Annotated[int, says("a utilization of 0-100", ge=0, le=100)] | None,
        Bytes,
        Int | None,
        Float | None,
    ],
    says("[time, utilization 0-100 or null, memory used, temperature or null, watts or null]", strict=None),
]


@record_class
@dataclass
class GPUSeries:
    """One GPU in a ring's record: its memory, its newest sample's time and processes, its rows."""

    memory_total: Bytes
    time: Annotated[Float, says("a time stamp", strict=None)]
    series: Annotated[list[Row], says("a list of rows", strict=None, max_length=10_000)]
    processes: Annotated[
        list[ProcessUse],
        says(f"a list of at most {MAX_PROCESSES} processes", strict=None, max_length=MAX_PROCESSES),
    ]


@record_class
@dataclass
class TelemetryRecord:
    """A host's ring of samples as it travels (:meth:`TelemetryRing.to_dict`, :func:`read_telemetry_record`)."""

    version: Annotated[Literal[1], says(str(RECORD_VERSION), strict=None)]
    host: Annotated[str, says("a non-empty string", min_length=1, max_length=255)]
    source: Annotated[Literal["nvml", "simulated"], says("'nvml' or 'simulated'", strict=None)]
    resolution: Annotated[Float, says("seconds (> 0)", strict=None, gt=0)]
    window: Annotated[Float, says("seconds (> 0)", strict=None, gt=0)]
    gpus: Annotated[dict[IndexKey, GPUSeries], says("an object of GPU index -> samples", strict=None, max_length=1024)]


TELEMETRY = RecordType(TelemetryRecord, name="telemetry")


@dataclass
class GPUSample:
    """One GPU at one time."""

    index: int
    time: float
    memory_total: int
    memory_used: int
    utilization: int | None = None
    temperature: int | None = None
    power_watts: float | None = None
    processes: list[ProcessUse] = field(default_factory=list)

    def row(self) -> list[Any]:
        """The compact row a ring keeps: ``[time, utilization, memory_used, temperature, power_watts]``."""
        return [round(self.time, 1), self.utilization, self.memory_used, self.temperature, self.power_watts]


def _user_of(pid: int) -> str:
    try:
        import psutil

        return psutil.Process(pid).username()
    except Exception:  # noqa: BLE001 - gone, or another user's process we may not inspect
        return ""


def sample_gpus(
    gpus: Iterable[GPUInfo],
    lease_pids: Mapping[str, set[int]] | None,
    now: float | None = None,
    user_of: Callable[[int], str] = _user_of,
) -> list[GPUSample]:
    """One sample of each GPU of ``gpus``; each process listed on it is attributed to the lease whose processes
    (``lease_pids``: lease id -> pids, see :meth:`~.lease_store.Lease.view`) include it. ``lease_pids`` None:
    this host's leases could not be read, so no process is attributed (none is called "not ours" either: its
    ``lease_id`` is ``"?"``)."""
    now = time.time() if now is None else now
    owner = {pid: lease_id for lease_id, pids in (lease_pids or {}).items() for pid in pids}
    samples = []
    for g in gpus:
        procs = []
        for p in sorted(g.processes, key=lambda p: -(p.used_memory or 0))[:MAX_PROCESSES]:
            lease_id = owner.get(p.pid, "") if lease_pids is not None else "?"
            procs.append(ProcessUse(p.pid, p.used_memory, lease_id, user_of(p.pid)))
        samples.append(
            GPUSample(g.index, now, g.memory_total, g.memory_used, g.utilization, g.temperature, g.power_watts, procs)
        )
    return samples


class TelemetryRing:
    """The last ``window`` seconds of one host's samples, one row per ``resolution`` (a sample taken sooner after
    the last one replaces it), with the newest sample's processes. Thread-safe."""

    def __init__(self, host: str, source: str, window: float = WINDOW, resolution: float = RESOLUTION) -> None:
        self.host, self.source, self.window, self.resolution = host, source, window, resolution
        self._gpus: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def add(self, samples: Iterable[GPUSample]) -> None:
        with self._lock:
            for s in samples:
                gpu = self._gpus.setdefault(s.index, {"memory_total": s.memory_total, "series": [], "processes": []})
                series = gpu["series"]
                if series and s.time - series[-1][0] < self.resolution / 2:
                    series[-1] = s.row()
                else:
                    series.append(s.row())
                while series and s.time - series[0][0] > self.window:
                    series.pop(0)
                gpu["memory_total"] = s.memory_total
                gpu["processes"] = [p.to_dict() for p in s.processes]
                gpu["time"] = round(s.time, 1)

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return TELEMETRY.dump(
                TelemetryRecord(
                    version=RECORD_VERSION,
                    host=self.host,
                    source=self.source,  # type: ignore[arg-type]
                    resolution=self.resolution,
                    window=self.window,
                    gpus={
                        i: GPUSeries(
                            memory_total=g["memory_total"],
                            time=g["time"],
                            series=[tuple(r) for r in g["series"]],
                            processes=[ProcessUse(**p) for p in g["processes"]],
                        )
                        for i, g in sorted(self._gpus.items())
                    },
                )
            )


def read_telemetry_record(data: Any, source: str) -> dict[str, Any]:
    """A ring's record read back, every field checked and bounded; :class:`BadRecordError` names ``source`` and
    the key."""
    got = TELEMETRY.read(data, source)
    most_rows = int(got.window / got.resolution) + 2
    if most_rows > 10_000:
        raise BadRecordError(f"{source}: key 'window': expected at most 10,000 samples, got {got.window!r}")
    for index, g in got.gpus.items():
        if len(g.series) > most_rows:
            raise BadRecordError(f"{source}: key 'gpus.{index}.series': expected a list of at most {most_rows} rows")
    return TELEMETRY.dump(got)


def lease_memory(processes: Iterable[Mapping[str, Any]], lease_id: str) -> int | None:
    """GPU memory the processes of ``lease_id`` use on one GPU (None when none of them is listed with a figure)."""
    figures = [
        p["used_memory"] for p in processes if p.get("lease_id") == lease_id and p.get("used_memory") is not None
    ]
    return sum(figures) if figures else None


def over_reservation(used: int | None, reserved: int, whole: bool) -> bool:
    """Whether a lease's processes use more of a GPU than it reserved (a whole-GPU lease reserved all of it)."""
    return used is not None and not whole and used > reserved


def measured_gpus(record: Mapping[str, Any], now: float | None = None) -> dict[int, dict[str, Any]]:
    """What the board draws per GPU from a read-back ring record: the newest row's figures (``stale`` when the
    host stopped sampling), the series, the processes (``ours`` or not) and the memory that processes of others
    use."""
    now = time.time() if now is None else now
    simulated = record["source"] == "simulated"
    out = {}
    for index, g in record["gpus"].items():
        if not g["series"]:
            continue
        t, util, used, temp, power = g["series"][-1]
        procs = [
            {**p, "ours": bool(p["lease_id"]) and p["lease_id"] != "?", "unattributed": p["lease_id"] == "?"}
            for p in g["processes"]
        ]
        others = [p for p in procs if not p["ours"] and not p["unattributed"]]
        out[int(index)] = {
            "time": t,
            "age": round(max(0.0, now - t), 1),
            "stale": now - t > STALE_AFTER,
            "utilization": util,
            "memory_used": used,
            "memory_total": g["memory_total"],
            "temperature": temp,
            "power_watts": power,
            "simulated": simulated,
            "series": g["series"],
            "processes": procs,
            "others": len(others),
            "others_memory": sum(p["used_memory"] or 0 for p in others),
            "resolution": record["resolution"],
            "window": record["window"],
        }
    return out


def sample_host(manager: LeaseManager, now: float | None = None) -> list[GPUSample]:
    """One sample of a host's GPUs through its lease manager (:class:`~.leases.LeaseManager`): the inventory, and
    this host's live leases to attribute the processes (None when the lease directory cannot be read)."""
    from airflow_provider_gpusched.core.errors import GpuschedError
    from airflow_provider_gpusched.core.gpu.lease_store import gpu_process_kin

    try:
        gpus, leases = manager.snapshot()
    except (GpuschedError, OSError):
        return sample_gpus(manager.inventory.gpus(), None, now)
    kin = gpu_process_kin(gpus)
    return sample_gpus(gpus, {lease.lease_id: lease.view(kin).pids for lease in leases}, now)


class HostSampler:
    """Samples a host every ``every`` seconds into ``ring`` on a daemon thread (``take()`` gives one sample of
    each GPU; ``on_sample(samples)`` is told of each, to emit metrics). A failed sample is kept as ``error`` and
    tried again next time; the thread never dies of it."""

    def __init__(
        self,
        ring: TelemetryRing,
        take: Callable[[], list[GPUSample]],
        every: float = RESOLUTION,
        on_sample: Callable[[list[GPUSample]], None] | None = None,
    ) -> None:
        self.ring, self.take, self.every, self.on_sample = ring, take, every, on_sample
        self.error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def sample_now(self) -> None:
        try:
            samples = self.take()
        except Exception as exc:  # noqa: BLE001 - NVML or the lease directory failing now: say so, try again
            self.error = f"{type(exc).__name__}: {exc}"[:500]
            return
        self.error = ""
        self.ring.add(samples)
        if self.on_sample is not None:
            try:
                self.on_sample(samples)
            except Exception as exc:  # noqa: BLE001 - a metrics backend failing must not stop the sampling
                self.error = f"metrics: {type(exc).__name__}: {exc}"[:500]

    def start(self) -> HostSampler:
        """Start sampling (once: a second call does nothing); the first sample is taken before this returns."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return self
            self._stop.clear()
            self.sample_now()
            self._thread = threading.Thread(target=self._loop, daemon=True, name=f"gpusched-telemetry-{self.ring.host}")
            self._thread.start()
        return self

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.sample_now()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
