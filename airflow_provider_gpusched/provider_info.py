"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``).

Importing this module must stay cheap: it imports nothing from Airflow or the rest of the package.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_gpusched import __version__
from airflow_provider_gpusched.core.options import provider_config

PACKAGE = "airflow_provider_gpusched"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-gpusched",
        "name": "GPU scheduling (local GPUs and Slurm)",
        "description": "Schedule GPU work for ML research from Airflow: Slurm jobs (deferrable), "
        "Python callables as Slurm jobs, sweeps, idle-time filling and pipeline partitioning.",
        "versions": [__version__],
        "integrations": [
            {"integration-name": "Slurm", "external-doc-url": "https://slurm.schedmd.com/", "tags": ["software"]},
            {
                "integration-name": "Local GPUs",
                "external-doc-url": "https://developer.nvidia.com/management-library-nvml",
                "tags": ["software"],
            },
            {"integration-name": "Pipeline partitioning", "tags": ["software"]},
        ],
        "extra-links": [
            f"{PACKAGE}.links.SlurmJobLink",
            f"{PACKAGE}.links.GPULeaseLink",
            f"{PACKAGE}.links.SweepLeaderboardLink",
        ],
        "hooks": [
            {"integration-name": "Slurm", "python-modules": [f"{PACKAGE}.hooks.slurm"]},
            {"integration-name": "Local GPUs", "python-modules": [f"{PACKAGE}.hooks.local_gpu"]},
        ],
        "operators": [
            {"integration-name": "Slurm", "python-modules": [f"{PACKAGE}.operators.slurm"]},
            {"integration-name": "Local GPUs", "python-modules": [f"{PACKAGE}.operators.local_gpu"]},
            {"integration-name": "Pipeline partitioning", "python-modules": [f"{PACKAGE}.operators.partition"]},
        ],
        "sensors": [
            {"integration-name": "Slurm", "python-modules": [f"{PACKAGE}.sensors.slurm"]},
            {"integration-name": "Local GPUs", "python-modules": [f"{PACKAGE}.sensors.local_gpu"]},
        ],
        "triggers": [
            {"integration-name": "Slurm", "python-modules": [f"{PACKAGE}.triggers.slurm"]},
            {"integration-name": "Local GPUs", "python-modules": [f"{PACKAGE}.triggers.local_gpu"]},
        ],
        "notifications": [
            f"{PACKAGE}.notifications.notifiers.EmailNotifier",
            f"{PACKAGE}.notifications.notifiers.WebhookNotifier",
        ],
        "task-decorators": [
            {"class-name": f"{PACKAGE}.decorators.slurm.slurm_task", "name": "slurm"},
            {"class-name": f"{PACKAGE}.decorators.local_gpu.local_gpu_task", "name": "local_gpu"},
        ],
        "connection-types": [
            {
                "hook-class-name": f"{PACKAGE}.hooks.slurm.SlurmHook",
                "hook-name": "Slurm",
                "connection-type": "slurm",
                "conn-fields": {
                    "partition": {"label": "Default partition", "schema": {"type": ["string", "null"]}},
                    "account": {"label": "Default account", "schema": {"type": ["string", "null"]}},
                    "qos": {"label": "Default QOS", "schema": {"type": ["string", "null"]}},
                    "sbatch_options": {
                        "label": "Default sbatch options",
                        "schema": {"type": ["string", "null"]},
                        "description": "Extra sbatch options for every job, e.g. --exclusive --constraint=a100",
                    },
                    "idle_partition": {
                        "label": "Partition for idle-class jobs",
                        "schema": {"type": ["string", "null"], "default": "idle"},
                        "description": "Preemptible partition (PreemptMode=REQUEUE) that job_class='idle' uses",
                    },
                    "idle_qos": {"label": "QOS for idle-class jobs", "schema": {"type": ["string", "null"]}},
                    "slurm_conf": {
                        "label": "SLURM_CONF path",
                        "schema": {"type": ["string", "null"]},
                        "description": "slurm.conf to use when it is not in the default place",
                    },
                    "ssh_options": {
                        "label": "Extra ssh options",
                        "schema": {"type": ["string", "null"]},
                        "description": "Used only with a login host, e.g. -i /keys/id_ed25519",
                    },
                },
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "password", "extra"],
                    "relabeling": {
                        "host": "Login host (empty: run Slurm commands here)",
                        "login": "SSH user",
                        "port": "SSH port",
                    },
                    "placeholders": {
                        "host": "login.cluster.example.org",
                        "login": "your-user",
                        "port": "22",
                        "partition": "gpu",
                        "sbatch_options": "--exclusive",
                    },
                },
            }
        ],
        "plugins": [{"name": "gpusched", "plugin-class": f"{PACKAGE}.plugins.GpuschedPlugin"}],
        # `airflow gpusched ...`: the gpusched command as a group of Airflow's CLI (cli_airflow.py)
        "cli": [f"{PACKAGE}.cli_airflow.get_cli_commands"],
        "config": provider_config(),
    }
