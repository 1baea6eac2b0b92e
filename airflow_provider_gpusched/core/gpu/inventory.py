"""What GPUs this host has and how busy they are: NVML through ``nvidia-ml-py``, or a *simulated*
inventory from configuration (``"4x24GiB"``) where no GPU exists — for tests and demos, and reported as
simulated everywhere it appears.

Device indices are NVML's, which follow PCI bus order; children get ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so
CUDA numbers the devices the same way.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from airflow_provider_gpusched.core.checks import is_number
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.units import parse_bytes

SIMULATE_ENV = "GPUSCHED_SIMULATE_GPUS"
#: a simulated-usage file (see SimulatedInventory): what processes of others hold on the simulated GPUs
SIMULATE_USAGE_ENV = "GPUSCHED_SIMULATE_USAGE"


class GPUInventoryError(GpuschedError):
    """No usable GPU inventory: no NVML and no simulation configured, or NVML failed."""


@dataclass
class GPUProcess:
    pid: int
    used_memory: int | None  # bytes; None when the driver does not say


@dataclass
class GPUInfo:
    index: int
    uuid: str
    name: str
    memory_total: int
    memory_used: int
    utilization: int | None = None  # percent, None if unknown
    processes: list[GPUProcess] = field(default_factory=list)
    simulated: bool = False
    temperature: int | None = None  # degrees Celsius, None if unknown
    power_watts: float | None = None  # power draw, None if unknown

    @property
    def memory_free(self) -> int:
        return max(0, self.memory_total - self.memory_used)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["memory_free"] = self.memory_free
        return data


class GPUInventory(Protocol):
    source: str  # "nvml" or "simulated"

    @property
    def reports_processes(self) -> bool:
        """Whether ``gpus()`` lists each process's memory (what OOM evidence is sampled from)."""

    def gpus(self) -> list[GPUInfo]: ...

    def driver_version(self) -> str: ...


class NVMLInventory:
    """GPUs through NVML. Raises :class:`GPUInventoryError` if NVML cannot be initialised."""

    source = "nvml"
    reports_processes = True
    _lock = threading.Lock()
    _initialised = False

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
            raise GPUInventoryError("nvidia-ml-py is not installed") from exc
        self._nvml = pynvml
        with self._lock:
            if not NVMLInventory._initialised:
                try:
                    pynvml.nvmlInit()
                except pynvml.NVMLError as exc:
                    raise GPUInventoryError(f"NVML is not available ({exc})") from exc
                NVMLInventory._initialised = True

    def driver_version(self) -> str:
        version = self._nvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)

    def gpus(self) -> list[GPUInfo]:
        nv = self._nvml
        result = []
        for index in range(nv.nvmlDeviceGetCount()):
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            mem = nv.nvmlDeviceGetMemoryInfo(handle)
            try:
                util = int(nv.nvmlDeviceGetUtilizationRates(handle).gpu)
            except nv.NVMLError:
                util = None
            processes = []
            for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                try:
                    for proc in getattr(nv, getter)(handle):
                        used = getattr(proc, "usedGpuMemory", None)
                        processes.append(GPUProcess(int(proc.pid), int(used) if used is not None else None))
                except nv.NVMLError:
                    pass
            uuid = nv.nvmlDeviceGetUUID(handle)
            name = nv.nvmlDeviceGetName(handle)
            try:
                temperature = int(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))
            except nv.NVMLError:
                temperature = None
            try:
                power = round(nv.nvmlDeviceGetPowerUsage(handle) / 1000.0, 1)  # milliwatts
            except nv.NVMLError:
                power = None
            result.append(
                GPUInfo(
                    index=index,
                    uuid=uuid.decode() if isinstance(uuid, bytes) else uuid,
                    name=name.decode() if isinstance(name, bytes) else name,
                    memory_total=int(mem.total),
                    memory_used=int(mem.used),
                    utilization=util,
                    processes=processes,
                    temperature=temperature,
                    power_watts=power,
                )
            )
        return result


_SIM_RE = re.compile(r"^\s*(\d+)\s*[xX]\s*(.+?)\s*$")


#: a simulated host has at most this many GPUs (a typo such as 99999999999x24GiB is refused, not allocated)
MAX_SIMULATED_GPUS = 1024


def parse_simulation_spec(spec: str) -> list[int]:
    """``"4x24GiB"`` -> four 24 GiB GPUs; ``"24GiB,80GiB"`` -> two GPUs of those sizes."""
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidArgumentError("simulate_gpus", spec, "a spec such as '4x24GiB' or '24GiB,24GiB,80GiB'")
    sizes: list[int] = []
    for part in spec.split(","):
        m = _SIM_RE.match(part)
        count, size = (int(m.group(1)), m.group(2)) if m else (1, part)
        if count < 1:
            raise InvalidArgumentError("simulate_gpus", spec, "at least one GPU")
        if len(sizes) + count > MAX_SIMULATED_GPUS:
            raise InvalidArgumentError("simulate_gpus", spec, f"at most {MAX_SIMULATED_GPUS} GPUs in all")
        sizes += [parse_bytes(size, argument="simulate_gpus")] * count
    return sizes


class SimulatedInventory:
    """GPUs that do not exist, for tests and demos on machines without one.

    Every GPU reports ``simulated=True`` and a UUID starting ``GPU-SIMULATED-``. Memory in use is 0
    unless a *usage file* says otherwise: ``{"0": {"memory_used": "6GiB", "utilization": 80,
    "pids": [1234]}}`` simulates a colleague's process on GPU 0 (what NVML would report);
    ``"processes": [{"pid": 1234, "used_memory": "6GiB"}]`` gives per-process figures. Temperature and power
    are made up too: ``"temperature"`` and ``"power_watts"`` in the usage file, else 30 °C plus a third of the
    utilisation and 50 W plus 2.5 W per percent (plausible figures, never a real GPU's: everything built from
    them says SIMULATED).
    """

    source = "simulated"

    def __init__(self, spec: str, usage_file: str | None = None, name: str = "Simulated GPU") -> None:
        self.spec = spec
        self.sizes = parse_simulation_spec(spec)
        self.usage_file = usage_file
        self.name = name

    @property
    def reports_processes(self) -> bool:
        """Only a usage file gives simulated GPUs processes; without one there is nothing to sample."""
        return bool(self.usage_file)

    def driver_version(self) -> str:
        return "none (SIMULATED GPUs)"

    def _usage(self) -> dict[str, Any]:
        if not self.usage_file or not os.path.exists(self.usage_file):
            return {}
        try:
            with open(self.usage_file) as fh:
                usage: dict[str, Any] = json.load(fh)
                return usage
        except (OSError, ValueError) as exc:
            raise GPUInventoryError(f"{self.usage_file}: not a valid simulated-usage JSON file ({exc})") from exc

    def _number(self, usage: dict[str, Any], key: str, index: int, default: float, low: float, high: float) -> float:
        value = usage.get(key, default)
        if not is_number(value) or not low <= value <= high:
            raise GPUInventoryError(
                f"{self.usage_file}: key {index}.{key}: expected a number from {low:g} to {high:g}, got {value!r:.40}"
            )
        return int(value) if key == "utilization" else value

    def gpus(self) -> list[GPUInfo]:
        usage = self._usage()
        result = []
        for index, total in enumerate(self.sizes):
            u = usage.get(str(index), {})
            used = parse_bytes(u.get("memory_used", 0), argument=f"{self.usage_file}[{index}].memory_used")
            procs = [GPUProcess(int(p), None) for p in u.get("pids", [])]
            procs += [
                GPUProcess(int(p["pid"]), parse_bytes(p["used_memory"], argument=f"{self.usage_file}[{index}]"))
                for p in u.get("processes", [])
            ]
            util = self._number(u, "utilization", index, 0, 0, 100)
            result.append(
                GPUInfo(
                    index=index,
                    uuid=f"GPU-SIMULATED-{index:04d}",
                    name=f"{self.name} {index}",
                    memory_total=total,
                    memory_used=min(used, total),
                    utilization=int(util),
                    processes=procs,
                    simulated=True,
                    temperature=int(self._number(u, "temperature", index, 30 + util // 3, -50, 150)),
                    power_watts=float(self._number(u, "power_watts", index, 50.0 + 2.5 * util, 0, 5000)),
                )
            )
        return result


def get_inventory(
    simulate: str | None = None, usage_file: str | None = None, prefer_simulated: bool = False
) -> GPUInventory:
    """NVML where it works; else the simulated inventory ``simulate`` (or ``$GPUSCHED_SIMULATE_GPUS``);
    else a clear error. ``prefer_simulated`` uses the simulation even where NVML works (tests)."""
    simulate = simulate or os.environ.get(SIMULATE_ENV) or None
    usage_file = usage_file or os.environ.get(SIMULATE_USAGE_ENV) or None
    if simulate and prefer_simulated:
        return SimulatedInventory(simulate, usage_file)
    try:
        inventory = NVMLInventory()
        if inventory.gpus():
            return inventory
        reason = "NVML found no GPU"
    except GPUInventoryError as exc:
        reason = str(exc)
    if simulate:
        return SimulatedInventory(simulate, usage_file)
    raise GPUInventoryError(
        f"No GPU inventory: {reason}, and no simulated inventory is configured. On a machine without "
        f"NVIDIA GPUs set {SIMULATE_ENV}=4x24GiB (or [gpusched] simulate_gpus) to use simulated GPUs."
    )
