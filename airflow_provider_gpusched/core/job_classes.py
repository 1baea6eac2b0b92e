"""Job classes: ``normal`` work and ``idle`` fill-in work (seed pavi's ``normal=False``), and the one
mapping that says what a (class, priority) pair means everywhere.

A DAG author writes ``job_class="idle"`` (and optionally ``priority=3``); :class:`JobClassMapping`
turns that into

* **Airflow** settings (the ``airflow`` section, shared by every backend): ``pool``, ``pool_slots`` (``"gpus"``:
  one slot per GPU asked for), ``priority_weight`` (the class's weight plus the task's priority,
  ``weight_rule="absolute"``), ``queue``;
* each backend's own settings, in a section named after it: the backend's ``job_class_settings``
  (core/backends.py), a dataclass in the backend's module that holds its defaults per class (``for_class``) and
  says how its keys are checked (``checks``; the rest by their type). This module parses any registered backend's
  section the same way: the built-in ones are ``slurm`` (core/slurm/options.py: partition, qos, nice, requeue,
  account) and ``local`` (core/gpu/class_policy.py: preemption and fill-in on this host's GPUs).

The mapping comes from a YAML/JSON file or inline text (the Airflow option ``[gpusched] job_classes``);
what it leaves out keeps the defaults below. Explicit operator arguments win over the class. Read while the
scheduler runs, the file goes through core/quota/last_good.py: a broken edit keeps its last good version in force.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Mapping
from dataclasses import Field, asdict, dataclass, field, fields, replace
from typing import Any, ClassVar

from airflow_provider_gpusched.core.checks import is_int, is_number
from airflow_provider_gpusched.core.deprecation import GpuschedDeprecationWarning, moved_names
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError

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


def _pool_slots(value: Any) -> Any:
    if value != "gpus" and (not is_int(value) or value < 1):
        raise ValueError("'gpus' or a whole number >= 1")
    return value


@dataclass(frozen=True)
class AirflowClassSettings:
    pool: str | None = None
    pool_slots: str | int = "gpus"  # "gpus": one slot per GPU the task asks for
    priority_weight: int = 1
    queue: str | None = None

    #: the keys a mapping file writes otherwise than their type says (:func:`_update` checks the rest)
    checks: ClassVar[Mapping[str, Callable[[Any], Any]]] = {"pool_slots": _pool_slots}


@dataclass(frozen=True, init=False, eq=False)
class JobClass:
    """A class's settings: the shared ``airflow`` section, and each backend's own section (a backend's
    ``job_class_settings``, core/backends.py), read as ``job_class.section("slurm")`` or ``job_class.slurm``.

    A backend's section is given by its name (``JobClass("idle", airflow, slurm=..., local=...)``; the older
    positional form ``JobClass(name, airflow, slurm, local)`` still works). Two classes are equal when every
    section reads the same, a section left out being the backend's default for the class."""

    name: str
    airflow: AirflowClassSettings = field(default_factory=AirflowClassSettings)
    #: only the backends' sections set explicitly (a mapping's source, a keyword); a section left out is the
    #: backend's default for the class (:meth:`section` answers both)
    explicit_sections: Mapping[str, Any] = field(default_factory=dict)

    def __init__(
        self,
        name: str,
        airflow: AirflowClassSettings | None = None,
        *sections_in_order: Any,
        explicit_sections: Mapping[str, Any] | None = None,
        **sections: Any,
    ) -> None:
        explicit = dict(explicit_sections or {})
        if len(sections_in_order) == 1 and isinstance(sections_in_order[0], Mapping):
            explicit.update(sections_in_order[0])  # JobClass(name, airflow, {"slurm": ...})
        else:
            explicit.update(_old_positional(sections_in_order))
        unknown = sorted(k for k in sections if not _loads_section(k))
        if unknown:
            raise TypeError(f"JobClass() got an unexpected keyword argument {unknown[0]!r}")
        explicit.update(sections)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "airflow", AirflowClassSettings() if airflow is None else airflow)
        object.__setattr__(self, "explicit_sections", explicit)

    def section(self, backend: str) -> Any:
        """The settings of ``backend``'s section; a name with no section is an InvalidArgumentError."""
        found = self.airflow if backend == "airflow" else self.explicit_sections.get(backend)
        if found is not None:
            return found
        settings = section_class(backend)
        if settings is None:
            raise InvalidArgumentError("job class section", backend, f"one of {', '.join(section_names()[1:])}")
        return _defaults(settings, self.name)

    def __getattr__(self, name: str) -> Any:
        """A backend's section as an attribute (``job_class.local``)."""
        if name.startswith("_") or name in ("name", "airflow", "explicit_sections"):
            raise AttributeError(name)  # copying and unpickling look for these before the fields are set
        try:
            return self.section(name)
        except InvalidArgumentError:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}") from None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JobClass):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[Any, ...]:
        """What equality compares: the name, the airflow section, and the sections set otherwise than the backend's
        default (a section set to its default reads as one left out). Only the backends of the sections set are
        loaded: comparing this host's classes never loads the Slurm backend."""
        differing = sorted((kv for kv in self.explicit_sections.items() if not self._is_default(*kv)), key=_first)
        return self.name, self.airflow, tuple(differing)

    def _is_default(self, backend: str, settings: Any) -> bool:
        try:
            found = section_class(backend)
        except GpuschedError:  # a backend that cannot be loaded now: its section as it was set
            return False
        return found is not None and settings == _defaults(found, self.name)

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
        """Kept for the old name: the Slurm section's ``sbatch_settings`` (core/slurm/options.py)."""
        warnings.warn(
            "JobClass.slurm_settings(priority) is now JobClass.section('slurm').sbatch_settings(priority); the old "
            "name still works but will go in a later release",
            GpuschedDeprecationWarning,
            stacklevel=2,
        )
        settings: dict[str, Any] = self.section("slurm").sbatch_settings(priority)
        return settings


def section_class(name: object) -> type[Any] | None:
    """The settings class of the job-class section ``name``: the registered backend of that name's
    ``job_class_settings`` (imported on first use: reading this host's classes never loads the Slurm backend);
    None when no backend of that name has a section."""
    from airflow_provider_gpusched.core.backends import REGISTRY, get_backend

    if not isinstance(name, str) or name not in REGISTRY:
        return None
    settings: type[Any] | None = get_backend(name, "job class section").job_class_settings
    return settings


def section_names() -> list[str]:
    """``airflow`` and every registered backend with a section, in registration order."""
    from airflow_provider_gpusched.core.backends import backend_names

    return ["airflow", *(n for n in backend_names() if _loads_section(n))]


def _loads_section(name: str) -> bool:
    try:
        return section_class(name) is not None
    except GpuschedError:  # a broken installed backend: its own error says so where it is used
        return False


def _first(pair: tuple[str, Any]) -> str:
    return pair[0]


#: the sections of ``JobClass(name, airflow, slurm, local)``, the order before the backends owned them
_OLD_POSITIONAL = ("slurm", "local")


def _old_positional(values: tuple[Any, ...]) -> dict[str, Any]:
    """The sections of the older positional form, by name."""
    if len(values) > len(_OLD_POSITIONAL):
        raise TypeError(f"JobClass() takes at most {2 + len(_OLD_POSITIONAL)} positional arguments")
    return dict(zip(_OLD_POSITIONAL, values, strict=False))  # fewer: the rest are the defaults


#: (section's settings class, job class) -> its built-in settings, made once (the lease manager asks often)
_DEFAULTS: dict[tuple[type[Any], str], Any] = {}


def _defaults(settings: type[Any], job_class: str) -> Any:
    """A section's built-in settings for ``job_class``: its ``for_class(job_class)``, or its defaults."""
    found = _DEFAULTS.get((settings, job_class))
    if found is None:
        for_class = getattr(settings, "for_class", None)
        found = _DEFAULTS.setdefault((settings, job_class), for_class(job_class) if for_class else settings())
    return found


#: the built-in classes: the Airflow side; each backend's section is its own defaults (its ``for_class``)
DEFAULT_CLASSES: dict[str, JobClass] = {
    "normal": JobClass("normal", AirflowClassSettings(priority_weight=100)),
    "idle": JobClass("idle", AirflowClassSettings(pool="gpusched_idle", priority_weight=1)),
}


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
        names = section_names()
        return {name: {s: asdict(c.section(s)) for s in names} for name, c in self.classes.items()}

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
                raise JobClassConfigError(
                    f"{source}: {name}: expected a mapping with {'/'.join(section_names())} sections"
                )
            classes[name] = _read_class(classes[name], body, f"{source}: {name}")
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


def _read_class(base: JobClass, body: Mapping[Any, Any], where: str) -> JobClass:
    """``base`` with the sections ``body`` sets (``airflow``, or a backend's: that backend parses its own)."""
    airflow, sections = base.airflow, dict(base.explicit_sections)
    for section, values in body.items():
        if section != "airflow" and _known_section(section, where) is None:
            raise JobClassConfigError(
                f"{where}.{section}: unknown section; expected one of {', '.join(section_names())}"
            )
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise JobClassConfigError(f"{where}.{section}: expected a mapping")
        updated = _update(base.section(section), values, f"{where}.{section}")
        if section == "airflow":
            airflow = updated
        else:
            sections[section] = updated
    return JobClass(base.name, airflow, explicit_sections=sections)


def _known_section(section: Any, where: str) -> type[Any] | None:
    try:
        return section_class(section)
    except GpuschedError as exc:  # a backend of that name that cannot be loaded
        raise JobClassConfigError(f"{where}.{section}: {exc}") from None


def _update(settings: Any, values: Mapping[str, Any], where: str) -> Any:
    """``settings`` (a section's dataclass) with ``values`` checked: a key in the class's ``checks`` by its check,
    the others by the type of their field."""
    known = {f.name: f for f in fields(settings)}
    checks: Mapping[str, Callable[[Any], Any]] = getattr(settings, "checks", {})
    changes: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known:
            raise JobClassConfigError(f"{where}.{key}: unknown setting; expected one of {', '.join(known)}")
        try:
            check = checks.get(key)
            value = check(value) if check else _by_type(known[key], getattr(settings, key), value)
        except (ValueError, InvalidArgumentError) as exc:
            raise JobClassConfigError(f"{where}.{key}: expected {exc}, got {json.dumps(value, default=str)}") from None
        changes[key] = value
    return replace(settings, **changes)


def _by_type(f: Field[Any], current: Any, value: Any) -> Any:
    """``value`` checked against what the field holds: true/false, a whole number, seconds, a string or null."""
    if isinstance(current, bool) or "bool" in str(f.type):
        if value is not None and not isinstance(value, bool):
            raise ValueError("true or false")
    elif is_int(current):
        if not is_int(value):
            raise ValueError("a whole number")
    elif isinstance(current, float):
        if not is_number(value) or value < 0:
            raise ValueError("a number of seconds >= 0")
        value = float(value)
    elif value is not None and not isinstance(value, str):
        raise ValueError("a string or null")
    return value


#: names that moved into their backend's module (issue 78): the old ones still import, with a warning
__getattr__ = moved_names(
    __name__,
    {
        "SlurmClassSettings": "airflow_provider_gpusched.core.slurm.options:SlurmClassSettings",
        "slurm_class_settings": "airflow_provider_gpusched.core.slurm.options:slurm_class_settings",
        "LocalClassPolicy": "airflow_provider_gpusched.core.gpu.class_policy:LocalClassPolicy",
    },
)
