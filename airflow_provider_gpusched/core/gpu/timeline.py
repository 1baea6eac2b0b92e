"""Who held which GPU when: the GPU timeline (a Gantt chart of leases per GPU).

Every attempt on a lease becomes a **segment** when it ends (:func:`segment_of`): host, GPUs, job class, priority,
start and end, and how it ended (:data:`OUTCOMES`: ``succeeded``, ``failed``, ``preempted``, ``oom``, ``timeout``,
``stopped``), with the task it ran for. A task publishes its segments as XCom :data:`LEASE_HISTORY_XCOM`
(:class:`SegmentLog`: the newest :data:`MAX_SEGMENTS` of them, and how many older ones were left out), so that
the api-server, which may run on another host, reads them from Airflow's database like every other record;
the lease a running task holds now is its open bar.

:func:`build_timeline` lays them out for a window: one row per host and GPU, bars clipped to the window, the
bars too short to see at that window merged into one "N short leases" bar per run of them (preemptions and
OOMs never: they are the marks a timeline is read for), so a day of ten thousand one-second trials draws as a
few hundred bars. Every record read back is checked (:func:`read_history_record`).

A segment also carries the attempt's GPU time as the host's ledger counts it (``gpu_seconds``, ``lost_gpu_seconds``:
core/gpu/accounting.py), so the GPU board totals the GPU time and preemptions of every task that publishes its
segments, the batched runners and an asynchronous sweep's workers among them, which publish no ``gpu_time`` record
of their own (:func:`ledger_of_history`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, cast

from typing_extensions import NotRequired, TypedDict

from airflow_provider_gpusched.core.gpu.published import MAX_HOST_GPUS, MAX_NAME
from airflow_provider_gpusched.core.records import Float, RecordType, Seconds, one_of, open_view, record_class, says
from airflow_provider_gpusched.core.safe_files import BadRecordError

LEASE_HISTORY_XCOM = "gpusched_lease_history"
#: segments one task publishes at most (its newest); a batched sweep's batch task makes one per group of trials
MAX_SEGMENTS = 2000
OUTCOMES = ("succeeded", "failed", "preempted", "oom", "timeout", "stopped", "running")
#: outcomes drawn as a mark at the bar's end, and never merged away
MARKED = ("preempted", "oom")
#: the answer's bounds: GPU rows and bars drawn (what is cut is said in the answer's ``cut``)
MAX_ROWS = 1024
MAX_BARS = 20000
#: windows the UI offers, in hours
WINDOW_HOURS = (1, 6, 24, 72)
#: bars per GPU row drawn at most before short ones are merged: a bar narrower than window / this is "short"
ROW_RESOLUTION = 600


def attempt_outcome(attempt: Any) -> tuple[str, str]:
    """(outcome, detail) of an :class:`~.attempts.Attempt`."""
    if attempt.halted:
        return "stopped", str(attempt.halted)
    if attempt.preempted:
        return "preempted", f"preempted: {attempt.preempted}"
    if attempt.timed_out:
        return "timeout", str(attempt.timed_out)
    if attempt.oom:
        return "oom", f"GPU out of memory with {attempt.request}: {attempt.oom}"
    if attempt.exit_code == 0:
        return "succeeded", ""
    if attempt.stopped:
        return "stopped", "stopped (the task was killed or stopped)"
    return "failed", f"exit code {attempt.exit_code}"


def segment_of(
    attempt: Any,
    *,
    job_class: str,
    priority: int = 0,
    label: str = "",
    dag_id: str = "",
    run_id: str = "",
    task_id: str = "",
    map_index: int = -1,
    group: str = "",
) -> dict[str, Any] | None:
    """The timeline segment of one ended attempt (None for an attempt that never held a GPU, or one recorded
    before attempts carried their start)."""
    if attempt.started is None or not attempt.gpus:
        return None
    outcome, detail = attempt_outcome(attempt)
    return _segment(
        host=attempt.host or "",
        gpus=attempt.gpus,
        job_class=job_class,
        priority=priority,
        start=float(attempt.started),
        end=round(float(attempt.started) + float(attempt.seconds), 3),
        outcome=outcome,
        detail=detail,
        request=attempt.request,
        attempt=attempt.number,
        label=label,
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        map_index=map_index,
        group=group,
        gpu_seconds=float(attempt.gpu_seconds),
        lost_gpu_seconds=float(attempt.lost_gpu_seconds),
    )


def _text(most: int, *, min_length: int = 0) -> Any:
    return says(f"a string of at most {most} characters", max_length=most, min_length=min_length)


@record_class
@dataclass
class Segment:
    """One attempt's hold of GPUs, as tasks publish it (XCom :data:`LEASE_HISTORY_XCOM`) and
    :func:`build_timeline` reads it; an open one (``running``) for a lease held now."""

    job_class: Annotated[str, _text(MAX_NAME, min_length=1)]
    gpus: Annotated[
        list[Annotated[int, says(f"a GPU index below {MAX_HOST_GPUS}", ge=0, lt=MAX_HOST_GPUS)]],
        says(
            f"a non-empty list of at most {MAX_HOST_GPUS} GPU indices below {MAX_HOST_GPUS}",
            strict=None,
            min_length=1,
            max_length=MAX_HOST_GPUS,
        ),
    ]
    start: Annotated[Float, says("a time stamp", strict=None)]
    end: Annotated[Float, says("a time stamp", strict=None)]
    outcome: Annotated[str, says("one of " + ", ".join(OUTCOMES)), one_of(OUTCOMES)]
    host: Annotated[str, _text(MAX_NAME)] = ""
    priority: Annotated[int, says("an integer")] = 0
    detail: Annotated[str, _text(500)] = ""
    request: Annotated[str, _text(MAX_NAME)] = ""
    attempt: Annotated[int, says("an integer")] = 1
    label: Annotated[str, _text(200)] = ""
    dag_id: Annotated[str, _text(MAX_NAME)] = ""
    run_id: Annotated[str, _text(MAX_NAME)] = ""
    task_id: Annotated[str, _text(MAX_NAME)] = ""
    map_index: Annotated[int, says("an integer")] = -1
    #: the quota group the work counted for (docs/quotas.md); '' without quotas
    group: Annotated[str, _text(MAX_NAME)] = ""
    #: the attempt's GPU time as the host's ledger counts it (a memory slice counts its share of the GPU) and the
    #: GPU time lost when it was preempted; absent in segments published before they were (then GPUs x seconds)
    gpu_seconds: Annotated[Seconds, says("a non-negative number", strict=None)] | None = None
    lost_gpu_seconds: Annotated[Seconds, says("a non-negative number", strict=None)] | None = None


@record_class
@dataclass
class DroppedTime:
    """The GPU time of the segments a task left out of its record (it keeps its newest): the board still counts it."""

    gpu_seconds: Annotated[Seconds, says("a non-negative number", strict=None)] = 0.0
    lost_gpu_seconds: Annotated[Seconds, says("a non-negative number", strict=None)] = 0.0
    preemptions: Annotated[int, says("a count", ge=0)] = 0
    #: when the newest of them ended
    until: Annotated[Float, says("a time stamp", strict=None)] = 0.0


@record_class
@dataclass
class History:
    """What one task publishes: its newest segments, and how many older ones it left out (and their GPU time)."""

    segments: Annotated[
        list[Segment],
        says(
            f"a list of at most {MAX_SEGMENTS} segments (a task publishes its newest {MAX_SEGMENTS})",
            strict=None,
            max_length=MAX_SEGMENTS,
        ),
    ]
    dropped: Annotated[int, says("a count", ge=0)] = 0
    dropped_time: DroppedTime | None = None


SEGMENT = RecordType(Segment, name="timeline segment")
DROPPED_TIME = RecordType(DroppedTime, name="GPU time left out")
HISTORY = RecordType(History, name="lease history")


def _segment(
    *,
    host: str,
    gpus: Iterable[int],
    job_class: str,
    priority: int,
    start: float,
    end: float,
    outcome: str,
    detail: str,
    request: str,
    attempt: int,
    label: str,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int,
    group: str = "",
    gpu_seconds: float | None = None,
    lost_gpu_seconds: float | None = None,
) -> dict[str, Any]:
    """A segment as tasks publish it and :func:`build_timeline` reads it (its detail and label cut to length)."""
    return SEGMENT.dump(
        Segment(
            host=host,
            gpus=list(gpus),
            job_class=job_class,
            priority=priority,
            start=start,
            end=end,
            outcome=outcome,
            detail=detail[:500],
            request=request,
            attempt=attempt,
            label=label[:200],
            dag_id=dag_id,
            run_id=run_id,
            task_id=task_id,
            map_index=map_index,
            group=group,
            gpu_seconds=None if gpu_seconds is None else round(gpu_seconds, 3),
            lost_gpu_seconds=None if lost_gpu_seconds is None else round(lost_gpu_seconds, 3),
        )
    )


class SegmentLog:
    """One task's segments, the newest :data:`MAX_SEGMENTS` kept (thread-safe: a batch's lease threads
    add to one log)."""

    def __init__(self, limit: int = MAX_SEGMENTS) -> None:
        self.limit = limit
        self._segments: list[dict[str, Any]] = []
        self._dropped = 0
        self._dropped_time = DroppedTime()
        self._lock = threading.Lock()

    def add(self, segment: dict[str, Any] | None) -> None:
        if segment is None:
            return
        with self._lock:
            self._segments.append(segment)
            if len(self._segments) > self.limit:
                extra = len(self._segments) - self.limit
                for old in self._segments[:extra]:  # the board still counts their GPU time
                    gone = segment_ledger(old)
                    self._dropped_time.gpu_seconds += gone["gpu_seconds"]
                    self._dropped_time.lost_gpu_seconds += gone["lost_gpu_seconds"]
                    self._dropped_time.preemptions += gone["preemptions"]
                    self._dropped_time.until = max(self._dropped_time.until, gone["time"])
                del self._segments[:extra]
                self._dropped += extra

    def __len__(self) -> int:
        return len(self._segments)

    def record(self) -> dict[str, Any]:
        """What the task publishes (XCom :data:`LEASE_HISTORY_XCOM`)."""
        with self._lock:
            record: dict[str, Any] = {"segments": list(self._segments), "dropped": self._dropped}
            if self._dropped:
                record["dropped_time"] = DROPPED_TIME.dump(self._dropped_time)
            return record


def read_history_record(data: Any, source: str) -> dict[str, Any]:
    """A published :meth:`SegmentLog.record`, checked field by field; :class:`BadRecordError` names ``source``, the
    segment and the key."""
    history = HISTORY.read(data, source)
    for i, segment in enumerate(history.segments):
        if segment.end < segment.start:
            raise BadRecordError(f"{source}: key 'segments[{i}].end': before its start, got {segment.end!r}")
    return HISTORY.dump(history)


def segment_ledger(segment: Mapping[str, Any]) -> dict[str, Any]:
    """One ended segment as a record of the host's ledger (core/gpu/accounting.py): when it ended, its class, the GPU
    time it used and lost, whether it was preempted. A segment of an older version, without its GPU time, counts
    each of its GPUs whole for its length."""
    used = segment.get("gpu_seconds")
    if used is None:
        used = len(segment["gpus"]) * max(0.0, segment["end"] - segment["start"])
    preempted = segment["outcome"] == "preempted"
    return {
        "time": float(segment["end"]),
        "job_class": segment["job_class"],
        "gpu_seconds": float(used),
        "lost_gpu_seconds": float(segment.get("lost_gpu_seconds") or 0.0),
        "preemptions": int(preempted),
    }


def ledger_of_history(history: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A task's published history (:func:`read_history_record`) as the host's ledger has it: one record per ended
    attempt (:func:`segment_ledger`), and one for the attempts it left out of its record (their GPU time summed,
    counted as that many attempts by ``attempts``). Open (``running``) segments are left out: the lease is still
    held, and the board counts it as running work."""
    out = [segment_ledger(s) for s in history["segments"] if s["outcome"] != "running"]
    dropped = history.get("dropped_time")
    if history.get("dropped") and dropped:
        job_class = history["segments"][0]["job_class"] if history["segments"] else "normal"
        out.append(
            {
                "time": float(dropped["until"]),
                "job_class": job_class,
                "gpu_seconds": float(dropped["gpu_seconds"]),
                "lost_gpu_seconds": float(dropped["lost_gpu_seconds"]),
                "preemptions": int(dropped["preemptions"]),
                "attempts": int(history["dropped"]),
            }
        )
    return out


def running_segment(lease: Any, now: float) -> dict[str, Any]:
    """The open bar of a lease a running task holds now (a :class:`~.board.BoardLease`)."""
    return _segment(
        host=lease.host,
        gpus=lease.gpus,
        job_class=lease.job_class,
        priority=lease.priority,
        start=float(lease.started),
        end=now,
        outcome="running",
        detail=f"holds it now{f'; yielding to {lease.yielding_to}' if lease.yielding_to else ''}",
        request="whole GPU" if lease.whole else "",
        attempt=0,
        label="",
        dag_id=lease.dag_id,
        run_id=lease.run_id,
        task_id=lease.task_id,
        map_index=lease.map_index,
        group=getattr(lease, "group", ""),
    )


_BAR_KEYS = (
    "group",
    "job_class",
    "outcome",
    "detail",
    "request",
    "attempt",
    "label",
    "dag_id",
    "run_id",
    "task_id",
    "map_index",
    "priority",
)


@open_view
class TimelineBar(TypedDict):
    """One lease (or a run of short ones merged: ``count`` and what they were) on one GPU row. A bar leaves out
    the fields it has no value for (its task's when it ran outside Airflow)."""

    start: float
    end: float
    map_index: int
    lane: NotRequired[int]
    group: NotRequired[str]
    job_class: NotRequired[str]
    outcome: NotRequired[str]
    detail: NotRequired[str]
    request: NotRequired[str]
    attempt: NotRequired[int]
    label: NotRequired[str]
    dag_id: NotRequired[str]
    run_id: NotRequired[str]
    task_id: NotRequired[str]
    priority: NotRequired[int]
    count: NotRequired[int]
    busy: NotRequired[float]
    outcomes: NotRequired[dict[str, int]]
    classes: NotRequired[dict[str, int]]
    groups: NotRequired[dict[str, int]]


@open_view
class TimelineRow(TypedDict):
    """One GPU of one host: its bars (segments cut to the window), stacked in lanes where they overlap."""

    host: str
    gpu: int
    bars: list[TimelineBar]
    lanes: int
    busy_fraction: float


@open_view
class TimelineView(TypedDict):
    """Who held which GPU (:func:`build_timeline`), as ``GET /gpusched/api/timeline`` answers it."""

    since: float
    until: float
    rows: list[TimelineRow]
    classes: list[str]
    groups: list[str]  # quota groups seen (docs/quotas.md): the page colours by group when there are any
    counts: dict[str, int]  # leases per outcome
    bars: int
    dropped: int  # segments tasks left out of their records (each keeps its newest)
    problems: list[str]
    windows: list[float]  # the hours the page offers
    cut: list[str]  # what the answer left out
    hours: NotRequired[float]


def build_timeline(
    segments: Iterable[Mapping[str, Any]],
    *,
    since: float,
    until: float,
    known_gpus: Mapping[str, Sequence[int]] | None = None,
    resolution: int = ROW_RESOLUTION,
    problems: Sequence[str] = (),
    dropped: int = 0,
) -> TimelineView:
    """The timeline of ``segments`` between ``since`` and ``until``: ``rows`` (one per host and GPU, with GPUs of
    ``known_gpus`` that held nothing too), each with its ``bars`` (clipped to the window) in ``lanes``; ``classes``
    seen, and the leases counted per outcome. A row of more than ``resolution`` bars has its runs of bars shorter
    than ``(until - since) / resolution`` merged into one bar each, with a ``count`` and the ``classes`` and
    ``outcomes`` of its leases (a row that fits is drawn lease by lease). Times are kept to 0.1 s and a bar leaves
    out the fields it has no value for."""
    if until <= since:
        raise ValueError("until must be after since")
    short = (until - since) / max(1, resolution)
    per_gpu: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for host, gpus in (known_gpus or {}).items():
        for g in gpus:
            per_gpu.setdefault((host, g), [])
    counts = {o: 0 for o in OUTCOMES}
    classes: set[str] = set()
    groups: set[str] = set()
    for s in segments:
        if s["end"] < since or s["start"] >= until:
            continue
        counts[s["outcome"]] += 1
        classes.add(s["job_class"])
        if s.get("group"):
            groups.add(s["group"])
        for g in s["gpus"]:
            per_gpu.setdefault((s["host"], g), []).append(s)
    rows: list[TimelineRow] = []
    bars_total = 0
    cut = []
    if len(per_gpu) > MAX_ROWS:
        cut.append(f"{len(per_gpu) - MAX_ROWS} GPU row(s) past the first {MAX_ROWS} are not drawn")
    for (host, gpu), found in sorted(per_gpu.items())[:MAX_ROWS]:
        if bars_total >= MAX_BARS:
            cut.append(f"rows from {host} GPU {gpu} on are not drawn: the answer holds {MAX_BARS} bars at most")
            break
        found.sort(key=lambda s: (s["start"], s["end"]))
        bars = (
            _merged(found, since, until, short) if len(found) > resolution else [_bar(s, since, until) for s in found]
        )
        bars_total += len(bars)
        lanes = _lay_out(bars)
        rows.append(
            {
                "host": host,
                "gpu": gpu,
                "bars": cast("list[TimelineBar]", bars),
                "lanes": lanes,
                "busy_fraction": round(_covered(found, since, until) / (until - since), 4),
            }
        )
    return {
        "since": since,
        "until": until,
        "rows": rows,
        "classes": sorted(classes),
        "groups": sorted(groups),
        "counts": counts,
        "bars": bars_total,
        "dropped": dropped,
        "problems": list(problems)[:50],
        "windows": list(WINDOW_HOURS),
        "cut": cut,
    }


_DEFAULTS = {"map_index": -1, "priority": 0, "attempt": 1}


def _bar(s: Mapping[str, Any], since: float, until: float) -> dict[str, Any]:
    bar = {"start": round(max(s["start"], since), 1), "end": round(min(s["end"], until), 1)}
    for key in _BAR_KEYS:
        value = s.get(key)
        if value not in (None, "") and value != _DEFAULTS.get(key):
            bar[key] = value
    bar.setdefault("map_index", -1)
    return bar


def _merged(found: Sequence[Mapping[str, Any]], since: float, until: float, short: float) -> list[dict[str, Any]]:
    """Bars of one crowded row: each run of short leases (not a preemption, an OOM or a running lease) one bar."""
    bars: list[dict[str, Any]] = []
    for s in found:
        start, end = max(s["start"], since), min(s["end"], until)
        tiny = end - start < short and s["outcome"] not in MARKED and s["outcome"] != "running"
        last = bars[-1] if bars else None
        if tiny and last is not None and last.get("count") and start - last["end"] <= short:
            last["end"] = round(max(last["end"], end), 1)
            last["count"] += 1
            last["busy"] += end - start
            last["outcomes"][s["outcome"]] = last["outcomes"].get(s["outcome"], 0) + 1
            last["classes"][s["job_class"]] = last["classes"].get(s["job_class"], 0) + 1
            if s.get("group"):
                last["groups"][s["group"]] = last["groups"].get(s["group"], 0) + 1
            continue
        bar = _bar(s, since, until)
        if tiny:  # may start a merged run; stays a plain bar if nothing joins it
            bar.update(
                count=1,
                busy=end - start,
                outcomes={s["outcome"]: 1},
                classes={s["job_class"]: 1},
                groups={s["group"]: 1} if s.get("group") else {},
            )
        bars.append(bar)
    for i, bar in enumerate(bars):
        if bar.get("count") == 1:
            for key in ("count", "busy", "outcomes", "classes", "groups"):
                bar.pop(key)
        elif bar.get("count"):  # drawn in the colour of the class most of its leases had; the first lease's link
            first: dict[str, Any] = {k: bar[k] for k in ("dag_id", "run_id", "task_id", "map_index") if k in bar}
            bars[i] = {
                "start": bar["start"],
                "end": bar["end"],
                "count": bar["count"],
                "busy": round(bar["busy"], 1),
                "outcomes": bar["outcomes"],
                "classes": bar["classes"],
                "outcome": "merged",
                "job_class": max(sorted(bar["classes"]), key=lambda c: bar["classes"][c]),
                **({"group": max(sorted(bar["groups"]), key=lambda g: bar["groups"][g])} if bar["groups"] else {}),
                **first,
            }
    return bars


def _lay_out(bars: list[dict[str, Any]]) -> int:
    """Give each bar (sorted by start) a ``lane``: leases that share a GPU at once (memory slices) are drawn one
    above the other. Returns the number of lanes."""
    ends: list[float] = []
    for bar in bars:
        lane = next((i for i, end in enumerate(ends) if end <= bar["start"]), len(ends))
        if lane == len(ends):
            ends.append(0.0)
        ends[lane] = bar["end"]
        bar["lane"] = lane
    return max(1, len(ends))


def _covered(segments: Sequence[Mapping[str, Any]], since: float, until: float) -> float:
    """Seconds of the window in which at least one of ``segments`` (sorted by start) held the GPU."""
    total, reach = 0.0, since
    for s in segments:
        start, end = max(s["start"], reach), min(s["end"], until)
        if end > start:
            total += end - start
            reach = end
    return total
