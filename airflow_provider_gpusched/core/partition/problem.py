"""The pipeline-partitioning problem read from sched-pipeline's three YAML files (models, device types,
devices), checked, and turned into the quantities the solver needs (bytes and seconds).

Every input error is a :class:`PartitionInputError` naming the file and key and what was expected.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_gpusched.core.checks import is_finite_number
from airflow_provider_gpusched.core.errors import GpuschedError

DTYPE_SIZES = {"torch.float32": 4, "torch.float16": 2, "torch.bfloat16": 2}
MiB = 1024 * 1024


class PartitionInputError(GpuschedError):
    """Bad partitioner input; ``exit_code`` is what ``gpusched partition`` exits with."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class DeviceType:
    name: str
    bw_mbps: float
    mem_mb: float
    time_s: list[float]
    hosts: list[str]

    @property
    def bytes_per_second(self) -> float:
        return self.bw_mbps * MiB / 8


@dataclass
class Problem:
    """One instance: the model's layers and the device types that can run them (with their hosts)."""

    model: str
    dtype: str
    batch_size: int
    buffers_in: int
    buffers_out: int
    layers: int
    mem_mb: list[float]
    out_bytes: list[float]  # out(j), j = 1..L at index j-1
    in_bytes_first: float  # in(1)
    types: list[DeviceType]  # only types with a matching profile (hosts may be empty)
    skipped_types: dict[str, str] = field(default_factory=dict)  # name -> why it takes no part

    def in_bytes(self, first: int) -> float:
        return self.in_bytes_first if first == 1 else self.out_bytes[first - 2]


def load_yaml_file(path: str, what: str) -> Any:
    """One partitioner input file (``what``: models, device types, devices), parsed; PartitionInputError naming the
    file otherwise (exit code 3 when it cannot be read)."""
    from airflow_provider_gpusched.core.yaml_loader import safe_load

    if not os.path.exists(path):
        raise PartitionInputError(f"{path}: {what} file not found", exit_code=3)
    try:
        with open(path) as fh:
            return safe_load(fh)
    except OSError as exc:
        raise PartitionInputError(f"{path}: cannot read the {what} file ({exc.strerror})", exit_code=3) from None
    except Exception as exc:  # noqa: BLE001 - yaml errors carry line/column
        raise PartitionInputError(f"{path}: not valid YAML ({exc})".replace("\n", " ")) from None


def _number(value: Any, where: str, *, positive: bool = True, integer: bool = False, allow_zero: bool = False) -> float:
    ok = is_finite_number(value)
    if ok and integer:
        ok = float(value).is_integer()
    if ok and positive:
        ok = value > 0 or (allow_zero and value == 0)
    if not ok:
        kind = "a whole number" if integer else "a number"
        bound = " >= 0" if allow_zero else (" > 0" if positive else "")
        raise PartitionInputError(f"{where}: expected {kind}{bound}, got {value!r}")
    number: float = value  # checked above: a finite int or float
    return number


def _number_list(value: Any, where: str, *, allow_zero: bool = False, integer: bool = False) -> list[float]:
    if not isinstance(value, list):
        raise PartitionInputError(f"{where}: expected a list of numbers, got {type(value).__name__}")
    return [_number(v, f"{where}[{i}]", integer=integer, allow_zero=allow_zero) for i, v in enumerate(value)]


def load_problem(
    models_file: str = "models.yml",
    device_types_file: str = "device_types.yml",
    devices_file: str = "devices.yml",
    *,
    model: str = "google/vit-base-patch16-224",
    dtype: str = "torch.float32",
    batch_size: int = 8,
    buffers_in: int = 2,
    buffers_out: int = 2,
) -> Problem:
    """Read and check the three files for ``model``; raise :class:`PartitionInputError` on bad input."""
    if dtype not in DTYPE_SIZES:
        raise PartitionInputError(f"dtype: {dtype!r} is not supported; expected one of {', '.join(DTYPE_SIZES)}")
    _number(batch_size, "batch size (-b)", integer=True)
    _number(buffers_in, "buffers in (-i)", integer=True, allow_zero=True)
    _number(buffers_out, "buffers out (-o)", integer=True, allow_zero=True)
    models, types_doc, devices = _load_documents(models_file, device_types_file, devices_file)
    layers, mem_mb, params_in, params_out = _model_layers(models, models_file, model)
    size = DTYPE_SIZES[dtype]
    out_bytes = [size * params_out[j % len(params_out)] * batch_size for j in range(layers)]
    _check_devices(devices, types_doc, devices_file, device_types_file)
    types: list[DeviceType] = []
    skipped: dict[str, str] = {}
    for name, t in types_doc.items():
        hosts = [str(h) for h in (devices.get(name) or [])]
        found = _device_type(name, t, hosts, f"{device_types_file}: {name}", model, dtype, batch_size, layers)
        if isinstance(found, str):
            skipped[name] = found
        else:
            types.append(found)
    return Problem(
        model=model,
        dtype=dtype,
        batch_size=int(batch_size),
        buffers_in=int(buffers_in),
        buffers_out=int(buffers_out),
        layers=layers,
        mem_mb=mem_mb,
        out_bytes=out_bytes,
        in_bytes_first=size * params_in * batch_size,
        types=types,
        skipped_types=skipped,
    )


def _load_documents(
    models_file: str, device_types_file: str, devices_file: str
) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any]]:
    """The three files parsed, each a mapping (an empty file: an empty one)."""
    models = load_yaml_file(models_file, "models")
    types_doc = load_yaml_file(device_types_file, "device types")
    devices = load_yaml_file(devices_file, "devices")
    for doc, path in ((models, models_file), (types_doc, device_types_file), (devices, devices_file)):
        if doc is not None and not isinstance(doc, dict):
            raise PartitionInputError(f"{path}: expected a mapping at the top level, got {type(doc).__name__}")
    return models or {}, types_doc or {}, devices or {}


def _model_layers(models: dict[Any, Any], models_file: str, model: str) -> tuple[int, list[float], float, list[float]]:
    """``(layers, mem_MB, parameters_in, parameters_out)`` of ``model``, checked."""
    if model not in models:
        known = ", ".join(map(str, models)) or "none"
        raise PartitionInputError(f"{models_file}: unknown model {model!r} (models in the file: {known})")
    m = models[model]
    where = f"{models_file}: {model}"
    if not isinstance(m, dict):
        raise PartitionInputError(f"{where}: expected a mapping with layers, mem_MB, parameters_in, parameters_out")
    for key in ("layers", "mem_MB", "parameters_in", "parameters_out"):
        if key not in m:
            raise PartitionInputError(f"{where}: missing key {key!r}")
    layers = int(_number(m["layers"], f"{where}.layers", integer=True, allow_zero=True))
    mem_mb = _number_list(m["mem_MB"], f"{where}.mem_MB", allow_zero=True)
    if len(mem_mb) != layers:
        raise PartitionInputError(f"{where}.mem_MB: expected {layers} entries (layers), got {len(mem_mb)}")
    params_in = _number(m["parameters_in"], f"{where}.parameters_in", integer=True, allow_zero=layers == 0)
    params_out = _number_list(m["parameters_out"], f"{where}.parameters_out", integer=True)
    if len(params_out) > layers:
        raise PartitionInputError(
            f"{where}.parameters_out: expected at most {layers} entries (layers), got {len(params_out)}"
        )
    if layers and not params_out:
        raise PartitionInputError(f"{where}.parameters_out: expected at least one entry")
    return layers, mem_mb, params_in, params_out


def _check_devices(devices: dict[Any, Any], types_doc: dict[Any, Any], devices_file: str, types_file: str) -> None:
    """Each device type's hosts: a list of host names, of a type the device types file has, each host once."""
    for name, hosts in devices.items():
        if hosts is None:
            hosts = []
        if not isinstance(hosts, list) or not all(isinstance(h, (str, int)) for h in hosts):
            raise PartitionInputError(f"{devices_file}: {name}: expected a list of host names")
        if name not in types_doc:
            raise PartitionInputError(f"{devices_file}: {name}: device type not in {types_file}")
    seen_hosts: dict[str, str] = {}
    for name, hosts in devices.items():
        for h in hosts or []:
            if re.search(r"[\x00-\x1f\x7f]", str(h)) or not str(h).strip():
                raise PartitionInputError(
                    f"{devices_file}: {name}: host {h!r}: expected a host name without "
                    f"control characters (newline, tab, ...)"
                )
            if str(h) in seen_hosts:
                raise PartitionInputError(f"{devices_file}: host {h!r} is listed twice ({seen_hosts[str(h)]}, {name})")
            seen_hosts[str(h)] = name


def _device_type(
    name: Any,
    t: Any,
    hosts: list[str],
    where_t: str,
    model: str,
    dtype: str,
    batch_size: int,
    layers: int,
) -> DeviceType | str:
    """Device type ``name`` (its entry ``t``) for this model, dtype and batch size, checked; why it takes no part
    (a string) when it has no profile for them."""
    if not isinstance(t, dict):
        raise PartitionInputError(f"{where_t}: expected a mapping with bw_Mbps, mem_MB, model_profiles")
    all_profiles = t.get("model_profiles") or {}
    if not isinstance(all_profiles, dict):
        raise PartitionInputError(
            f"{where_t}.model_profiles: expected a mapping of model name -> list of "
            f"profiles, got {type(all_profiles).__name__}"
        )
    profiles = all_profiles.get(model)
    if profiles is not None and not isinstance(profiles, list):
        raise PartitionInputError(
            f"{where_t}.model_profiles.{model}: expected a list of profiles (batch_size, "
            f"dtype, time_s), got {type(profiles).__name__}"
        )
    match = None
    for i, p in enumerate(profiles or []):
        if isinstance(p, dict) and p.get("dtype") == dtype and p.get("batch_size") == batch_size:
            match = (i, p)  # several matching: the last one wins
    if match is None:
        return f"no {model} profile for {dtype}, batch size {batch_size}"
    for key in ("bw_Mbps", "mem_MB"):
        if key not in t:
            raise PartitionInputError(f"{where_t}: missing key {key!r}")
    bw = _number(t["bw_Mbps"], f"{where_t}.bw_Mbps")
    mem = _number(t["mem_MB"], f"{where_t}.mem_MB")
    i, p = match
    where_p = f"{where_t}.model_profiles.{model}[{i}].time_s"
    if "time_s" not in p:
        raise PartitionInputError(f"{where_p}: missing")
    times = _number_list(p["time_s"], where_p, allow_zero=True)
    if len(times) != layers:
        raise PartitionInputError(f"{where_p}: expected {layers} entries (layers), got {len(times)}")
    return DeviceType(str(name), float(bw), float(mem), times, hosts)
