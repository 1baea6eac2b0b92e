"""Each backend reads a sweep's shared TrialResources into its own trial operator's arguments
(``Backend.trial_arguments``): the record holds no backend's arguments. The old TrialResources methods still
answer the same, with a deprecation warning naming the new home."""

import warnings
from typing import Any

import pytest

from airflow_provider_gpusched.core.backends import Backend, get_backend
from airflow_provider_gpusched.core.deprecation import GpuschedDeprecationWarning
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.sweep.parts.resources import TrialResources

HOST_LIMITS = {"max_cpu_percent": 90.0, "min_free_ram": "1GiB", "memory_margin": "512MiB", "max_waiting": 2}


# -- what the TrialResources methods gave before they moved (their bodies, as they were) ---------------------------
def _old_local(r: TrialResources) -> dict[str, Any]:
    return {
        "gpus": max(1, r.gpus_on_each_node),
        "gpu_memory": r.gpu_memory,
        "mem": r.mem,
        "job_class": r.job_class,
        "priority": r.priority,
        "env": r.env or None,
        "devices": r.devices,
        "device_groups": r.device_groups,
        "setup": r.setup or None,
        "cpus": r.cpus,
        "time_limit": r.time_limit,
        "load_stage": bool(r.load_stage),
        "max_waiting": r.max_waiting,
        **({"group": r.group} if r.group else {}),
    }


def _old_request(r: TrialResources) -> GPURequest:
    wanted = _old_local(r)
    limits = dict(HOST_LIMITS)
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


def _old_shape(r: TrialResources) -> dict[str, Any]:
    shape = {name: getattr(r, name) for name in r.SLURM_SHAPE if getattr(r, name) is not None}
    if r.distributed:
        shape["ntasks_per_node"] = r.nproc_per_node
    return shape


def _old_slurm(r: TrialResources) -> dict[str, Any]:
    return {
        "gpus": r.gpus_on_each_node or None,
        "cpus": r.cpus,
        "mem": r.mem,
        "partition": r.partition,
        "qos": r.qos,
        "time_limit": r.time_limit,
        "setup": r.setup or None,
        "job_class": r.job_class,
        "priority": r.priority,
        "env": r.env or None,
        **({"group": r.group} if r.group else {}),
        **_old_shape(r),
    }


LOCAL = [
    {},
    {"gpus": 0},
    {"gpus": 2, "gpu_memory": "6GiB", "mem": "8GiB", "cpus": 4, "time_limit": "1:00:00", "setup": "echo hi"},
    {"job_class": "idle", "priority": 3, "env": {"A": 1}, "group": "vision"},
    {"gpus": 2, "devices": [0, 2, 3]},
    {"device_groups": [[0, 1], [2, 3]]},
    {"load_stage": True, "max_waiting": 4, "mem": "2GiB"},
    {"gpus_per_node": 3},
    {"gpus": 2, "distributed": "torchrun"},
]
SLURM = [
    {},
    {"gpus": 0},
    {"gpus": 2, "cpus": 4, "mem": "8GiB", "partition": "batch", "qos": "high", "time_limit": "1:00:00"},
    {"setup": ["module load cuda"], "job_class": "idle", "priority": 3, "env": {"A": "1"}, "group": "vision"},
    {"nodes": 2, "gpus_per_node": 4, "distributed": "torchrun", "rank_exit_grace": 30},
    {"nodes": 2, "gpus": 2, "ntasks_per_node": 1, "distributed": "srun"},
    {
        "nodes": "2-4",
        "gpus": 2,
        "cpus_per_gpu": 4,
        "exclusive": True,
        "constraint": "a100",
        "nodelist": ("n1", "n2"),
        "exclude": "n9",
        "gpus_per_task": 1,
    },
]


def _resources(settings: dict[str, Any]) -> TrialResources:
    r = TrialResources(**settings)
    r.check("resources")
    return r


@pytest.mark.parametrize("settings", LOCAL)
def test_local_backend_reads_the_resources_as_before(settings):
    r, local = _resources(settings), get_backend("local")
    assert local.trial_arguments(r) == _old_local(r)
    assert local.gpu_request(r, HOST_LIMITS) == _old_request(r)
    with pytest.warns(GpuschedDeprecationWarning, match=r"local_gpu_arguments\(\) is now LocalBackend"):
        assert r.local_gpu_arguments() == _old_local(r)
    with pytest.warns(GpuschedDeprecationWarning, match=r"local_gpu_request\(\) is now LocalBackend.gpu_request"):
        assert r.local_gpu_request(HOST_LIMITS) == _old_request(r)


@pytest.mark.parametrize("settings", SLURM)
def test_slurm_backend_reads_the_resources_as_before(settings):
    r, slurm = _resources(settings), get_backend("slurm")
    assert slurm.trial_arguments(r) == _old_slurm(r)
    assert slurm.job_shape(r) == _old_shape(r)
    with pytest.warns(GpuschedDeprecationWarning, match=r"slurm_arguments\(\) is now SlurmBackend.trial_arguments"):
        assert r.slurm_arguments() == _old_slurm(r)
    with pytest.warns(GpuschedDeprecationWarning, match=r"job_shape\(\) is now SlurmBackend.job_shape"):
        assert r.job_shape() == _old_shape(r)


def test_the_old_names_warn_at_their_caller():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        TrialResources().slurm_arguments()
    assert [w.filename for w in caught] == [__file__]  # the line that called it, not resources.py


def test_a_backend_without_a_trial_operator_says_so():
    class Bare(Backend):
        name = "bare"

    with pytest.raises(GpuschedError, match="the bare backend has no trial arguments"):
        Bare().trial_arguments(TrialResources())


def test_the_wings_run_without_warnings():
    """The product's own callers use the wings, not the old names."""
    from airflow_provider_gpusched.core.slurm.backend import slurm_job_arguments
    from airflow_provider_gpusched.core.sweep import SweepSpec

    spec = SweepSpec(name="wings", test_config=[{"x": [1]}], command=["true"], resources=TrialResources(nodes=2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", GpuschedDeprecationWarning)
        assert slurm_job_arguments(spec)["nodes"] == 2
