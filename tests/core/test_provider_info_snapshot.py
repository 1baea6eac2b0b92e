"""The provider metadata Airflow reads (provider_info.py) stays what it was when each backend's entries were still
written in one place: a snapshot of its value, taken before the entries move to the backends' wings."""

from airflow_provider_gpusched import __version__
from airflow_provider_gpusched.core.options import provider_config
from airflow_provider_gpusched.provider_info import get_provider_info

SNAPSHOT = {
    "cli": ["airflow_provider_gpusched.cli_airflow.get_cli_commands"],
    "connection-types": [
        {
            "conn-fields": {
                "account": {"label": "Default account", "schema": {"type": ["string", "null"]}},
                "idle_partition": {
                    "description": "Preemptible partition (PreemptMode=REQUEUE) that job_class='idle' uses",
                    "label": "Partition for idle-class jobs",
                    "schema": {"default": "idle", "type": ["string", "null"]},
                },
                "idle_qos": {"label": "QOS for idle-class jobs", "schema": {"type": ["string", "null"]}},
                "partition": {"label": "Default partition", "schema": {"type": ["string", "null"]}},
                "qos": {"label": "Default QOS", "schema": {"type": ["string", "null"]}},
                "sbatch_options": {
                    "description": "Extra sbatch options for every job, e.g. --exclusive --constraint=a100",
                    "label": "Default sbatch options",
                    "schema": {"type": ["string", "null"]},
                },
                "slurm_conf": {
                    "description": "slurm.conf to use when it is not in the default place",
                    "label": "SLURM_CONF path",
                    "schema": {"type": ["string", "null"]},
                },
                "ssh_options": {
                    "description": "Used only with a login host, e.g. -i /keys/id_ed25519",
                    "label": "Extra ssh options",
                    "schema": {"type": ["string", "null"]},
                },
            },
            "connection-type": "slurm",
            "hook-class-name": "airflow_provider_gpusched.hooks.slurm.SlurmHook",
            "hook-name": "Slurm",
            "ui-field-behaviour": {
                "hidden-fields": ["schema", "password", "extra"],
                "placeholders": {
                    "host": "login.cluster.example.org",
                    "login": "your-user",
                    "partition": "gpu",
                    "port": "22",
                    "sbatch_options": "--exclusive",
                },
                "relabeling": {
                    "host": "Login host (empty: run Slurm commands here)",
                    "login": "SSH user",
                    "port": "SSH port",
                },
            },
        }
    ],
    "description": "Schedule GPU work for ML research from Airflow: Slurm jobs (deferrable), Python callables "
    "as Slurm jobs, sweeps, idle-time filling and pipeline partitioning.",
    "extra-links": [
        "airflow_provider_gpusched.links.SlurmJobLink",
        "airflow_provider_gpusched.links.GPULeaseLink",
        "airflow_provider_gpusched.links.SweepLeaderboardLink",
    ],
    "hooks": [
        {"integration-name": "Slurm", "python-modules": ["airflow_provider_gpusched.hooks.slurm"]},
        {"integration-name": "Local GPUs", "python-modules": ["airflow_provider_gpusched.hooks.local_gpu"]},
    ],
    "integrations": [
        {"external-doc-url": "https://slurm.schedmd.com/", "integration-name": "Slurm", "tags": ["software"]},
        {
            "external-doc-url": "https://developer.nvidia.com/management-library-nvml",
            "integration-name": "Local GPUs",
            "tags": ["software"],
        },
        {"integration-name": "Pipeline partitioning", "tags": ["software"]},
    ],
    "name": "GPU scheduling (local GPUs and Slurm)",
    "notifications": [
        "airflow_provider_gpusched.notifications.notifiers.EmailNotifier",
        "airflow_provider_gpusched.notifications.notifiers.WebhookNotifier",
    ],
    "operators": [
        {"integration-name": "Slurm", "python-modules": ["airflow_provider_gpusched.operators.slurm"]},
        {"integration-name": "Local GPUs", "python-modules": ["airflow_provider_gpusched.operators.local_gpu"]},
        {
            "integration-name": "Pipeline partitioning",
            "python-modules": ["airflow_provider_gpusched.operators.partition"],
        },
    ],
    "package-name": "airflow-provider-gpusched",
    "plugins": [{"name": "gpusched", "plugin-class": "airflow_provider_gpusched.plugins.GpuschedPlugin"}],
    "sensors": [
        {"integration-name": "Slurm", "python-modules": ["airflow_provider_gpusched.sensors.slurm"]},
        {"integration-name": "Local GPUs", "python-modules": ["airflow_provider_gpusched.sensors.local_gpu"]},
    ],
    "task-decorators": [
        {"class-name": "airflow_provider_gpusched.decorators.slurm.slurm_task", "name": "slurm"},
        {"class-name": "airflow_provider_gpusched.decorators.local_gpu.local_gpu_task", "name": "local_gpu"},
    ],
    "triggers": [
        {"integration-name": "Slurm", "python-modules": ["airflow_provider_gpusched.triggers.slurm"]},
        {"integration-name": "Local GPUs", "python-modules": ["airflow_provider_gpusched.triggers.local_gpu"]},
    ],
}


def test_the_provider_info_is_the_snapshot():
    info = get_provider_info()
    assert info["versions"] == [__version__]
    assert info["config"] == provider_config()
    assert {k: v for k, v in info.items() if k not in ("versions", "config")} == SNAPSHOT
