"""How a sweep's trials run: the execution options of :func:`~airflow_provider_gpusched.task_groups.sweep.sweep_task_group`.

What to run is the :class:`~airflow_provider_gpusched.core.sweep.definition.sweep_spec.SweepSpec`; *how* is one
:class:`SweepExecution` (the way astronomer-cosmos keeps its render and execution configs apart)::

    sweep_task_group(spec, execution=SweepExecution(backend="slurm", batching="batched", max_array_parallel=8))
    sweep_task_group(spec, backend="slurm", batching="batched")   # the same, as keyword shortcuts

What only one backend reads is that backend's ``options`` (its ``Backend.sweep_options``, parsed and checked by
its own dataclass): ``SweepExecution(backend="slurm", options=SlurmSweepOptions(max_array_parallel=8))``; its
keywords (``max_array_parallel=8``) are shortcuts for them.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_provider_gpusched.core.backends import DEFAULT_BACKEND, Backend, backend_names, get_backend
from airflow_provider_gpusched.core.checks import is_int, is_number
from airflow_provider_gpusched.core.deprecation import GpuschedDeprecationWarning
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError

BATCHING = ("auto", "mapped", "batched")
DEFAULT_MAX_CHUNK = 500


@dataclass(frozen=True, init=False)
class SweepExecution:
    """:param backend: a backend's name (core/backends.py): ``"local"`` (this host's GPUs) or ``"slurm"``.
    :param batching: ``"mapped"`` (a task per trial), ``"batched"`` (runner tasks or job arrays over chunks)
        or ``"auto"``: batched when a stage has more than ``max_mapped_trials`` trials.
    :param chunk_size: trials per runner task / job array (default: 500, or fewer so there are >= 2 chunks).
    :param parallel: local batched mode: leases in flight per runner (default: what fits on the GPUs).
    :param trials_per_process: local batched mode: trials run one after another in one process under one
        lease (saves a Python start per trial for short trials); an asynchronous search's slot runs its trials in
        worker processes of this many trials each (1: a process per trial, with OOM escalation per trial).
    :param python: interpreter that runs the trial runner (default: this one; on Slurm nodes it must have
        this package installed and see the results folder).
    :param poll_interval: seconds between looks while trials wait for GPUs or Slurm jobs (default: the
        ``[gpusched]`` settings).
    :param trial_kwargs: extra arguments for the trial operator (``LocalGPUOperator``/``SlurmJobOperator``),
        e.g. ``retries`` or ``execution_timeout``.
    :param options: the backend's own options: its ``Backend.sweep_options`` (the Slurm backend's
        :class:`~airflow_provider_gpusched.core.slurm.options.SlurmSweepOptions`: ``conn_id``,
        ``max_array_parallel``), or a mapping of their fields; left out, the backend's defaults. Another backend's
        options are left aside (``dataclasses.replace(execution, backend="local")``). The old attributes
        (``execution.slurm_conn_id``) still answer from them, with a warning.
    :param backend_keywords: keywords a backend takes for fields of its options (its ``Backend.sweep_keywords``:
        the Slurm backend's ``slurm_conn_id`` and ``max_array_parallel``). One of another registered backend is
        left aside, so that a DAG switching backends may keep it.
    """

    backend: str = DEFAULT_BACKEND
    batching: str = "auto"
    max_mapped_trials: int = 256
    chunk_size: int | None = None
    parallel: int | None = None
    trials_per_process: int = 8
    python: str | None = None
    poll_interval: float | None = None
    trial_kwargs: Mapping[str, Any] = field(default_factory=dict)
    options: Any = None

    def __init__(
        self,
        backend: str = DEFAULT_BACKEND,
        batching: str = "auto",
        max_mapped_trials: int = 256,
        chunk_size: int | None = None,
        parallel: int | None = None,
        trials_per_process: int = 8,
        python: str | None = None,
        *,
        poll_interval: float | None = None,
        trial_kwargs: Mapping[str, Any] | None = None,
        options: Any = None,
        **backend_keywords: Any,
    ) -> None:
        shared = {
            "backend": backend,
            "batching": batching,
            "max_mapped_trials": max_mapped_trials,
            "chunk_size": chunk_size,
            "parallel": parallel,
            "trials_per_process": trials_per_process,
            "python": python,
            "poll_interval": poll_interval,
            "trial_kwargs": {} if trial_kwargs is None else trial_kwargs,
        }
        for name, value in shared.items():
            object.__setattr__(self, name, value)
        if self.backend not in backend_names():
            raise AirflowException(f"backend must be one of {tuple(sorted(backend_names()))}, got {self.backend!r}")
        self._check()
        object.__setattr__(self, "options", backend_options(self.backend, options, backend_keywords))

    def _check(self) -> None:
        if self.batching not in BATCHING:
            raise AirflowException(f"batching must be one of {BATCHING}, got {self.batching!r}")
        for name in ("max_mapped_trials", "chunk_size", "parallel", "trials_per_process"):
            value = getattr(self, name)
            if value is not None and (not is_int(value) or value < 1):
                raise AirflowException(f"{name} must be a whole number >= 1, got {value!r}")
        if self.poll_interval is not None and (not is_number(self.poll_interval) or self.poll_interval <= 0):
            raise AirflowException(f"poll_interval must be seconds (a number > 0), got {self.poll_interval!r}")
        if not isinstance(self.trial_kwargs, Mapping):
            raise AirflowException(f"trial_kwargs must be a mapping of operator arguments, got {self.trial_kwargs!r}")
        object.__setattr__(self, "trial_kwargs", dict(self.trial_kwargs))

    if not TYPE_CHECKING:  # mypy keeps checking attribute names; the old ones answer at run time only

        def __getattr__(self, name: str) -> Any:
            """An option's old attribute (``execution.slurm_conn_id``, before it was ``options.conn_id``), with a
            warning: the backend's option, or the default of another backend's."""
            if name.startswith("_") or "backend" not in self.__dict__:
                raise AttributeError(name)  # copying and unpickling look for these before the fields are set
            return _old_attribute(self, name)

    @classmethod
    def from_options(cls, execution: SweepExecution | None, options: Mapping[str, Any]) -> SweepExecution:
        """``execution``, or one built from keyword shortcuts (not both); unknown names are refused by name."""
        unknown = _unknown(options, options.get("backend", DEFAULT_BACKEND))
        if unknown:
            raise AirflowException(
                f"sweep_task_group: unknown option(s) {', '.join(unknown)}; expected one of {', '.join(_names())}"
            )
        if execution is not None and options:
            raise AirflowException(
                f"sweep_task_group: give execution=SweepExecution(...) or the options "
                f"{', '.join(sorted(options))}, not both"
            )
        if execution is not None and not isinstance(execution, SweepExecution):
            raise AirflowException(f"execution must be a SweepExecution, got {type(execution).__name__}")
        return execution or cls(**options)

    @property
    def interpreter(self) -> str:
        return self.python or sys.executable

    def batched(self, stage_size: int) -> bool:
        """Whether a stage of ``stage_size`` trials runs in chunks."""
        return self.batching == "batched" or (self.batching == "auto" and stage_size > self.max_mapped_trials)

    def chunk_size_for(self, stage_size: int) -> int:
        return self.chunk_size or max(1, min(DEFAULT_MAX_CHUNK, -(-stage_size // 2)))


def backend_keywords() -> list[str]:
    """Every keyword a registered backend takes for its options (``Backend.sweep_keywords``); a backend that cannot
    be loaded (a broken installed package) is left out."""
    return [k for _, found in _loadable(None) for k in found.sweep_keywords]


def backend_options(backend: str, options: Any, keywords: Mapping[str, Any]) -> Any:
    """``backend``'s sweep options (its ``Backend.sweep_options``) from ``options`` (one of them, a mapping of their
    fields, or None: the defaults) with ``keywords`` (its ``sweep_keywords``) on top, checked by the options; an
    error names the keyword or ``options.<field>``. Keywords of another registered backend are left aside, and so
    are its options (``dataclasses.replace(execution, backend=...)`` switches backends)."""
    found = get_backend(backend)
    kind = found.sweep_options
    unknown = _unknown(keywords, backend)
    if unknown:
        raise AirflowException(f"unknown option(s) {', '.join(unknown)}; expected one of {', '.join(_names())}")
    own = {found.sweep_keywords[k]: v for k, v in keywords.items() if k in found.sweep_keywords}
    if _of_another_backend(options, backend, kind):
        options = None
    if kind is None:
        if options not in (None, {}):
            raise AirflowException(f"options: the {backend} backend takes no options, got {options!r}")
        return None
    values = _option_values(kind, options, backend)
    return _build(kind, {**values, **own}, {v: k for k, v in found.sweep_keywords.items() if k in keywords})


def _loadable(first: str | None) -> Iterator[tuple[str, Backend]]:
    """The registered backends, ``first`` first (an error loading it is raised), then the others, leaving out one
    that cannot be loaded: a broken installed package must not break the DAGs of every other backend."""
    names = backend_names()
    if first in names:
        yield first, get_backend(first)
    for name in names:
        if name == first:
            continue
        try:
            found = get_backend(name)
        except GpuschedError:  # its own error says so where it is named
            continue
        yield name, found


def _of_another_backend(options: Any, backend: str, kind: type[Any] | None) -> bool:
    """Whether ``options`` is the options record of a registered backend other than ``backend`` (whose options are
    ``kind``)."""
    if options is None or isinstance(options, Mapping) or (kind is not None and isinstance(options, kind)):
        return False
    return any(type(options) is found.sweep_options for name, found in _loadable(None) if name != backend)


def _old_attribute(execution: SweepExecution, name: str) -> Any:
    """The option a backend's keyword ``name`` stands for: the execution's own backend's, or (a keyword of another
    backend, left aside) that backend's default; an AttributeError when no backend takes ``name``."""
    for owner, found in _loadable(execution.backend):
        option = found.sweep_keywords.get(name)
        if option is None:
            continue
        warnings.warn(
            f"SweepExecution.{name} is now SweepExecution.options.{option} (the {owner} backend's options); the old "
            f"name still answers but will go in a later release",
            GpuschedDeprecationWarning,
            stacklevel=3,
        )
        if owner == execution.backend:
            return getattr(execution.options, option)
        return _default(found.sweep_options, option)
    raise AttributeError(f"{type(execution).__name__!r} object has no attribute {name!r}")


def _default(kind: Any, option: str) -> Any:
    """The default of the field ``option`` of the options class ``kind``."""
    for f in fields(kind):
        if f.name == option:
            if f.default is not MISSING:
                return f.default
            if f.default_factory is not MISSING:
                return f.default_factory()
    raise AttributeError(option)


def _option_values(kind: type[Any], options: Any, backend: str) -> dict[str, Any]:
    if options is None:
        return {}
    if isinstance(options, kind):
        return {f.name: getattr(options, f.name) for f in fields(options)}
    if not isinstance(options, Mapping):
        raise AirflowException(
            f"options must be a {kind.__name__} or a mapping of its fields (the {backend} backend's options), "
            f"got {type(options).__name__}"
        )
    names = [f.name for f in fields(kind)]
    unknown = sorted(str(k) for k in options if k not in names)
    if unknown:
        raise AirflowException(
            f"options: unknown option(s) {', '.join(unknown)} of the {backend} backend; expected one of "
            f"{', '.join(names)}"
        )
    return dict(options)


def _build(kind: type[Any], values: dict[str, Any], keyword_of: Mapping[str, str]) -> Any:
    try:
        return kind(**values)
    except InvalidArgumentError as exc:
        name = keyword_of.get(exc.argument) or f"options.{exc.argument}"
        raise AirflowException(f"{name} must be {exc.expected}, got {exc.value!r}") from None


def _unknown(names: Iterable[str], backend: str) -> list[str]:
    """The ``names`` neither SweepExecution nor any registered backend takes: ``backend`` is asked first, the other
    backends are loaded only for a name neither takes (one that cannot be loaded is left out)."""
    rest = set(names) - {f.name for f in fields(SweepExecution)}
    found = _loadable(backend)
    while rest and (owner := next(found, None)) is not None:
        rest -= set(owner[1].sweep_keywords)
    return sorted(rest)


def _names() -> list[str]:
    return [f.name for f in fields(SweepExecution)] + backend_keywords()
