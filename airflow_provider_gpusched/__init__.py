"""airflow-provider-gpusched: schedule GPU work (local GPUs and Slurm) from Apache Airflow 3.

One import surface: everything a DAG file or a notebook needs comes from here, loaded on first use (PEP 562), so
``import airflow_provider_gpusched`` stays as cheap as before and the pure-Python names (sweep specs, spaces,
``report``, ``rank_info``) never load Airflow::

    from airflow_provider_gpusched import SweepSpec, Objective, TrialResources, loguniform, sweep_task_group
    from airflow_provider_gpusched import LocalGPUOperator, SlurmJobOperator
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: name -> the module that defines it (core modules first: they import no Airflow)
_EXPORTS = {
    # sweeps, searches and their parts (core: no Airflow)
    "SweepSpec": "core.sweep.definition.sweep_spec",
    "TrialResources": "core.sweep.parts.resources",
    "EvolutionSettings": "core.sweep.searches.evolution",
    "Objective": "core.sweep.parts.objective",
    "PruningRule": "core.sweep.pruning_rules.judging",
    "ModelCost": "core.sweep.searches.model_cost",
    "choice": "core.sweep.parts.spaces",
    "uniform": "core.sweep.parts.spaces",
    "loguniform": "core.sweep.parts.spaces",
    "randint": "core.sweep.parts.spaces",
    "quniform": "core.sweep.parts.spaces",
    "when": "core.sweep.parts.spaces",
    "report": "core.sweep.running.trial_report",
    "run_sweep": "core.sweep.running.terminal",
    "load_spec": "core.sweep.running.terminal",
    # distributed starts, Slurm job specs (core)
    "RankInfo": "core.distributed",
    "rank_info": "core.distributed",
    "SlurmJobSpec": "core.slurm.job",
    "wait_for_gpus": "core.gpu.stages",
    # Airflow adapters
    "sweep_task_group": "task_groups.sweep",
    "LocalGPUOperator": "operators.local_gpu",
    "SlurmJobOperator": "operators.slurm",
    "SlurmPythonOperator": "operators.slurm",
    "PipelinePartitionOperator": "operators.partition",
    "SlurmJobSensor": "sensors.slurm",
    "GPUAvailableSensor": "sensors.local_gpu",
    "SlurmJobTrigger": "triggers.slurm",
    "GPUAvailableTrigger": "triggers.local_gpu",
    "SlurmHook": "hooks.slurm",
    "LocalGPUHook": "hooks.local_gpu",
    "EmailNotifier": "notifications.notifiers",
    "WebhookNotifier": "notifications.notifiers",
}

__all__ = [  # the names of _EXPORTS (a test checks that the two agree)
    "__version__",
    "SweepSpec",
    "TrialResources",
    "EvolutionSettings",
    "Objective",
    "PruningRule",
    "ModelCost",
    "choice",
    "uniform",
    "loguniform",
    "randint",
    "quniform",
    "when",
    "report",
    "run_sweep",
    "load_spec",
    "RankInfo",
    "rank_info",
    "SlurmJobSpec",
    "wait_for_gpus",
    "sweep_task_group",
    "LocalGPUOperator",
    "SlurmJobOperator",
    "SlurmPythonOperator",
    "PipelinePartitionOperator",
    "SlurmJobSensor",
    "GPUAvailableSensor",
    "SlurmJobTrigger",
    "GPUAvailableTrigger",
    "SlurmHook",
    "LocalGPUHook",
    "EmailNotifier",
    "WebhookNotifier",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:
    from airflow_provider_gpusched.core.distributed import RankInfo, rank_info
    from airflow_provider_gpusched.core.gpu.stages import wait_for_gpus
    from airflow_provider_gpusched.core.slurm.job import SlurmJobSpec
    from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
    from airflow_provider_gpusched.core.sweep.parts.objective import Objective
    from airflow_provider_gpusched.core.sweep.parts.resources import TrialResources
    from airflow_provider_gpusched.core.sweep.parts.spaces import choice, loguniform, quniform, randint, uniform, when
    from airflow_provider_gpusched.core.sweep.pruning_rules.judging import PruningRule
    from airflow_provider_gpusched.core.sweep.running.terminal import load_spec, run_sweep
    from airflow_provider_gpusched.core.sweep.running.trial_report import report
    from airflow_provider_gpusched.core.sweep.searches.evolution import EvolutionSettings
    from airflow_provider_gpusched.core.sweep.searches.model_cost import ModelCost
    from airflow_provider_gpusched.hooks.local_gpu import LocalGPUHook
    from airflow_provider_gpusched.hooks.slurm import SlurmHook
    from airflow_provider_gpusched.notifications.notifiers import EmailNotifier, WebhookNotifier
    from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator
    from airflow_provider_gpusched.operators.partition import PipelinePartitionOperator
    from airflow_provider_gpusched.operators.slurm import SlurmJobOperator, SlurmPythonOperator
    from airflow_provider_gpusched.sensors.local_gpu import GPUAvailableSensor
    from airflow_provider_gpusched.sensors.slurm import SlurmJobSensor
    from airflow_provider_gpusched.task_groups.sweep import sweep_task_group
    from airflow_provider_gpusched.triggers.local_gpu import GPUAvailableTrigger
    from airflow_provider_gpusched.triggers.slurm import SlurmJobTrigger
