"""The pipeline profiler: measure a PyTorch model layer by layer on this host's device and write the
partitioner's ``models.yml`` and ``device_types.yml`` (sched-pipeline's formats), merged with what the files
already hold.

A model to profile is a sequence of layers (an ``nn.Sequential``, or a list of modules): a pipeline stage runs
a run of consecutive layers, each layer's output the next one's input. Per layer it measures

* the forward time of one micro-batch (median of ``repeat`` runs after ``warmup``; CUDA synchronised),
* the weight memory (parameters and buffers) and the activation memory: on a GPU the peak that CUDA's
  allocator saw above the layer's input and weights, on a CPU the largest intermediate tensor any sub-module
  produced (the working set the forward needs besides its input and output),
* the size of its output per sample (``parameters_out``, what the next stage receives).

``mem_MB`` in models.yml is weights + activations (MiB, as the partitioner counts them); both parts are kept
next to it (``weights_MB``, ``activations_MB``), which the partitioner ignores. PyTorch is imported only here,
when a profile is taken.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from airflow_provider_gpusched.core.checks import is_int
from airflow_provider_gpusched.core.import_target import TargetImportError, import_attribute
from airflow_provider_gpusched.core.partition.problem import DTYPE_SIZES, MiB, PartitionInputError

#: the dtypes the partitioner knows, as torch attribute names
TORCH_DTYPES = {name: name.split(".", 1)[1] for name in DTYPE_SIZES}


@dataclass
class LayerProfile:
    name: str  # the layer's class, e.g. "TransformerEncoderLayer"
    time_s: float  # forward time of one micro-batch
    weights_bytes: int
    activation_bytes: int
    out_elements: int  # per sample


@dataclass
class ModelProfile:
    model: str
    dtype: str
    batch_size: int
    input_shape: tuple[int, ...]
    device: str  # "cpu" or "cuda:0 (NVIDIA H100 80GB HBM3)"
    device_memory_mb: float
    layers: list[LayerProfile]

    @property
    def in_elements(self) -> int:
        return math.prod(self.input_shape)


def load_model(spec: str, *, seed: int = 0) -> Any:
    """The model ``spec`` names: a built-in name (``mlp``, ``convnet``, ``tiny-vit``) or
    ``package.module:callable`` (called with no arguments), as a list of layers, with the built-in's input shape
    (None for a callable). Errors name the spec and what was wrong."""
    from airflow_provider_gpusched.core.partition.example_models import BUILTIN

    if spec in BUILTIN:
        build, shape = BUILTIN[spec]
        model = build(seed=seed)
    else:
        if ":" not in spec:
            raise PartitionInputError(
                f"model {spec!r}: expected a built-in model ({', '.join(BUILTIN)}) or 'package.module:callable'"
            )
        try:
            obj = import_attribute(spec)
        except TargetImportError as exc:
            if exc.module_failed:
                raise PartitionInputError(f"model {spec!r}: cannot import module {exc.module!r} ({exc})") from None
            raise PartitionInputError(f"model {spec!r}: module {exc.module!r} has no attribute {exc.attr!r}") from None
        attr = spec.partition(":")[2]
        if not callable(obj):
            raise PartitionInputError(f"model {spec!r}: {attr!r} is not callable")
        try:
            model = obj()
        except Exception as exc:  # noqa: BLE001 - the user's builder
            raise PartitionInputError(
                f"model {spec!r}: calling {attr}() failed ({type(exc).__name__}: {exc})"
            ) from None
        shape = None
    return layers_of(model, spec), shape


def layers_of(model: Any, spec: str) -> list[Any]:
    from torch import nn

    if isinstance(model, nn.Sequential) or (
        isinstance(model, (list, tuple, nn.ModuleList)) and all(isinstance(m, nn.Module) for m in model)
    ):
        layers = list(model)
        if layers:
            return layers
    raise PartitionInputError(
        f"model {spec!r}: expected an nn.Sequential (or a list of modules) with at least one "
        f"layer, got {type(model).__name__}: pipeline stages are runs of consecutive layers"
    )


def parse_shape(text: str | list[Any] | tuple[Any, ...]) -> tuple[int, ...]:
    """``3,224,224`` (or a list) -> (3, 224, 224): one sample's input shape, without the batch dimension."""
    parts = text.replace("x", ",").split(",") if isinstance(text, str) else list(text)
    try:
        shape = tuple(int(str(p).strip()) for p in parts)
    except ValueError:
        shape = ()
    if not shape or any(n < 1 for n in shape):
        raise PartitionInputError(
            f"input shape: expected one sample's shape as positive whole numbers without the "
            f"batch dimension, e.g. 3,224,224; got {text!r}"
        )
    return shape


def profile_model(
    spec: str,
    *,
    dtype: str = "torch.float32",
    batch_size: int = 8,
    input_shape: tuple[int, ...] | None = None,
    device: str = "auto",
    warmup: int = 2,
    repeat: int = 5,
) -> ModelProfile:
    """Measure ``spec``'s layers on ``device`` (``auto``: the GPU PyTorch sees, i.e. the leased one, else the
    CPU)."""
    import torch

    if dtype not in TORCH_DTYPES:
        raise PartitionInputError(f"dtype: {dtype!r} is not supported; expected one of {', '.join(TORCH_DTYPES)}")
    if not is_int(batch_size) or batch_size < 1:
        raise PartitionInputError(f"batch size: expected a whole number >= 1, got {batch_size!r}")
    for name, value, least in (("warmup", warmup, 0), ("repeat", repeat, 1)):
        if not is_int(value) or value < least:
            raise PartitionInputError(f"{name}: expected a whole number >= {least}, got {value!r}")
    layers, builtin_shape = load_model(spec)
    shape = tuple(input_shape) if input_shape is not None else builtin_shape
    if shape is None:
        raise PartitionInputError(f"model {spec!r}: give its input shape (--input-shape, e.g. 3,224,224)")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise PartitionInputError(f"device: expected auto, cpu, cuda or cuda:N, got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise PartitionInputError(
            f"device: {device} asked for, but PyTorch sees no GPU (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
        )
    torch_device = torch.device(device)
    if torch_device.type == "cuda" and torch_device.index is None:  # "cuda" / auto: name the device it is
        torch_device = torch.device("cuda", torch.cuda.current_device())
    torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
    if torch_device.type == "cuda":
        props = torch.cuda.get_device_properties(torch_device)
        where, memory_mb = f"{torch_device} ({props.name})", props.total_memory / MiB
    else:
        import psutil

        where, memory_mb = "cpu", psutil.virtual_memory().total / MiB
    x = torch.randn(batch_size, *shape).to(device=torch_device, dtype=torch_dtype)
    profiles: list[LayerProfile] = []
    with torch.inference_mode():
        for index, layer in enumerate(layers):
            layer = layer.to(device=torch_device, dtype=torch_dtype).eval()
            try:
                y, seconds, activation = _measure(layer, x, torch_device, warmup, repeat)
            except (RuntimeError, ValueError, TypeError, IndexError) as exc:
                message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise PartitionInputError(
                    f"input shape {','.join(map(str, shape))}: does not fit model {spec!r}: layer {index + 1} of "
                    f"{len(layers)} ({type(layer).__name__}) got {tuple(x.shape)} and failed: {message}"
                ) from None
            if not isinstance(y, torch.Tensor):
                raise PartitionInputError(
                    f"model {spec!r}: layer {index + 1} ({type(layer).__name__}) returned "
                    f"{type(y).__name__}, expected one tensor (the next layer's input)"
                )
            weights = sum(t.numel() * t.element_size() for t in list(layer.parameters()) + list(layer.buffers()))
            profiles.append(
                LayerProfile(type(layer).__name__, seconds, int(weights), int(activation), int(y.numel() // batch_size))
            )
            x = y
    return ModelProfile(spec, dtype, batch_size, shape, where, memory_mb, profiles)


def _measure(layer: Any, x: Any, device: Any, warmup: int, repeat: int) -> Any:
    import torch

    cuda = device.type == "cuda"
    largest = [0]

    def note(_module: Any, _inputs: Any, output: Any) -> None:
        if isinstance(output, torch.Tensor):
            largest[0] = max(largest[0], output.numel() * output.element_size())

    hooks = [m.register_forward_hook(note) for m in layer.modules() if m is not layer]
    try:
        y = layer(x)  # the first run also finds a shape mismatch before any timing
    finally:
        for h in hooks:
            h.remove()
    for _ in range(warmup):
        layer(x)
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        y = layer(x)
        if cuda:
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    activation = max(0, torch.cuda.max_memory_allocated(device) - base) if cuda else largest[0]
    return y, statistics.median(times), activation


def host_device_type() -> str:
    """A name for this host's device type when none is given: the GPU's name, else the CPU's model."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0).replace(" ", "-")
    except ImportError:  # pragma: no cover - profiling needs torch anyway
        pass
    model = ""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:
        pass
    return "cpu-" + ("-".join(model.split()) if model else platform.machine())


def write_profile(
    profile: ModelProfile,
    *,
    models_file: str,
    device_types_file: str,
    device_type: str,
    name: str | None = None,
    bw_mbps: float | None = None,
    mem_mb: float | None = None,
) -> dict[str, Any]:
    """Merge ``profile`` into the two files: the model's entry in models.yml (created, or updated when its
    layer count agrees), and ``device_type``'s profile for this dtype and batch size in device_types.yml
    (replaced, other profiles and types kept). ``bw_mbps`` / ``mem_mb`` set the type's bandwidth and memory;
    unset, a new type takes the measured device's memory and needs ``bw_mbps``. Returns what was written."""
    name = name or profile.model
    folders = sorted({os.path.dirname(os.path.abspath(p)) for p in (models_file, device_types_file)})
    with contextlib.ExitStack() as stack:  # profilers on several hosts merging into the same shared files
        for folder in folders:
            stack.enter_context(_locked(folder))
        return _merge(
            profile,
            models_file=models_file,
            device_types_file=device_types_file,
            device_type=device_type,
            name=name,
            bw_mbps=bw_mbps,
            mem_mb=mem_mb,
        )


@contextlib.contextmanager
def _locked(folder: str) -> Iterator[None]:
    """An exclusive lock on the folder itself (flock on its descriptor: no lock file to plant or leave)."""
    import fcntl

    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise PartitionInputError(
            f"{folder}: cannot open the folder to write the profile ({exc.strerror})", exit_code=3
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _merge(
    profile: ModelProfile,
    *,
    models_file: str,
    device_types_file: str,
    device_type: str,
    name: str,
    bw_mbps: float | None,
    mem_mb: float | None,
) -> dict[str, Any]:
    import yaml

    from airflow_provider_gpusched.core.safe_files import write_atomic

    layers = len(profile.layers)
    models = _read_mapping(models_file, "models")
    types = _read_mapping(device_types_file, "device types")
    old = models.get(name)
    if old is not None:
        if not isinstance(old, dict) or "layers" not in old:
            raise PartitionInputError(
                f"{models_file}: {name}: expected a mapping with layers, mem_MB, parameters_in, parameters_out"
            )
        if old["layers"] != layers:
            raise PartitionInputError(
                f"{models_file}: {name}.layers: the file says {old['layers']}, the profiled "
                f"model has {layers} layers; profile it under another name (--name) or "
                f"remove the old entry"
            )
    for type_name, entry in types.items():  # other types' profiles of this model must agree on the layers
        for i, p in enumerate(((entry or {}).get("model_profiles") or {}).get(name) or []):
            if (
                isinstance(p, dict)
                and isinstance(p.get("time_s"), list)
                and len(p["time_s"]) != layers
                and not (
                    type_name == device_type
                    and p.get("dtype") == profile.dtype
                    and p.get("batch_size") == profile.batch_size
                )
            ):
                raise PartitionInputError(
                    f"{device_types_file}: {type_name}.model_profiles.{name}[{i}].time_s: "
                    f"{len(p['time_s'])} entries, the profiled model has {layers} layers"
                )
    mb = [round((lp.weights_bytes + lp.activation_bytes) / MiB, 6) for lp in profile.layers]
    models[name] = {
        "layers": layers,
        "mem_MB": mb,
        "parameters_in": profile.in_elements,
        "parameters_out": [lp.out_elements for lp in profile.layers],
        "weights_MB": [round(lp.weights_bytes / MiB, 6) for lp in profile.layers],
        "activations_MB": [round(lp.activation_bytes / MiB, 6) for lp in profile.layers],
        "layer_names": [lp.name for lp in profile.layers],
        "input_shape": list(profile.input_shape),
    }
    entry = types.get(device_type)
    if entry is not None and not isinstance(entry, dict):
        raise PartitionInputError(
            f"{device_types_file}: {device_type}: expected a mapping with bw_Mbps, mem_MB, model_profiles"
        )
    entry = dict(entry or {})
    if bw_mbps is not None:
        entry["bw_Mbps"] = bw_mbps
    elif "bw_Mbps" not in entry:
        raise PartitionInputError(
            f"{device_types_file}: {device_type}: a new device type needs its link bandwidth "
            f"(--bw-mbps, in 2^20 bits/s)"
        )
    if mem_mb is not None:
        entry["mem_MB"] = mem_mb
    elif "mem_MB" not in entry:
        entry["mem_MB"] = int(profile.device_memory_mb)
    profiles = dict(entry.get("model_profiles") or {})
    kept = [
        p
        for p in profiles.get(name) or []
        if not (isinstance(p, dict) and p.get("dtype") == profile.dtype and p.get("batch_size") == profile.batch_size)
    ]
    kept.append(
        {
            "batch_size": profile.batch_size,
            "dtype": profile.dtype,
            "time_s": [round(lp.time_s, 9) for lp in profile.layers],
            "device": profile.device,
        }
    )
    profiles[name] = kept
    entry["model_profiles"] = profiles
    types[device_type] = entry
    for path, doc in ((models_file, models), (device_types_file, types)):
        write_atomic(path, yaml.safe_dump(doc, sort_keys=False, width=120, default_flow_style=None), mode=0o644)
    return {"model": name, "device_type": device_type, "layers": layers, "device": profile.device}


def check_profile_files(*, models_file: str, device_types_file: str, device_type: str, bw_mbps: float | None) -> None:
    """What :func:`write_profile` would refuse after measuring, said before: files that cannot be read as the
    mappings they should be, and a new device type without its link bandwidth."""
    _read_mapping(models_file, "models")
    types = _read_mapping(device_types_file, "device types")
    entry = types.get(device_type)
    if entry is not None and not isinstance(entry, dict):
        raise PartitionInputError(
            f"{device_types_file}: {device_type}: expected a mapping with bw_Mbps, mem_MB, model_profiles"
        )
    if bw_mbps is None and "bw_Mbps" not in (entry or {}):
        raise PartitionInputError(
            f"{device_types_file}: {device_type}: a new device type needs its link bandwidth "
            f"(--bw-mbps, in 2^20 bits/s); nothing was measured"
        )


@contextlib.contextmanager
def time_limit(seconds: float, what: str = "profiling") -> Iterator[None]:
    """``what`` gets ``seconds``: then :class:`PartitionInputError` (exit code 124) is raised in the main thread;
    if it is stuck where Python cannot raise (a hung GPU kernel), the process exits 124 ten seconds later."""
    import signal
    import sys
    import threading

    def expired(_signum: int, _frame: object) -> None:
        raise PartitionInputError(
            f"{what} took longer than {seconds:g}s (--time-limit): stopped. A model that "
            f"hangs, or one too big for this device? Raise the limit if it is just slow",
            exit_code=124,
        )

    def hard_stop() -> None:
        sys.stderr.write(f"gpusched: {what} is stuck past its time limit ({seconds:g}s) and did not stop: exiting\n")
        sys.stderr.flush()
        os._exit(124)

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    guard = threading.Timer(seconds + 10, hard_stop)
    guard.daemon = True
    guard.start()
    try:
        yield
    finally:
        guard.cancel()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _read_mapping(path: str, what: str) -> dict[str, Any]:
    from airflow_provider_gpusched.core.partition.problem import load_yaml_file

    if not os.path.exists(path):
        return {}
    doc = load_yaml_file(path, what)
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise PartitionInputError(f"{path}: expected a mapping at the top level, got {type(doc).__name__}")
    return doc


__all__ = [
    "LayerProfile",
    "ModelProfile",
    "check_profile_files",
    "host_device_type",
    "time_limit",
    "load_model",
    "parse_shape",
    "profile_model",
    "write_profile",
]
