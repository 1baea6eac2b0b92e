"""The local GPU wing's part of the provider metadata (provider_parts/__init__.py): its integration, link, hook,
operator, sensor, trigger and task decorator. Data only."""

from typing import Any

PACKAGE = "airflow_provider_gpusched"
INTEGRATION = "Local GPUs"

PROVIDER_INFO: dict[str, list[Any]] = {
    "integrations": [
        {
            "integration-name": INTEGRATION,
            "external-doc-url": "https://developer.nvidia.com/management-library-nvml",
            "tags": ["software"],
        }
    ],
    "extra-links": [f"{PACKAGE}.links.GPULeaseLink"],
    "hooks": [{"integration-name": INTEGRATION, "python-modules": [f"{PACKAGE}.hooks.local_gpu"]}],
    "operators": [{"integration-name": INTEGRATION, "python-modules": [f"{PACKAGE}.operators.local_gpu"]}],
    "sensors": [{"integration-name": INTEGRATION, "python-modules": [f"{PACKAGE}.sensors.local_gpu"]}],
    "triggers": [{"integration-name": INTEGRATION, "python-modules": [f"{PACKAGE}.triggers.local_gpu"]}],
    "task-decorators": [{"class-name": f"{PACKAGE}.decorators.local_gpu.local_gpu_task", "name": "local_gpu"}],
}
