"""Job classes: ``normal`` work and ``idle`` fill-in work (seed pavi's ``normal=False``), and the one
mapping that says what a (class, priority) pair means everywhere.

A DAG author writes ``job_class="idle"`` (and optionally ``priority=3``); :class:`JobClassMapping`
turns that into

* **Airflow** settings: ``pool``, ``pool_slots`` (``"gpus"``: one slot per GPU asked for),
  ``priority_weight`` (the class's weight plus the task's priority, ``weight_rule="absolute"``), ``queue``;
* **Slurm** settings: ``partition``, ``qos``, ``nice`` (the class's nice minus the priority, never below 0:
  only administrators may set negative values), ``requeue``, ``account``;
* **local-GPU** settings (:class:`LocalClassPolicy`): whether leases are preemptible, the grace period
  between SIGTERM and SIGKILL, the minimum runtime before preemption, the maximum number of preemptions,
  the backoff before relaunching, and how long a GPU must have been idle (utilisation and foreign memory
  under thresholds) before fill-in work may start on it.

The mapping comes from a YAML/JSON file or inline text (the Airflow option ``[gpusched] job_classes``);
what it leaves out keeps the defaults below. Explicit operator arguments win over the class. Read while the
scheduler runs, the file goes through core/quota/last_good.py: a broken edit keeps its last good version in force.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from airflow_provider_gpusched.core.checks import is_int, is_number
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.units import parse_bytes

JOB_CLASSES = ("normal", "idle")


class JobClassConfigError(GpuschedError):
    """The job-class mapping (file or inline text) is not valid; the message names the source and key."""


def check_job_class(job_class: str, *, argument: str = "job_class") -> str:
    if job_class not in JOB_CLASSES:
        raise InvalidArgumentError(argument, job_class, f"one of {', '.join(JOB_CLASSES)}")
    return job_class


def check_priority(priority: Any, *, argument: str = "priority") -> int:
    if not is_int(priority):
        raise InvalidArgumentError(argument, priority, "a whole number (higher runs first)")
    return priority


@dataclass(frozen=True)
class AirflowClassSettings:
    pool: str | None = None
    pool_slots: str | int = "gpus"  # "gpus": one slot per GPU the task asks for
    priority_weight: int = 1
    queue: str | None = None


@dataclass(frozen=True)
class SlurmClassSettings:
    partition: str | None = None
    qos: str | None = None
    nice: int = 0
    requeue: bool | None = None
    account: str | None = None


@dataclass(frozen=True)
class LocalClassPolicy:
    """How a class behaves on local GPUs. ``fill_in``: the class only fills idle GPUs (never starts while
    normal work waits, only on GPUs quiet for ``idle_for``); ``preemptible``: its leases give their GPUs back
    to normal work (the timing fields). A fill-in class that is not preemptible is a polite filler: it waits
    its turn but, once started, finishes."""

    preemptible: bool = False
    grace_period: float = 30.0  # seconds between SIGTERM (checkpoint now) and SIGKILL
    min_runtime: float = 60.0  # an idle task runs at least this long before a normal task may preempt it
    max_preemptions: int = 5  # after this many, the task's next lease is not preemptible (it finishes)
    backoff: float = 30.0  # seconds before relaunching after a preemption (doubles each time, capped)
    max_backoff: float = 600.0
    idle_for: float = 60.0  # a GPU must have been free of foreign work this long before idle work starts
    max_utilization: int = 10  # percent: above this (with no lease of ours on it) a GPU counts as busy
    max_foreign_memory: int = 512 * 1024**2  # bytes used by processes we do not know: above it, busy
    fill_in: bool = False  # only on idle GPUs, never ahead of waiting normal work

    def backoff_for(self, preemptions: int) -> float:
        """Seconds to wait before relaunching after the ``preemptions``-th preemption."""
        return float(min(self.max_backoff, self.backoff * 2 ** max(0, preemptions - 1)))


@dataclass(frozen=True)
class JobClass:
    name: str
    airflow: AirflowClassSettings
    slurm: SlurmClassSettings
    local: LocalClassPolicy

    def airflow_settings(self, priority: int = 0, gpus: int = 1) -> dict[str, Any]:
        """Operator keyword arguments (only those the class sets)."""
        a = self.airflow
        out: dict[str, Any] = {
            "priority_weight": a.priority_weight + priority,
            "weight_rule": "absolute",
            "pool_slots": max(1, gpus) if a.pool_slots == "gpus" else int(a.pool_slots),
        }
        if a.pool:
            out["pool"] = a.pool
        if a.queue:
            out["queue"] = a.queue
        return out

    def slurm_settings(self, priority: int = 0) -> dict[str, Any]:
        """sbatch settings (partition, qos, nice, requeue, account) the class implies; unset ones left out."""
        s = self.slurm
        out: dict[str, Any] = {
            k: v
            for k, v in (("partition", s.partition), ("qos", s.qos), ("account", s.account), ("requeue", s.requeue))
            if v not in (None, "")
        }
        nice = max(0, s.nice - priority)
        if nice:
            out["nice"] = nice
        return out


DEFAULT_CLASSES: dict[str, JobClass] = {
    "normal": JobClass(
        "normal", AirflowClassSettings(priority_weight=100), SlurmClassSettings(), LocalClassPolicy(preemptible=False)
    ),
    "idle": JobClass(
        "idle",
        AirflowClassSettings(pool="gpusched_idle", priority_weight=1),
        SlurmClassSettings(partition="idle", requeue=True, nice=100),
        LocalClassPolicy(fill_in=True, preemptible=True),
    ),
}

_SECTIONS = {"airflow": AirflowClassSettings, "slurm": SlurmClassSettings, "local": LocalClassPolicy}
_BYTES = {"max_foreign_memory"}


@dataclass
class JobClassMapping:
    """Every class's settings. ``JobClassMapping()`` is the built-in default."""

    classes: dict[str, JobClass] = field(default_factory=lambda: dict(DEFAULT_CLASSES))
    source: str = "built-in defaults"
    #: what is wrong with the mapping's file now, when this is its last good version kept in force
    #: (core/quota/last_good.py)
    config_error: str = ""

    def __getitem__(self, job_class: str) -> JobClass:
        return self.classes[check_job_class(job_class)]

    def pools(self) -> dict[str, list[str]]:
        """Pool name -> the classes that use it."""
        pools: dict[str, list[str]] = {}
        for name, cls in self.classes.items():
            if cls.airflow.pool:
                pools.setdefault(cls.airflow.pool, []).append(name)
        return pools

    def pool_plan(self, gpus_for_class: Callable[[JobClass], int], slots_per_gpu: int = 1) -> dict[str, dict[str, Any]]:
        """The Airflow pools this mapping names: ``{pool: {"slots", "include_deferred", "description", "classes"}}``,
        with ``slots_per_gpu`` slots per GPU that the classes using it can run on (``gpus_for_class``: from the GPU
        inventory, or the class's Slurm partition). With more than one slot per GPU, deferred tasks count against
        the pool: the tasks beyond the GPUs wait for them (in their worker, then deferred) without more tasks
        starting in their place."""
        plan: dict[str, dict[str, Any]] = {}
        for pool, names in self.pools().items():
            gpus = max(1, max(gpus_for_class(self.classes[n]) for n in names))
            per = "one slot per GPU" if slots_per_gpu == 1 else f"{slots_per_gpu} slots per GPU, deferred tasks counted"
            plan[pool] = {
                "slots": gpus * slots_per_gpu,
                "include_deferred": slots_per_gpu > 1,
                "classes": names,
                "description": f"gpusched: {', '.join(names)}-class GPU work, {per}",
            }
        return plan

    def to_dict(self) -> dict[str, Any]:
        return {
            name: {"airflow": asdict(c.airflow), "slurm": asdict(c.slurm), "local": asdict(c.local)}
            for name, c in self.classes.items()
        }

    @classmethod
    def from_dict(cls, data: Any, source: str = "job classes") -> JobClassMapping:
        if data is None:
            return cls(source=source)
        if not isinstance(data, Mapping):
            raise JobClassConfigError(
                f"{source}: expected a mapping of job classes ({', '.join(JOB_CLASSES)}), got {type(data).__name__}"
            )
        classes = dict(DEFAULT_CLASSES)
        for name, body in data.items():
            if name not in JOB_CLASSES:
                raise JobClassConfigError(
                    f"{source}: unknown job class {name!r}; expected one of {', '.join(JOB_CLASSES)}"
                )
            if body is None:
                continue
            if not isinstance(body, Mapping):
                raise JobClassConfigError(f"{source}: {name}: expected a mapping with airflow/slurm/local sections")
            base = classes[name]
            parts: dict[str, Any] = {"airflow": base.airflow, "slurm": base.slurm, "local": base.local}
            for section, values in body.items():
                if section not in _SECTIONS:
                    raise JobClassConfigError(
                        f"{source}: {name}.{section}: unknown section; expected one of {', '.join(_SECTIONS)}"
                    )
                if values is None:
                    continue
                if not isinstance(values, Mapping):
                    raise JobClassConfigError(f"{source}: {name}.{section}: expected a mapping")
                parts[section] = _update(parts[section], values, f"{source}: {name}.{section}")
            classes[name] = JobClass(name, parts["airflow"], parts["slurm"], parts["local"])
        return cls(classes, source)

    @classmethod
    def load(cls, text_or_path: str | None) -> JobClassMapping:
        """From a YAML/JSON file path, or inline YAML/JSON text; empty means the defaults."""
        if not text_or_path or not str(text_or_path).strip():
            return cls()
        from airflow_provider_gpusched.core.yaml_loader import load_setting

        data, source = load_setting(
            str(text_or_path), "[gpusched] job_classes", "job-class mapping file", JobClassConfigError
        )
        return cls.from_dict(data, source)


def _update(settings: Any, values: Mapping[str, Any], where: str) -> Any:
    known = {f.name: f for f in fields(settings)}
    changes: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known:
            raise JobClassConfigError(f"{where}.{key}: unknown setting; expected one of {', '.join(known)}")
        current = getattr(settings, key)
        try:
            if key in _BYTES:
                value = parse_bytes(value, argument=key)
            elif key == "pool_slots":
                if value != "gpus" and (not is_int(value) or value < 1):
                    raise ValueError("'gpus' or a whole number >= 1")
            elif isinstance(current, bool) or key in ("fill_in", "preemptible", "requeue"):
                if value is not None and not isinstance(value, bool):
                    raise ValueError("true or false")
            elif is_int(current):
                if not is_int(value):
                    raise ValueError("a whole number")
                if key == "max_preemptions" and value < 0:
                    raise ValueError("a whole number >= 0")
            elif isinstance(current, float):
                if not is_number(value) or value < 0:
                    raise ValueError("a number of seconds >= 0")
                value = float(value)
            elif value is not None and not isinstance(value, str):
                raise ValueError("a string or null")
        except (ValueError, InvalidArgumentError) as exc:
            raise JobClassConfigError(f"{where}.{key}: expected {exc}, got {json.dumps(value, default=str)}") from None
        changes[key] = value
    return replace(settings, **changes)


def slurm_class_settings(
    job_class: str,
    mapping: JobClassMapping | None = None,
    priority: int = 0,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The sbatch settings ``job_class`` implies under ``mapping``, with non-empty ``overrides`` on top
    (a Slurm connection's ``idle_partition``/``idle_qos``)."""
    settings = (mapping or JobClassMapping())[job_class].slurm_settings(priority)
    settings.update({k: v for k, v in (overrides or {}).items() if v not in (None, "")})
    return settings
