"""The Slurm wing's part of the provider metadata (provider_parts/__init__.py): its integration, link, hook,
operator, sensor, trigger, task decorator and connection type. Data only."""

from typing import Any

PACKAGE = "airflow_provider_gpusched"
INTEGRATION = "Slurm"

PROVIDER_INFO: dict[str, list[Any]] = {
    "integrations": [
        {"integration-name": INTEGRATION, "external-doc-url": "https://slurm.schedmd.com/", "tags": ["software"]}
    ],
    "extra-links": [f"{PACKAGE}.links.SlurmJobLink"],
    "hooks": [{"integration-name": INTEGRATION, "python-modules": [f"{PACKAGE}.hooks.slurm"]}],
    "operators": [{"integration-name": INTEGRATION, "python-modules": [f"{PACKAGE}.operators.slurm"]}],
    "sensors": [{"integration-name": INTEGRATION, "python-modules": [f"{PACKAGE}.sensors.slurm"]}],
    "triggers": [{"integration-name": INTEGRATION, "python-modules": [f"{PACKAGE}.triggers.slurm"]}],
    "task-decorators": [{"class-name": f"{PACKAGE}.decorators.slurm.slurm_task", "name": "slurm"}],
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
}
