"""What each trial of a sweep gets (GPUs, memory, time, the job's shape, its class), checked once, and as each
backend's arguments."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from airflow_provider_gpusched.core.backends import get_backend
from airflow_provider_gpusched.core.checks import is_int
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

    def job_shape(self) -> dict[str, Any]:
        """The job's shape as SlurmJobSpec / SlurmJobOperator arguments (those set); a distributed trial gets one
        task slot per rank on each node (the trial runner starts the ranks with srun)."""
        shape = {name: getattr(self, name) for name in self.SLURM_SHAPE if getattr(self, name) is not None}
        if self.distributed:
            shape["ntasks_per_node"] = self.nproc_per_node
        return shape

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

    def local_gpu_arguments(self) -> dict[str, Any]:
        """What a trial on local GPUs asks for (``LocalGPUOperator`` arguments): at least one GPU; ``mem``
        (Slurm's --mem) is the host RAM it reserves, ``cpus`` the host CPUs (pinned); ``setup`` lines run in the
        trial's shell first."""
        return {
            "gpus": max(1, self.gpus_on_each_node),
            "gpu_memory": self.gpu_memory,
            "mem": self.mem,
            "job_class": self.job_class,
            "priority": self.priority,
            "env": self.env or None,
            "devices": self.devices,
            "device_groups": self.device_groups,
            "setup": self.setup or None,
            "cpus": self.cpus,
            "time_limit": self.time_limit,
            "load_stage": bool(self.load_stage),
            "max_waiting": self.max_waiting,
            **({"group": self.group} if self.group else {}),
        }

    def local_gpu_request(self, host_limits: Mapping[str, Any]) -> Any:
        """The :class:`~airflow_provider_gpusched.core.gpu.placement.GPURequest` of one trial on local GPUs, with
        ``host_limits`` (``[gpusched]`` defaults: :func:`~airflow_provider_gpusched.core.options.host_limit_defaults`)
        for what the trial does not give."""
        from airflow_provider_gpusched.core.gpu.placement import GPURequest

        wanted = self.local_gpu_arguments()
        limits = dict(host_limits)
        if wanted["max_waiting"] is not None:
            limits["max_waiting"] = wanted["max_waiting"]
        return GPURequest(
            gpus=wanted["gpus"],
            gpu_memory=wanted["gpu_memory"],
            host_memory=wanted["mem"],
            devices=wanted["devices"],
            cpus=wanted["cpus"],
            device_groups=wanted["device_groups"],
            load_stage=wanted["load_stage"],
            **limits,
        )

    def slurm_arguments(self) -> dict[str, Any]:
        """What a trial on Slurm asks for (``SlurmJobOperator`` arguments); unset ones are left to Slurm."""
        return {
            "gpus": self.gpus_on_each_node or None,
            "cpus": self.cpus,
            "mem": self.mem,
            "partition": self.partition,
            "qos": self.qos,
            "time_limit": self.time_limit,
            "setup": self.setup or None,
            "job_class": self.job_class,
            "priority": self.priority,
            "env": self.env or None,
            **({"group": self.group} if self.group else {}),
            **self.job_shape(),
        }


#: the settings whose type and bounds their annotation says; the others (sizes, time limits, the job's shape,
#: devices) are parsed or related to each other by check() itself
_SETTINGS = Settings(TrialResources)
