"""Where a GPU request fits: a pure function of the inventory and the live leases.

Accounting on each GPU::

    available = total - reserved by leases - used by foreign processes - margin

*Reservations count before the child allocates anything*, so two requests admitted one after the
other never both count the same free memory (the race that sampling free memory has). *Foreign*
processes are those on the GPU that no lease holder (or its descendants) owns: a colleague's notebook.

Policy:

* a **memory request** (``gpu_memory=...``, a shared GPU) goes to the GPU where it fits most tightly
  (best fit), so small trials pack together and large GPUs stay free for large requests; ties go to
  the GPU with fewer foreign processes, then the lower index;
* a **whole-GPU request** takes GPUs with no lease at all, preferring fewest foreign processes, then
  most free memory, then the lower index; ``max_foreign_processes`` can exclude busy GPUs;
* ``gpus=N`` takes N distinct GPUs by the same order; ``devices=[...]`` restricts the candidates.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.gpu.inventory import GPUInfo
from airflow_provider_gpusched.core.records import Settings, says
from airflow_provider_gpusched.core.units import OptionalSize, Size, format_bytes

GPUIndex = Annotated[int, says("a GPU index (a whole number >= 0)", ge=0)]


@dataclass
class GPURequest:
    """What a task needs: ``gpus`` whole GPUs, or ``gpu_memory`` on each of ``gpus`` shared GPUs."""

    gpus: Annotated[int, says("a whole number of GPUs >= 1", ge=1)] = 1
    #: sizes are given as bytes or text such as "10GiB", and read as bytes (parsed and checked when set)
    gpu_memory: OptionalSize = OptionalSize(positive=True)
    devices: (
        Annotated[Sequence[GPUIndex], says("a non-empty list of GPU indices such as [0, 2]", min_length=1)] | None
    ) = None
    memory_margin: Size = Size(0)
    max_foreign_processes: Annotated[int, says("a whole number >= 0", ge=0)] | None = None
    min_free_ram: OptionalSize = OptionalSize()
    max_cpu_percent: Annotated[float, says("a percentage in (0, 100]", gt=0, le=100)] | None = None
    #: host RAM this task reserves while it runs (fedflow's estimate_memory), counted against the host's
    #: budget with every other lease's reservation: two tasks never both count the same free RAM
    host_memory: OptionalSize = OptionalSize(positive=True, example="16GiB")
    #: host CPUs this task reserves while it runs: as many CPU numbers no other lease holds, and its child is
    #: pinned to them (CPU affinity), as Slurm's --cpus-per-task with task/affinity
    cpus: Annotated[int, says("a whole number of CPUs >= 1", ge=1)] | None = None
    #: fixed GPU groups (GPU Task Scheduler's ``gpu: [["0", "1"], ["2", "3"]]`` or mixed ``["0", ["1", "2"]]``): the
    #: work takes one whole group, whichever is free first, and sees exactly its GPUs; ``gpus`` is then the
    #: largest group's size
    device_groups: (
        Annotated[
            Sequence[Annotated[Sequence[GPUIndex], says("", min_length=1)]],
            says("GPU index groups such as [[0, 1], [2, 3]]", min_length=1),
        ]
        | None
    ) = None
    #: fedflow's two-stage task: the work starts with host resources only (``host_memory``, ``cpus``; no GPU
    #: visible) and gets its GPUs when it says its load stage is done (:func:`~airflow_provider_gpusched.core.gpu.
    #: stages.wait_for_gpus`); its train stage is then admitted by GPU memory like any request
    load_stage: Annotated[bool, says("true or false")] = False
    #: with ``load_stage``: start loading only while fewer than this many load-stage tasks on the host are loading
    #: or loaded and waiting for GPUs (fedflow's ``scheduler.max-waiting``, host-wide); 0: no bound
    max_waiting: Annotated[int, says("a whole number >= 0 (0: no bound)", ge=0)] = 0

    def __post_init__(self) -> None:
        _SETTINGS.check(self)  # each setting's type and bounds (their annotations)
        if self.device_groups is not None:
            groups = self.device_groups
            flat = [d for g in groups for d in g]
            if len(set(flat)) != len(flat):
                raise InvalidArgumentError("device_groups", groups, "each GPU in one group only")
            if self.devices is not None:
                raise InvalidArgumentError("device_groups", groups, "either devices or device_groups, not both")
            self.device_groups = [sorted(g) for g in groups]
            self.gpus = max(len(g) for g in self.device_groups)
        if self.devices is not None:
            devices = list(self.devices)
            if len(set(devices)) != len(devices):
                raise InvalidArgumentError("devices", self.devices, "distinct GPU indices")
            self.devices = devices

    @property
    def whole(self) -> bool:
        return self.gpu_memory is None

    def gpu_part(self) -> GPURequest:
        """The GPUs alone (a two-stage task's train stage: its lease already holds the host RAM and CPUs)."""
        import dataclasses

        return dataclasses.replace(self, load_stage=False, max_waiting=0, host_memory=None, cpus=None)

    def describe(self) -> str:
        what = (
            f"{self.gpus} whole GPU{'s' if self.gpus > 1 else ''}"
            if self.gpu_memory is None
            else f"{format_bytes(self.gpu_memory)} on {self.gpus} GPU{'s' if self.gpus > 1 else ''}"
        )
        if self.devices is not None:
            what += f" among {self.devices}"
        if self.device_groups is not None:
            what = (
                "one whole GPU group"
                if self.gpu_memory is None
                else f"{format_bytes(self.gpu_memory)} on each GPU of one group"
            ) + f" of {self.device_groups}"
        if self.host_memory:
            what += f" and {format_bytes(self.host_memory)} of host RAM"
        if self.cpus:
            what += f" and {self.cpus} CPU(s)"
        if self.load_stage:
            what += ", the GPUs after a load stage" + (
                f" (at most {self.max_waiting} loading or waiting)" if self.max_waiting else ""
            )
        return what

    def check_possible(self, gpus: Sequence[GPUInfo]) -> None:
        """Raise if no amount of waiting can satisfy the request on this inventory."""
        indices = {g.index for g in gpus}
        if self.device_groups is not None:
            unknown = [d for g in self.device_groups for d in g if d not in indices]
            if unknown:
                raise InvalidArgumentError(
                    "device_groups", self.device_groups, f"indices of this host's GPUs {sorted(indices)}"
                )
            if self.gpu_memory is not None:
                totals = {g.index: g.memory_total - self.memory_margin for g in gpus}
                if not any(all(totals[i] >= self.gpu_memory for i in group) for group in self.device_groups):
                    raise InvalidArgumentError(
                        "gpu_memory",
                        format_bytes(self.gpu_memory),
                        "at most what every GPU of one of the groups holds (minus the margin)",
                    )
            return
        if self.devices is not None:
            unknown = [d for d in self.devices if d not in indices]
            if unknown:
                raise InvalidArgumentError("devices", self.devices, f"indices of this host's GPUs {sorted(indices)}")
        candidates = [g for g in gpus if self.devices is None or g.index in self.devices]
        if self.gpus > len(candidates):
            raise InvalidArgumentError(
                "gpus",
                self.gpus,
                f"at most {len(candidates)} (GPUs available to this request: {[g.index for g in candidates]})",
            )
        if self.gpu_memory is not None:
            sizes = sorted((g.memory_total - self.memory_margin for g in candidates), reverse=True)
            if sizes[self.gpus - 1] < self.gpu_memory:
                raise InvalidArgumentError(
                    "gpu_memory",
                    format_bytes(self.gpu_memory),
                    f"at most {format_bytes(sizes[self.gpus - 1])} (the "
                    f"{'largest GPU' if self.gpus == 1 else f'{self.gpus} largest GPUs'} "
                    f"minus the margin)",
                )


_SETTINGS = Settings(GPURequest)


@dataclass
class GPUUsage:
    """One GPU as the allocator sees it."""

    gpu: GPUInfo
    reserved: int = 0
    leases: int = 0
    whole_taken: bool = False
    foreign_processes: int = 0
    foreign_used: int = 0

    def available(self, margin: int = 0) -> int:
        return self.gpu.memory_total - self.reserved - self.foreign_used - margin


@dataclass
class LeaseView:
    """What placement needs to know about a live lease."""

    memory: dict[int, int]
    whole: bool
    pids: set[int] = field(default_factory=set)


def gpu_usage(gpus: Iterable[GPUInfo], leases: Iterable[LeaseView]) -> dict[int, GPUUsage]:
    leases = list(leases)
    ours: set[int] = set().union(*(lease.pids for lease in leases)) if leases else set()
    usage = {g.index: GPUUsage(g) for g in gpus}
    for lease in leases:
        for index, reserved in lease.memory.items():
            if index in usage:
                usage[index].reserved += reserved
                usage[index].leases += 1
                usage[index].whole_taken |= lease.whole
    for u in usage.values():
        foreign = [p for p in u.gpu.processes if p.pid not in ours]
        mine = [p for p in u.gpu.processes if p.pid in ours]
        u.foreign_processes = len(foreign)
        if u.gpu.processes and all(p.used_memory is not None for p in u.gpu.processes):
            u.foreign_used = sum(p.used_memory or 0 for p in foreign)
        else:  # no per-process figures: what is in use beyond our reservations is someone else's
            our_used = sum(p.used_memory or 0 for p in mine) or min(u.gpu.memory_used, u.reserved)
            u.foreign_used = max(0, u.gpu.memory_used - our_used)
    return usage


@dataclass
class Placement:
    indices: list[int]
    memory: dict[int, int]  # bytes reserved on each chosen GPU
    whole: bool


def place(request: GPURequest, usage: dict[int, GPUUsage]) -> tuple[Placement | None, str]:
    """Choose GPUs for ``request`` or say why it does not fit now."""
    if request.device_groups is not None:
        return _place_group(request, usage)
    candidates = [u for i, u in sorted(usage.items()) if request.devices is None or i in request.devices]
    margin = request.memory_margin
    need = request.gpu_memory
    if need is None:  # whole GPUs
        free = [
            u
            for u in candidates
            if u.leases == 0
            and (request.max_foreign_processes is None or u.foreign_processes <= request.max_foreign_processes)
        ]
        free.sort(key=lambda u: (u.foreign_processes, -u.available(margin), u.gpu.index))
        if len(free) < request.gpus:
            busy = ", ".join(
                f"GPU {u.gpu.index}: {u.leases} lease(s), {u.foreign_processes} foreign process(es)"
                for u in candidates
                if u not in free
            )
            return None, f"needs {request.gpus} GPU(s) without leases, {len(free)} free ({busy})"
        chosen = free[: request.gpus]
        return Placement([u.gpu.index for u in chosen], {u.gpu.index: u.gpu.memory_total for u in chosen}, True), ""
    fits = [u for u in candidates if not u.whole_taken and u.available(margin) >= need]
    fits.sort(key=lambda u: (u.available(margin) - need, u.foreign_processes, u.gpu.index))
    if len(fits) < request.gpus:
        state = ", ".join(
            f"GPU {u.gpu.index}: {format_bytes(max(0, u.available(margin)))} available"
            + (" (whole-GPU lease)" if u.whole_taken else "")
            for u in candidates
        )
        return None, f"needs {format_bytes(need)} on {request.gpus} GPU(s); {state}"
    chosen = fits[: request.gpus]
    return Placement(sorted(u.gpu.index for u in chosen), {u.gpu.index: need for u in chosen}, False), ""


def _place_group(request: GPURequest, usage: dict[int, GPUUsage]) -> tuple[Placement | None, str]:
    """One of the request's fixed GPU groups, whole: the first (in the order given) whose every GPU is free (whole
    requests) or holds the slice (shared ones)."""
    margin, need, groups = request.memory_margin, request.gpu_memory, request.device_groups or []
    for group in groups:
        members = [usage[i] for i in group if i in usage]
        if len(members) != len(group):
            continue
        if need is None:  # whole GPUs
            if all(
                u.leases == 0
                and (request.max_foreign_processes is None or u.foreign_processes <= request.max_foreign_processes)
                for u in members
            ):
                return Placement(list(group), {u.gpu.index: u.gpu.memory_total for u in members}, True), ""
        elif all(not u.whole_taken and u.available(margin) >= need for u in members):
            return Placement(list(group), {u.gpu.index: need for u in members}, False), ""
    busy = ", ".join(f"GPU {i}: {usage[i].leases} lease(s)" for g in groups for i in g if i in usage)
    return None, f"needs one of the GPU groups {request.device_groups} free ({busy})"
