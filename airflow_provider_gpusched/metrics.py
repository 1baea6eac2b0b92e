"""gpusched's metrics, sent through Airflow's own metrics (``[metrics]``: StatsD, Datadog or OpenTelemetry), so a
setup that already collects Airflow's metrics gets these too (docs/metrics.md lists them, with a Grafana
dashboard).

Each metric carries its variable parts twice: in the name (plain StatsD has no tags: ``gpusched.gpus_leased.<host>``)
and as tags (OpenTelemetry, Datadog, StatsD with ``statsd_influxdb_enabled``). Host, partition and sweep names are
cut to the characters metric names allow (``.`` becomes ``_``: it separates a name's parts). Nothing is sent
where ``[metrics]`` turns every backend off; a metric that cannot be sent never fails the work.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

log = logging.getLogger(__name__)

PREFIX = "gpusched"
_BAD = re.compile(r"[^A-Za-z0-9_-]")
_state: dict[str, Any] = {"key": None}


#: one part of a metric name at most; a longer one keeps its start and a hash of the whole, so two names that
#: share their first 80 characters stay two metrics
MAX_PART = 80
#: Airflow refuses a stat name (with its tags, under statsd_influxdb_enabled) over 250 characters
MAX_STAT = 250


def part(value: Any) -> str:
    """A name, host or state as one part of a metric name (or a tag's value): the characters metric names allow,
    at most :data:`MAX_PART` of them, distinct for distinct long values."""
    import hashlib

    text = str(value)
    clean = _BAD.sub("_", text) or "_"
    if len(clean) <= MAX_PART:
        return clean
    return clean[: MAX_PART - 9] + "-" + hashlib.sha256(text.encode()).hexdigest()[:8]


def _tags(name: str, tags: dict[str, Any] | None) -> dict[str, str]:
    """Tags as Airflow's backends take them: values in the allowed characters, and only as many as keep the name
    with its tags (``name,k=v,...``, as StatsD with InfluxDB tags sends it) within :data:`MAX_STAT` characters;
    the name carries every part anyway."""
    out: dict[str, str] = {}
    room = MAX_STAT - len("airflow.") - len(name)
    for key, value in (tags or {}).items():
        item = (part(key), part(value))
        room -= len(item[0]) + len(item[1]) + 2
        if room < 0:
            break
        out[item[0]] = item[1]
    return out


def _stats():
    """Airflow's ``Stats``, set up from ``[metrics]`` in this process once (again if the settings change: tests),
    whichever Airflow component runs us (a task, the triggerer's runner, the api-server, an Edge worker)."""
    from airflow.sdk.configuration import conf
    from airflow.sdk.observability.stats import Stats

    key = (
        os.getpid(),
        conf.getboolean("metrics", "statsd_on", fallback=False),
        conf.getboolean("metrics", "otel_on", fallback=False),
        conf.getboolean("metrics", "statsd_datadog_enabled", fallback=False),
        conf.get("metrics", "statsd_host", fallback=""),
        conf.get("metrics", "statsd_port", fallback=""),
    )
    if _state["key"] != key:
        from airflow.sdk.observability.metrics.stats_utils import get_stats_factory

        try:  # Task SDK 1.3 (Airflow 3.3)
            Stats.initialize(
                factory=get_stats_factory(),
                export_legacy_names=conf.getboolean("metrics", "legacy_names_on", fallback=True),
            )
        except TypeError:  # Task SDK 1.2 (Airflow 3.2)
            Stats.initialize(factory=get_stats_factory())
        _state["key"] = key
    return Stats


def _send(kind: str, name: str, value: float | None = None, tags: dict[str, Any] | None = None) -> None:
    try:
        stats = _stats()
        tags = _tags(name, tags)
        if kind == "incr":
            stats.incr(name, count=int(value or 1), tags=tags)
        elif kind == "gauge":
            stats.gauge(name, value, tags=tags)
        else:
            stats.timing(name, timedelta(seconds=value or 0.0), tags=tags)
    except Exception as exc:  # noqa: BLE001 - a metrics backend failing never fails the work
        log.debug("gpusched metric %s not sent: %s", name, exc)


def gauge(name: str, value: float, tags: dict[str, Any] | None = None) -> None:
    _send("gauge", name, value, tags)


def incr(name: str, count: int = 1, tags: dict[str, Any] | None = None) -> None:
    _send("incr", name, count, tags)


def timing(name: str, seconds: float, tags: dict[str, Any] | None = None) -> None:
    _send("timing", name, seconds, tags)


# -- what gpusched measures ----------------------------------------------------------------------------------
def emit_gpu_samples(host: str, samples: Iterable[Any], manager=None, *, busy_utilization: int = 10) -> None:
    """A host's GPUs now (one sample each, core/gpu/telemetry.py): GPUs leased, free and measured in use on the
    host, and each GPU's utilisation, memory in use and temperature; with ``manager``, the tasks waiting there."""
    samples = list(samples)
    h = part(host)
    held: set[int] = set()
    waiting = 0
    if manager is not None:
        try:
            _gpus, leases = manager.snapshot()
            held = {g for lease in leases for g in lease.gpus}
            waiting = len(manager.yields.waiting(prune=False))  # normal work waiting (fill-in work never marks)
        except Exception:  # noqa: BLE001 - the lease directory unreadable now: the GPU figures still go out
            held = set()
    in_use = [s for s in samples if (s.utilization or 0) > busy_utilization or s.processes]
    tags = {"host": host}
    gauge(f"{PREFIX}.gpus.{h}", len(samples), tags)
    gauge(f"{PREFIX}.gpus_leased.{h}", len(held), tags)
    gauge(f"{PREFIX}.gpus_free.{h}", len([s for s in samples if s.index not in held]), tags)
    gauge(f"{PREFIX}.gpus_in_use.{h}", len(in_use), tags)
    gauge(f"{PREFIX}.tasks_waiting_for_gpus.{h}", waiting, tags)
    try:
        emit_settings_files()
    except Exception:  # Airflow's configuration unreadable now: the GPU figures still go out
        log.debug("gpusched settings-file metrics not sent", exc_info=True)
    quotas = getattr(manager, "quotas", None)
    if quotas is not None:
        try:
            emit_quotas(quotas.book, quotas.capacity())
        except Exception:  # the quota book unreadable now: the GPU figures still go out
            log.debug("gpusched quota metrics not sent", exc_info=True)
    for s in samples:
        gpu_tags = {"host": host, "gpu": s.index}
        if s.utilization is not None:
            gauge(f"{PREFIX}.gpu_utilization.{h}.{s.index}", s.utilization, gpu_tags)
        gauge(f"{PREFIX}.gpu_memory_used.{h}.{s.index}", s.memory_used, gpu_tags)
        if s.temperature is not None:
            gauge(f"{PREFIX}.gpu_temperature.{h}.{s.index}", s.temperature, gpu_tags)


def emit_quotas(book, capacity: float) -> None:
    """Each quota group now (core/quota/report.py): its quota, what it holds (within its quota and borrowed), what
    of its quota others borrow (lent), what it waits for, and how many of its requests wait within their quota (in
    the fleet's resource: GPUs or bytes of GPU memory)."""
    from airflow_provider_gpusched.core.quota.report import quota_view

    view = quota_view(book, capacity)
    for g in view["groups"]:
        tags = {"group": g["group"]}
        name = part(g["group"])
        for key, value in (
            ("quota", g["quota"]),
            ("used", g["used"]),
            ("in_quota", g["in_quota"]),
            ("borrowed", g["borrowed"]),
            ("lent", g["lent"]),
            ("waiting", g["waiting"]),
        ):
            gauge(f"{PREFIX}.quota_{key}.{name}", value, tags)
        gauge(f"{PREFIX}.quota_waiting_within.{name}", sum(1 for w in g["waiters"] if w["kind"] == "quota"), tags)


#: the settings files read while the scheduler runs: (the metric's part, how settings.py reads it)
SETTINGS_FILES = (("quotas", "quota_config"), ("job_classes", "job_class_mapping"))


def emit_settings_files() -> None:
    """``gpusched.settings_file_broken.<setting>``: 1 while the file of ``[gpusched] quotas`` / ``job_classes`` is
    broken (its last good version in force meanwhile, or none: then every reader fails), else 0."""
    from airflow_provider_gpusched import settings
    from airflow_provider_gpusched.core.errors import GpuschedError

    for name, reader in SETTINGS_FILES:
        try:
            broken = bool(getattr(settings, reader)().config_error)
        except GpuschedError:  # broken, and never good in this process or on this host
            broken = True
        gauge(f"{PREFIX}.settings_file_broken.{name}", 1 if broken else 0, {"setting": name})


def quota_reclaim(group: str, host: str, count: int = 1) -> None:
    """Work of ``group`` gave back GPUs it borrowed (reclaimed for their own group's work)."""
    incr(f"{PREFIX}.quota_reclaims.{part(group)}", count, {"group": group, "host": host})


def gpu_wait(seconds: float, job_class: str, host: str) -> None:
    """A task got its GPUs after waiting ``seconds``."""
    timing(f"{PREFIX}.gpu_wait.{part(job_class)}", seconds, {"job_class": job_class, "host": host})


def preemption(job_class: str, host: str, count: int = 1) -> None:
    incr(f"{PREFIX}.preemptions.{part(job_class)}", count, {"job_class": job_class, "host": host})


def oom_retry(job_class: str, host: str, count: int = 1) -> None:
    incr(f"{PREFIX}.oom_retries.{part(job_class)}", count, {"job_class": job_class, "host": host})


def slurm_jobs(counts: dict[tuple[str, str], int]) -> None:
    """Slurm jobs of gpusched's tasks by (partition, state), state ``pending`` or ``running``."""
    for (partition, state), n in counts.items():
        gauge(f"{PREFIX}.slurm_jobs.{part(partition)}.{part(state)}", n, {"partition": partition, "state": state})


def trial_finished(sweep: str, state: str) -> None:
    """A sweep's trial ended ``state`` (succeeded, failed, pruned, timeout)."""
    incr(f"{PREFIX}.sweep_trials.{part(sweep)}.{part(state)}", 1, {"sweep": sweep, "state": state})


class SlurmJobCounts:
    """A shared Slurm poller's listener (core/slurm/poller.py): after each poll, the jobs it watches by partition,
    pending and running, as gauges; a partition whose jobs all ended goes back to 0."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, str]] = set()

    def __call__(self, statuses: dict[str, Any]) -> None:
        counts: dict[tuple[str, str], int] = {}
        for status in statuses.values():
            state = getattr(status.phase, "value", "")
            if state in ("pending", "running"):
                key = (status.partition or "default", state)
                counts[key] = counts.get(key, 0) + 1
        for key in self.seen - set(counts):
            counts[key] = 0
        self.seen |= set(counts)
        slurm_jobs(counts)
