"""What each trial of a sweep gets (GPUs, memory, time, the job's shape, its class), checked once; each backend
reads it into its own arguments (``Backend.trial_arguments``)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from airflow_provider_gpusched.core.backends import get_backend
from airflow_provider_gpusched.core.checks import is_int
from airflow_provider_gpusched.core.deprecation import GpuschedDeprecationWarning
from airflow_provider_gpusched.core.distributed import DEFAULT_RANK_EXIT_GRACE, check_grace, check_mode
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.job_classes import JOB_CLASSES
from airflow_provider_gpusched.core.job_shape import SHAPE_FIELDS, check_shape
from airflow_provider_gpusched.core.records import Check, Settings, one_of, record_class, says
from airflow_provider_gpusched.core.units import parse_bytes, slurm_time_limit

_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


SlurmName = Annotated[str, says("a Slurm name (letters, digits, '_', '-', '.')", pattern=r"^[A-Za-z0-9_.-]+$")]
EnvName = Annotated[str, says("environment variable names", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


def _env_value(value: Any) -> str:
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or "\x00" in str(value):
        raise ValueError("a string or number")
    return str(value)


def _lines(value: Any) -> Any:
    return [value] if isinstance(value, str) else value  # one shell line may be given as a string


EnvValue = Annotated[Any, says("a string or number", strict=None), Check(_env_value)]


@record_class(extra="forbid")
@dataclass
class TrialResources:
    """Per-trial resources (seed 000's ``function_resource``): used by the local and the Slurm backend."""

    gpus: Annotated[int, says("an integer >= 0", ge=0)] = 1
    gpu_memory: int | str | None = None
    cpus: Annotated[int, says("an integer >= 1", ge=1)] | None = None
    mem: int | str | None = None
    partition: SlurmName | None = None
    qos: SlurmName | None = None
    time_limit: int | str | None = None
    setup: Annotated[
        list[Annotated[str, says("a shell line")]],
        says("a list of shell lines", strict=None),
        Check(_lines, before=True),
    ] = field(default_factory=list)
    job_class: Annotated[str, says(f"one of {list(JOB_CLASSES)}"), one_of(JOB_CLASSES)] = "normal"
    priority: Annotated[int, says("a whole number")] = 0
    #: with team quotas: the group the trials count for (default: the DAG owner's group; docs/quotas.md)
    group: Annotated[str, says("a quota group name", pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")] | None = None
    env: Annotated[dict[EnvName, EnvValue], says("a mapping of environment variables", strict=None)] = field(
        default_factory=dict
    )
    #: local GPUs: the GPU indices trials may use (GPU Task Scheduler's ``gpu`` list); None: any
    devices: list[int] | None = None
    #: the only backend these trials may run on (pavi's ``launcher='slurm'``); None: either
    backend: str | None = None
    #: local GPUs: fixed groups, each trial takes one whole (GPU Task Scheduler's ``[["0", "1"], ["2", "3"]]`` or a
    #: mixed ``["0", ["1", "2"]]``): it sees exactly that group's GPUs
    device_groups: list[list[int]] | None = None
    #: Slurm: nodes per trial (a multi-node trial), GPUs on each node (``gpus`` is per node on Slurm too), and the
    #: rest of a job's shape (SlurmJobOperator's arguments of the same names)
    nodes: int | str | None = None
    gpus_per_node: Annotated[int, says("a whole number >= 0", ge=0)] | None = None
    ntasks_per_node: int | None = None
    gpus_per_task: int | None = None
    cpus_per_gpu: int | None = None
    exclusive: bool | None = None
    constraint: str | None = None
    nodelist: str | list[str] | None = None
    exclude: str | list[str] | None = None
    #: start each trial's command as ranks: "torchrun" or "srun" (one per GPU of each node; on local GPUs, of the
    #: lease), with ``rank_exit_grace`` seconds for the others after the first rank ends (core/distributed.py)
    distributed: str | None = None
    rank_exit_grace: float = DEFAULT_RANK_EXIT_GRACE
    #: local GPUs: fedflow's two-stage trial, loading on host RAM (``mem``) before it gets its GPUs
    #: (``wait_for_gpus()``), with at most ``max_waiting`` load stages on the host at once (None: ``[gpusched]
    #: max_waiting``)
    load_stage: Annotated[bool, says("true or false")] | None = None
    max_waiting: Annotated[int, says("a whole number >= 0 (0: no bound)", ge=0)] | None = None

    def check(self, where: str) -> None:
        # the settings' types and bounds (their annotations), then what relates them or needs parsing
        checked = _SETTINGS.check(self, where, "a mapping of trial resources")
        self.setup, self.env = checked.setup, checked.env
        for name in ("gpu_memory", "mem"):  # "lots", "-1GiB", 0: refused here, not when a trial runs
            value = getattr(self, name)
            if value is not None and parse_bytes(value, argument=f"{where}.{name}") <= 0:
                raise InvalidArgumentError(f"{where}.{name}", value, "a positive size such as '6GiB'")
        if self.time_limit is not None:
            slurm_time_limit(self.time_limit, argument=f"{where}.time_limit")
        if self.backend is not None:
            get_backend(self.backend, f"{where}.backend")
        if self.devices is not None:
            if (
                isinstance(self.devices, (str, bytes))
                or not isinstance(self.devices, Sequence)
                or not self.devices
                or not all(is_int(d) and d >= 0 for d in self.devices)
                or len(set(self.devices)) != len(self.devices)
            ):
                raise InvalidArgumentError(
                    f"{where}.devices", self.devices, "a list of distinct GPU indices such as [0, 2]"
                )
            if len(self.devices) < max(1, self.gpus):
                raise InvalidArgumentError(f"{where}.devices", self.devices, f"at least gpus={self.gpus} indices")
            self.devices = list(self.devices)
        if self.device_groups is not None:
            from airflow_provider_gpusched.core.gpu.placement import GPURequest

            try:
                request = GPURequest(device_groups=self.device_groups, devices=self.devices)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"{where}.{exc.argument}", exc.value, exc.expected) from None
            self.device_groups = [list(g) for g in request.device_groups or ()]
            self.gpus = request.gpus  # the largest group (pool slots, the board)
        if self.gpus_per_node is not None and self.gpus not in (1, self.gpus_per_node):
            raise InvalidArgumentError(
                f"{where}.gpus_per_node",
                self.gpus_per_node,
                f"the same as gpus ({self.gpus}), or gpus left out: on Slurm gpus is per node",
            )
        if self.load_stage and self.distributed:
            raise InvalidArgumentError(
                f"{where}.load_stage", self.load_stage, "a trial started as one process (not with distributed=...)"
            )
        self.distributed = check_mode(self.distributed, f"{where}.distributed")
        self.rank_exit_grace = check_grace(self.rank_exit_grace, f"{where}.rank_exit_grace")
        if isinstance(self.nodelist, tuple):
            self.nodelist = list(self.nodelist)
        if isinstance(self.exclude, tuple):
            self.exclude = list(self.exclude)
        # the job's shape, by the rules every Slurm job's is checked by (core/job_shape.py)
        check_shape(
            {n: getattr(self, n) for n in SHAPE_FIELDS},
            cpus_per_task=self.cpus,
            distributed=self.distributed,
            where=f"{where}.",
            names={"cpus_per_task": "cpus"},
        )

    #: the job-shape settings that only Slurm has (gpus_per_node is the local backend's gpus too)
    SLURM_SHAPE = tuple(n for n in SHAPE_FIELDS if n != "gpus_per_node")

    @property
    def nproc_per_node(self) -> int:
        return self.ntasks_per_node or max(1, self.gpus_on_each_node)

    @property
    def gpus_on_each_node(self) -> int:
        return self.gpus if self.gpus_per_node is None else self.gpus_per_node

    def distributed_settings(self, backend: str) -> dict[str, Any] | None:
        """How the trial runner starts a trial's command as ranks (written into the manifest), or None."""
        if not self.distributed:
            return None
        return {
            "mode": self.distributed,
            "backend": backend,
            "grace": self.rank_exit_grace,
            "nproc_per_node": self.nproc_per_node,
        }

    def check_backend(self, backend: str, sweep: str) -> None:
        """Refuse the settings that ``backend`` cannot honour (docs/sweeps.md: each setting per backend), naming the
        setting and the backend: nothing is dropped without a word."""
        if self.backend is not None and self.backend != backend:
            raise GpuschedError(
                f"sweep {sweep}: resources.backend={self.backend!r} (pavi's launcher): these trials "
                f"run on {self.backend} only, not on the {backend} backend"
            )
        get_backend(backend).check_resources(self, sweep)

    # -- each backend's arguments: its wing reads these resources (Backend.trial_arguments); old names kept ------
    def local_gpu_arguments(self) -> dict[str, Any]:
        """Deprecated: the local backend's ``trial_arguments(resources)`` (core/gpu/backend.py)."""
        _moved("local_gpu_arguments", "LocalBackend.trial_arguments(resources)")
        return get_backend("local").trial_arguments(self)

    def local_gpu_request(self, host_limits: Mapping[str, Any]) -> Any:
        """Deprecated: the local backend's ``gpu_request(resources, host_limits)`` (core/gpu/backend.py)."""
        _moved("local_gpu_request", "LocalBackend.gpu_request(resources, host_limits)")
        local: Any = get_backend("local")
        return local.gpu_request(self, host_limits)

    def slurm_arguments(self) -> dict[str, Any]:
        """Deprecated: the Slurm backend's ``trial_arguments(resources)`` (core/slurm/backend.py)."""
        _moved("slurm_arguments", "SlurmBackend.trial_arguments(resources)")
        return get_backend("slurm").trial_arguments(self)

    def job_shape(self) -> dict[str, Any]:
        """Deprecated: the Slurm backend's ``job_shape(resources)`` (core/slurm/backend.py)."""
        _moved("job_shape", "SlurmBackend.job_shape(resources)")
        slurm: Any = get_backend("slurm")
        shape: dict[str, Any] = slurm.job_shape(self)
        return shape


def _moved(old: str, new: str) -> None:
    """Warn the caller of a TrialResources method whose body moved into a backend's wing."""
    warnings.warn(
        f"TrialResources.{old}() is now {new}, found through core/backends.get_backend; the old name still works "
        f"but will go in a later release",
        GpuschedDeprecationWarning,
        stacklevel=3,
    )


#: the settings whose type and bounds their annotation says; the others (sizes, time limits, the job's shape,
#: devices) are parsed or related to each other by check() itself
_SETTINGS = Settings(TrialResources)
