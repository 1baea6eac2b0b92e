"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``).

The shared part is here; each built-in backend wing adds its own entries (its hooks, operators, connection
type...) from its part in provider_parts/, listed in a stable order: the wings' entries first, in
core/backends.py's registration order, then the shared ones.

Importing this module must stay cheap: it imports nothing from Airflow or the rest of the package but its
version, the provider's config options and the wings' data-only parts.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from airflow_provider_gpusched import __version__
from airflow_provider_gpusched.core.options import provider_config
from airflow_provider_gpusched.provider_parts import BUILT_IN

PACKAGE = "airflow_provider_gpusched"

#: the metadata's lists, in their order: a wing's part adds to these (and only these)
LISTS = (
    "integrations",
    "extra-links",
    "hooks",
    "operators",
    "sensors",
    "triggers",
    "notifications",
    "task-decorators",
    "connection-types",
)

#: the entries no one wing owns
SHARED: dict[str, list[Any]] = {
    "integrations": [{"integration-name": "Pipeline partitioning", "tags": ["software"]}],
    "extra-links": [f"{PACKAGE}.links.SweepLeaderboardLink"],
    "operators": [{"integration-name": "Pipeline partitioning", "python-modules": [f"{PACKAGE}.operators.partition"]}],
    "notifications": [
        f"{PACKAGE}.notifications.notifiers.EmailNotifier",
        f"{PACKAGE}.notifications.notifiers.WebhookNotifier",
    ],
}


def wing_parts() -> list[dict[str, list[Any]]]:
    """Each built-in wing's ``PROVIDER_INFO`` (provider_parts/), in the order of ``BUILT_IN``."""
    return [import_module(f"{PACKAGE}.provider_parts.{name}").PROVIDER_INFO for name in BUILT_IN]


def get_provider_info() -> dict[str, Any]:
    parts = [*wing_parts(), SHARED]
    info: dict[str, Any] = {
        "package-name": "airflow-provider-gpusched",
        "name": "GPU scheduling (local GPUs and Slurm)",
        "description": "Schedule GPU work for ML research from Airflow: Slurm jobs (deferrable), "
        "Python callables as Slurm jobs, sweeps, idle-time filling and pipeline partitioning.",
        "versions": [__version__],
    }
    for key in LISTS:
        entries = [entry for part in parts for entry in part.get(key, ())]
        if entries:
            info[key] = entries
    info["plugins"] = [{"name": "gpusched", "plugin-class": f"{PACKAGE}.plugins.GpuschedPlugin"}]
    # `airflow gpusched ...`: the gpusched command as a group of Airflow's CLI (cli_airflow.py)
    info["cli"] = [f"{PACKAGE}.cli_airflow.get_cli_commands"]
    info["config"] = provider_config()
    return info
