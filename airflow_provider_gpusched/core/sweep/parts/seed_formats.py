"""The seed tools' spellings of a sweep: GPU Task Scheduler's ``scheduler_config`` block and GPU lists, pavi's
``function_resource`` (``launcher``, ``dist_params``) and the resource names of the first seed (``num_gpus``,
``source``, ``normal``), translated into this spec's keys before the spec checks them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_gpusched.core.errors import InvalidArgumentError

#: GPU Task Scheduler's scheduler_config keys, and where each goes
SCHEDULER_CONFIG = {
    "gpu": "resources.devices",
    "result_root_folder": "results_root",
    "force_rerun": "force_rerun",
    "test_config_string_indicator": "label_format.indicator",
    "test_config_string_separator": "label_format.separator",
    "config_string_value_maxlen": "label_format.value_maxlen",
    "test_config_string_inst_separator": "label_format.instance_separator",
}


def scheduler_config(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """GPU Task Scheduler's ``scheduler_config`` block as our keys (a key given both ways is an error). Its
    ``gpu`` list (``["0", "1"]``, or groups ``[["0", "1"], ["2", "3"]]``) becomes ``resources.devices`` and
    ``resources.gpus`` (each group's size; trials may take any free GPUs of the list, not only a listed group).
    ``temp_folder``, ``log_file`` and ``scheduler_log_file_path`` are accepted and have no use here: each
    trial's folder holds its ``output.log`` and ``status.json``."""
    block = data["scheduler_config"]
    w = f"{where}: scheduler_config"
    if not isinstance(block, Mapping):
        raise InvalidArgumentError(w, block, "a mapping (GPU Task Scheduler's scheduler_config)")
    out = {k: v for k, v in data.items() if k != "scheduler_config"}
    out.setdefault("gts_result_folders", True)
    ignored = ("temp_folder", "log_file", "scheduler_log_file_path")
    unknown = [k for k in block if k not in SCHEDULER_CONFIG and k not in ignored]
    if unknown:
        raise InvalidArgumentError(
            f"{w}.{unknown[0]}",
            block[unknown[0]],
            f"a GPU Task Scheduler key (one of {sorted([*SCHEDULER_CONFIG, *ignored])})",
        )
    for key, value in block.items():
        if key in ignored:
            continue
        target = SCHEDULER_CONFIG[key]
        if key == "gpu":
            value = _gpu_groups(value, f"{w}.gpu")
        head, _, leaf = target.partition(".")
        if not leaf:
            if head in out:
                raise InvalidArgumentError(f"{w}.{key}", value, f"one place: {head} is given too")
            out[head] = value
            continue
        section = out.get(head) or {}
        if not isinstance(section, Mapping):
            raise InvalidArgumentError(f"{where}: {head}", section, "a mapping")
        section = dict(section)
        if key == "gpu":
            gpus, devices, groups = value
            if "devices" in section or "device_groups" in section:
                raise InvalidArgumentError(
                    f"{w}.gpu", block[key], "one place: resources.devices (or device_groups) is given too"
                )
            if groups is not None:  # groups, or a mixed list: each trial takes one whole group
                section["device_groups"] = groups
            else:
                section.setdefault("gpus", gpus)
                section["devices"] = devices
        else:
            if leaf in section:
                raise InvalidArgumentError(f"{w}.{key}", value, f"one place: {target} is given too")
            section[leaf] = value
        out[head] = section
    # GPU Task Scheduler's own label defaults (key-value,key-value), so its result folders keep their names
    labels = out.get("label_format")
    if labels is None or isinstance(labels, Mapping):
        out["label_format"] = {"indicator": "-", "separator": ",", "instance_separator": "+", **dict(labels or {})}
    return out


def _gpu_groups(value: Any, where: str) -> tuple[int, list[int], list[list[int]] | None]:
    """``(gpus, devices, None)`` for a list of GPU ids (each trial one GPU of them); ``(largest group, ids,
    groups)`` when the list holds groups (``[["0", "1"], ["2", "3"]]``, or mixed ``["0", ["1", "2"]]``)."""
    groups = (
        [g if isinstance(g, (list, tuple)) else [g] for g in value]
        if isinstance(value, (list, tuple)) and value
        else None
    )
    try:
        indices = [[int(str(d), 10) for d in g] for g in groups] if groups else None
    except ValueError:
        indices = None
    if not indices or any(not g or min(g) < 0 for g in indices):
        raise InvalidArgumentError(
            where, value, "GPU ids such as ['0', '1'] or groups such as [['0', '1'], ['2', '3']]"
        )
    flat = [d for g in indices for d in g]
    if len(set(flat)) != len(flat):
        raise InvalidArgumentError(where, value, "each GPU id once")
    if all(not isinstance(g, (list, tuple)) for g in value):
        return 1, flat, None
    return max(len(g) for g in indices), flat, indices


#: pavi's launchers: where its function runs, and how it starts as ranks
PAVI_LAUNCHERS = {"slurm": ("slurm", "srun"), "pytorch": (None, "torchrun"), "none": (None, None)}


def _pavi_launch(data: dict[str, Any], where: str) -> dict[str, Any]:
    """pavi's ``function_resource`` keys ``launcher`` and ``dist_params`` as our settings: ``launcher='slurm'``
    runs the trials on Slurm only (``backend``), ``dist_params`` starts them as ranks (one per GPU: srun on Slurm,
    torchrun elsewhere) with ``$GPUSCHED_DIST_BACKEND`` naming the backend for ``init_process_group``."""
    if "executor" in data:
        raise InvalidArgumentError(
            f"{where}.executor",
            data["executor"],
            "no executor: pavi's cluster name has no "
            "meaning here; the sweep's Slurm connection picks the cluster "
            "(sweep_task_group(spec, backend='slurm', slurm_conn_id=...))",
        )
    launcher = data.pop("launcher", None)
    if launcher is not None and launcher not in PAVI_LAUNCHERS:
        raise InvalidArgumentError(f"{where}.launcher", launcher, f"one of {sorted(PAVI_LAUNCHERS)} (pavi's launchers)")
    backend, start = PAVI_LAUNCHERS.get(launcher, (None, None))
    if backend:
        data.setdefault("backend", backend)
    params = data.pop("dist_params", None)
    if params is not None:
        if not isinstance(params, Mapping) or set(params) - {"backend"}:
            raise InvalidArgumentError(f"{where}.dist_params", params, "{backend: nccl} (the process group's backend)")
        if params.get("backend") not in (None, "nccl", "gloo", "mpi"):
            raise InvalidArgumentError(f"{where}.dist_params.backend", params.get("backend"), "nccl, gloo or mpi")
        data.setdefault("distributed", start or "torchrun")
        if params.get("backend"):
            data["env"] = {**dict(data.get("env") or {}), "GPUSCHED_DIST_BACKEND": params["backend"]}
    return data


def seed_resources(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A resources mapping with the seeds' spellings in this spec's names."""
    out = dict(data)
    for seed_name, ours in (("num_gpus", "gpus"), ("num_cpus", "cpus"), ("source", "setup")):
        if seed_name in out and ours not in out:
            out[ours] = out.pop(seed_name)
    out = _pavi_launch(out, where)
    if "normal" in out and "job_class" not in out:
        normal = out.pop("normal")
        if not isinstance(normal, bool):
            raise InvalidArgumentError(f"{where}.normal", normal, "true or false")
        out["job_class"] = "normal" if normal else "idle"
    return out
