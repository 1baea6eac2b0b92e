"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``).

Importing this module must stay cheap: it imports nothing from Airflow or the rest of the package.
"""

from __future__ import annotations

from airflow_provider_gpusched import __version__

PACKAGE = "airflow_provider_gpusched"


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-provider-gpusched",
        "name": "GPU scheduling (local GPUs and Slurm)",
        "description": "Schedule GPU work for ML research from Airflow: Slurm jobs (deferrable), "
                       "Python callables as Slurm jobs, sweeps, idle-time filling and pipeline partitioning.",
        "versions": [__version__],
        "integrations": [
            {"integration-name": "Slurm", "external-doc-url": "https://slurm.schedmd.com/", "tags": ["software"]},
            {"integration-name": "Local GPUs", "external-doc-url": "https://developer.nvidia.com/management-library-nvml",
             "tags": ["software"]},
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
                    "relabeling": {"host": "Login host (empty: run Slurm commands here)",
                                   "login": "SSH user", "port": "SSH port"},
                    "placeholders": {"host": "login.cluster.example.org", "login": "your-user", "port": "22",
                                     "partition": "gpu", "sbatch_options": "--exclusive"},
                },
            }
        ],
        "config": {
            "gpusched": {
                "description": "Settings of airflow-provider-gpusched.",
                "options": {
                    "slurm_poll_interval": {
                        "description": "Seconds between two squeue calls of the shared Slurm poller "
                                       "(one call covers every job the triggerer tracks).",
                        "version_added": "0.1.0", "type": "float", "example": "10", "default": "10",
                    },
                    "slurm_not_found_timeout": {
                        "description": "Seconds a tracked job may be unknown to squeue and the completion "
                                       "record before its task fails.",
                        "version_added": "0.1.0", "type": "float", "example": "300", "default": "300",
                    },
                    "slurm_output_dir": {
                        "description": "Directory for job output files and Python-callable payloads "
                                       "(must be on a file system the compute nodes share). "
                                       "Empty: <AIRFLOW_HOME>/gpusched/slurm.",
                        "version_added": "0.1.0", "type": "string", "example": "/shared/airflow/slurm",
                        "default": "",
                    },
                    "default_deferrable": {
                        "description": "Whether Slurm operators and sensors defer by default.",
                        "version_added": "0.1.0", "type": "boolean", "example": "True", "default": "True",
                    },
                    "simulate_gpus": {
                        "description": "Simulated GPU inventory used where NVML finds no GPU, e.g. 4x24GiB "
                                       "(tests and demos on CPU-only machines; reported as simulated). "
                                       "Empty: no simulation, a clear error without GPUs.",
                        "version_added": "0.1.0", "type": "string", "example": "4x24GiB", "default": "",
                    },
                    "gpu_state_dir": {
                        "description": "Directory of the host's GPU lease files, shared by every Airflow "
                                       "process of this user on the host; created 0700 and refused when another "
                                       "user owns it or it is writable by others. Empty: <tmp>/gpusched-<uid>.",
                        "version_added": "0.1.0", "type": "string", "example": "/var/lib/gpusched",
                        "default": "",
                    },
                    "gpu_state_dir_shared": {
                        "description": "The lease directory is a group directory that several Unix users "
                                       "share on purpose (install -d -m 2770 -g GROUP DIR): accept it "
                                       "group-writable and owned by another member or root. Never world-writable.",
                        "version_added": "0.1.0", "type": "boolean", "example": "True", "default": "False",
                    },
                    "gpu_poll_interval": {
                        "description": "Seconds between checks while a task waits (deferred) for GPUs.",
                        "version_added": "0.1.0", "type": "float", "example": "5", "default": "5",
                    },
                    "min_deferral": {
                        "description": "Seconds a deferred task (waiting for GPUs or a Slurm job) stays deferred "
                                       "at least: an event sooner after the deferral can make Airflow 3.3 fail "
                                       "the task (apache/airflow#72716). 0 turns the floor off.",
                        "version_added": "0.1.0", "type": "float", "example": "10", "default": "10",
                    },
                    "local_run_dir": {
                        "description": "Per-run working directories and logs of local GPU tasks. "
                                       "Empty: <AIRFLOW_HOME>/gpusched/local.",
                        "version_added": "0.1.0", "type": "string", "example": "/scratch/airflow-runs",
                        "default": "",
                    },
                    "sweep_results_root": {
                        "description": "Where sweeps keep trial folders, manifests, leaderboards (a shared file "
                                       "system when trials run on Slurm nodes). Empty: <AIRFLOW_HOME>/gpusched/sweeps.",
                        "version_added": "0.1.0", "type": "string", "example": "/shared/sweeps", "default": "",
                    },
                    "job_classes": {
                        "description": "The job-class mapping: a YAML/JSON file path or inline YAML/JSON. It turns "
                                       "job_class (normal/idle) and priority into the Airflow pool, pool_slots and "
                                       "priority_weight, the Slurm partition/qos/nice/requeue, and the local-GPU "
                                       "preemption policy (grace_period, min_runtime, max_preemptions, backoff, "
                                       "idle_for, max_utilization, max_foreign_memory). Empty: built-in defaults "
                                       "(docs/idle-filling.md).",
                        "version_added": "0.1.0", "type": "string", "example": "/etc/airflow/gpusched-classes.yaml",
                        "default": "",
                    },
                    "output_tail_lines": {
                        "description": "Lines of a job's output quoted in the task log when it finishes, and "
                                       "shown on the UI's Slurm job page.",
                        "version_added": "0.1.0", "type": "integer", "example": "40", "default": "40",
                    },
                    "ui_live_slurm": {
                        "description": "Whether the api-server may refresh a running Slurm job's state on the "
                                       "UI's Slurm job page through its own local Slurm commands (one shared "
                                       "poll per 10 s for all open pages; only for jobs submitted through the "
                                       "local Slurm CLI). Off: the page shows what the task recorded.",
                        "version_added": "0.1.0", "type": "boolean", "example": "True", "default": "True",
                    },
                },
            }
        },
    }
